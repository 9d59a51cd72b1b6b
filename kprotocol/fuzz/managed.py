"""Fuzz target for the gateway's managed-group request path: valid-looking requests, mutated field by field.

Each input is a short conversation with a fresh gateway handler (`compat.gateway.managed.ManagedGroups`)
whose managed group already has two stable classic members: every request starts as a valid request of
a group API (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, StreamsGroupHeartbeat, the describe, delete
and list APIs...), at a version the input picks, then fields are replaced with boundary integers, the
members' own ids and generation, other groups, empty or odd strings, emptied or duplicated lists; now and
then the encoded frame gets a trailing byte. The frame goes through the gateway's reader and handler,
then its timers run. What must hold: no exception escapes, nothing is answered COORDINATOR_NOT_AVAILABLE
because handling raised (only a failed state write may do that), every answer encodes at the request's
version, and the group stays consistent (members within the session bounds, a leader among them, a
protocol every member has).

    python -m kprotocol.fuzz managed --runs 1000000
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Iterator
from functools import cache
from typing import Any

GROUP, OTHER = "app", "other-app"
INTS = (0, 1, -1, 2, 5_999, 6_000, 1_800_000, 1_800_001, 2**31 - 1, -(2**31), 2**15 - 1, -(2**15), 255)
STRINGS = ("", GROUP, OTHER, "stream", "range", "consumer", "x" * 300, "\u00e9", "m-\x00")
MAX_REQUESTS = 6


@cache
def _templates() -> list[tuple[int, Any]]:
    """(api key, a valid request) of every group API, naming the managed group."""
    from kprotocol.registry import api_classes, message_class

    join, sync = message_class("JoinGroupRequest"), message_class("SyncGroupRequest")
    leave, hb = message_class("LeaveGroupRequest"), message_class("StreamsGroupHeartbeatRequest")
    delete = message_class("OffsetDeleteRequest")
    fetch = message_class("OffsetFetchRequest")
    subscription = _subscription()
    return [
        (11, join(group_id=GROUP, member_id="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                  protocol_type="consumer", protocols=[join.JoinGroupRequestProtocol(name="stream",
                                                                                     metadata=subscription)])),
        (14, sync(group_id=GROUP, generation_id=1, member_id="", protocol_type="consumer", protocol_name="stream",
                  assignments=[sync.SyncGroupRequestAssignment(member_id="", assignment=b"\x00\x01")])),
        (12, message_class("HeartbeatRequest")(group_id=GROUP, generation_id=1, member_id="")),
        (13, leave(group_id=GROUP, member_id="", members=[leave.MemberIdentity(member_id="")])),
        (88, hb(group_id=GROUP, member_id="s1", member_epoch=0, rebalance_timeout_ms=10_000, process_id="p",
                active_tasks=[], standby_tasks=[], warmup_tasks=[], topology=hb.Topology(epoch=0, subtopologies=[
                    hb.Subtopology(subtopology_id="0", source_topics=["in"])]))),
        (89, api_classes(89)[0](group_ids=[GROUP])),
        (15, api_classes(15)[0](groups=[GROUP])),
        (42, api_classes(42)[0](groups_names=[GROUP])),
        (47, delete(group_id=GROUP, topics=[delete.OffsetDeleteRequestTopic(
            name="in", partitions=[delete.OffsetDeleteRequestPartition(partition_index=0)])])),
        (68, api_classes(68)[0](group_id=GROUP, member_id="c1", member_epoch=0, rebalance_timeout_ms=1,
                                subscribed_topic_names=["in"], topic_partitions=[])),
        (69, api_classes(69)[0](group_ids=[GROUP, OTHER])),
        (76, api_classes(76)[0](group_id=GROUP, member_id="s", member_epoch=0, subscribed_topic_names=["in"])),
        (77, api_classes(77)[0](group_ids=[GROUP])),
        (9, fetch(group_id=GROUP, topics=None, groups=[fetch.OffsetFetchRequestGroup(group_id=GROUP, topics=None)])),
        (10, api_classes(10)[0](key=GROUP, key_type=0, coordinator_keys=[GROUP])),
    ]


@cache
def _subscription() -> bytes:
    """A Kafka Streams member's JoinGroup metadata (ConsumerProtocolSubscription v1 + SubscriptionInfo v11)."""
    import uuid

    from kprotocol.registry import message_class
    from kprotocol.streams import SubscriptionInfo, TaskId

    info = SubscriptionInfo(version=11, process_id=uuid.UUID(int=1), task_offset_sums=((TaskId(0, 0), -2),),
                            user_end_point="a:7070")
    subscription = message_class("ConsumerProtocolSubscription")
    message = subscription(topics=["in"], user_data=info.encode(),
                           owned_partitions=[subscription.TopicPartition(topic="in", partitions=[0])])
    return b"\x00\x01" + message.encode(1)


@cache
def _base() -> Any:
    """A coordinator whose managed group has two stable classic members (built once, copied per input)."""
    from compat.coordinator import MigrationCoordinator
    from kprotocol.registry import message_class

    header = message_class("RequestHeader")
    join, sync = message_class("JoinGroupRequest"), message_class("SyncGroupRequest")
    coordinator = MigrationCoordinator(classic_initial_delay_ms=0)
    metadata = _subscription()
    ids = []
    for n in range(2):
        request = join(group_id=GROUP, member_id="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                       protocol_type="consumer", protocols=[join.JoinGroupRequestProtocol(name="stream",
                                                                                          metadata=metadata)])
        answers, _ = coordinator.handle(("j", n), header(request_api_key=11, request_api_version=3,
                                                         correlation_id=n, client_id=f"c{n}"), request, 0)
        ids += [a.member_id for _, a in answers if a.member_id]
    group = coordinator.classic[GROUP]
    coordinator.handle("s", header(request_api_key=14, request_api_version=3, correlation_id=9, client_id="c"),
                       sync(group_id=GROUP, generation_id=group.generation, member_id=group.leader,
                            assignments=[sync.SyncGroupRequestAssignment(member_id=m, assignment=b"")
                                         for m in group.members]), 1)
    return coordinator


class _Run:
    """One input's gateway: a fresh handler over a copy of the base coordinator, on one event loop."""

    loop = asyncio.new_event_loop()

    def __init__(self) -> None:
        from compat.gateway.managed import ManagedGroups
        from compat.gateway.upstream import Upstream

        self.coordinator = copy.deepcopy(_base())
        self.managed = ManagedGroups([GROUP], self.coordinator, Upstream(("127.0.0.1", 1)), None,
                                     lambda: (1, "127.0.0.1", 9092))
        self.managed.topics.hold()  # no upstream: the topics stay as they are
        self.failures: list[str] = []
        self.managed._log_failure = self._failed

    def _failed(self, groups: Any, what: str, exc: BaseException, outcome: str = "") -> None:
        if not isinstance(exc, (OSError, asyncio.TimeoutError)):  # no upstream here: those are expected
            self.failures.append(f"{what}: {exc!r}")

    def values(self, data: Any) -> dict[str, list[Any]]:
        group = self.coordinator.classic.get(GROUP)
        members = list(group.members) if group else []
        streams = self.coordinator.streams.group(GROUP)
        members += list(streams.members) if streams else []
        generation = [group.generation] if group else []
        return {"str": [*STRINGS, *members, *self.coordinator.pending_ids(GROUP)], "int": [*INTS, *generation]}


def _mutate(value: Any, fdp: Any, known: dict[str, list[Any]], depth: int = 0) -> Any:
    """A message with some of its fields replaced (recursively into lists of structs)."""
    from kprotocol.runtime.struct import Message

    if not isinstance(value, Message) or depth > 2:
        return value
    changes = {}
    fields = list(type(value)._fields)
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        if not fields:
            break
        name = fields[fdp.ConsumeIntInRange(0, len(fields) - 1)]
        if name == "unknown_tagged_fields":
            continue
        current = getattr(value, name)
        changes[name] = _field(current, fdp, known, depth)
    return value.replace(**changes) if changes else value


def _field(current: Any, fdp: Any, known: dict[str, list[Any]], depth: int) -> Any:
    from kprotocol.runtime.struct import Message

    pick = fdp.ConsumeIntInRange(0, 9)
    if isinstance(current, bool):
        return not current
    if isinstance(current, int):
        choices = known["int"]
        return choices[pick % len(choices)] if pick < 8 else fdp.ConsumeIntInRange(-(2**31), 2**31 - 1)
    if isinstance(current, str) or (current is None and pick == 9):
        choices = known["str"]
        return choices[fdp.ConsumeIntInRange(0, len(choices) - 1)] if pick < 8 else \
            fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 40))
    if isinstance(current, bytes):
        return (b"", _subscription(), fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64)), current[:1])[pick % 4]
    if isinstance(current, (tuple, list)):
        items = list(current)
        if pick == 0:
            return []
        if pick == 1 and items:
            return items + items[:1]  # a duplicate
        if pick == 2 and items:
            return items[1:]
        return [_mutate(i, fdp, known, depth + 1) if isinstance(i, Message) else
                _field(i, fdp, known, depth + 1) for i in items]
    if isinstance(current, Message):
        return _mutate(current, fdp, known, depth + 1)
    return None if pick < 5 else current


def managed(data: bytes) -> None:
    """The target: see the module docstring."""
    import atheris

    from compat.gateway import lenient
    from kprotocol.errors import DecodeError, EncodeError
    from kprotocol.framing import decode_response, encode_request, encode_response
    from kprotocol.registry import message_class

    fdp = atheris.FuzzedDataProvider(data)
    run = _Run()
    loop = run.loop
    templates = _templates()
    pending: list[tuple[asyncio.Task, int, int]] = []
    for _ in range(fdp.ConsumeIntInRange(1, MAX_REQUESTS)):
        if fdp.remaining_bytes() == 0:
            break
        api_key, template = templates[fdp.ConsumeIntInRange(0, len(templates) - 1)]
        low, high = type(template).valid_versions
        version = fdp.ConsumeIntInRange(low, high)
        request = _mutate(template, fdp, run.values(fdp))
        header = message_class("RequestHeader")(request_api_key=api_key, request_api_version=version,
                                                correlation_id=7, client_id=fdp.ConsumeUnicodeNoSurrogates(8))
        try:
            frame = encode_request(header, request)
        except (EncodeError, ValueError, OverflowError):
            continue  # a value the field cannot carry at this version: no client could send it
        if fdp.ConsumeBool():
            frame = (len(frame) - 3).to_bytes(4, "big") + frame[4:] + b"\x00"
        try:
            header, request = lenient.decode_request(frame)
        except DecodeError:
            continue
        answer = loop.run_until_complete(_call(run.managed, header, request))
        if answer is None:
            continue
        pending.append((asyncio.ensure_future(answer, loop=loop), api_key, version))
        for _ in range(3):
            loop.run_until_complete(asyncio.sleep(0))
    try:
        now = int(time.time() * 1000)
        for shift in (0, 20_000, 2_000_000):
            for group_id in list({*run.coordinator.classic, *run.coordinator.streams.groups}):
                loop.run_until_complete(run.managed._poll(group_id, now + shift))
            loop.run_until_complete(asyncio.sleep(0))
        for task, api_key, version in pending:
            if task.done():
                frame = encode_response(message_class("ResponseHeader")(correlation_id=7), task.result(), version)
                decode_response(frame, api_key, version)
    finally:
        for task, _, _ in pending:
            task.cancel()
        loop.run_until_complete(_settle([t for t, _, _ in pending]))
    if run.failures:
        raise AssertionError(f"handling raised inside the gateway: {run.failures}")
    _check(run.coordinator)


async def _settle(tasks: list[asyncio.Future]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


async def _call(handler: Any, header: Any, request: Any) -> Any:
    return handler(header, request, "/127.0.0.1")  # inside the loop, as the proxy calls it


def _check(coordinator: Any) -> None:
    """What every classic group of the gateway must satisfy after any requests and timers."""
    for group in coordinator.classic.values():
        config = group.config
        for m in group.members.values():
            assert config.min_session_timeout_ms <= m.session_timeout_ms <= config.max_session_timeout_ms, m
        if group.members and group.state in ("CompletingRebalance", "Stable"):
            assert group.leader in group.members, (group.leader, list(group.members))
            for m in group.members.values():
                assert any(name == group.protocol_name for name, _ in m.protocols), (m.member_id, group.protocol_name)


def managed_seeds() -> Iterator[bytes]:
    """Inputs that reach each template at a few versions."""
    for n in range(len(_templates())):
        for version in (0, 3, 255):
            yield bytes([1, n, version, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8])

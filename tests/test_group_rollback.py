"""Each group's state rolls back in what changed (compat.group_state, kprotocol.timeline): a change that
raised at any point, or whose write failed, leaves the group exactly as it was; groups roll back
independently; pending member ids expire; a steady heartbeat does the same work at any group size."""

from __future__ import annotations

import dataclasses
import itertools
import struct
import sys
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat.classic import ClassicConfig, ClassicMembers
from compat.coordinator import MigrationCoordinator
from compat.group_state import GroupState
from compat.translate import assigned_tasks
from kprotocol.registry import message_class
from kprotocol.runtime.struct import Message
from kprotocol.streams import SubscriptionInfo, TaskId
from kprotocol.streams_group import GroupConfig
from kprotocol.streams_group.java_order import TimelineOrder
from kprotocol.streams_group.member import Owners
from kprotocol.timeline import ACTIVE, DeadlineMap

HB = message_class("StreamsGroupHeartbeatRequest")
Header = message_class("RequestHeader")
Join, Sync, Beat, Leave = (message_class(n) for n in ("JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest",
                                                       "LeaveGroupRequest"))
Subscription = message_class("ConsumerProtocolSubscription")
TOPOLOGY = HB.Topology(epoch=0, subtopologies=[HB.Subtopology(
    subtopology_id="0", source_topics=["input"], state_changelog_topics=[HB.TopicInfo(name="app-store-changelog")])])
TOPICS = {"input": 8, "app-store-changelog": 8}
tokens = itertools.count()


def header(api_key: int, version: int) -> Message:
    return Header(request_api_key=api_key, request_api_version=version, correlation_id=0, client_id="c")


def subscription(name: str, active: list[int]) -> bytes:
    info = SubscriptionInfo(version=11, process_id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
                            task_offset_sums=tuple((TaskId(0, p), -2) for p in active), user_end_point=f"{name}:7070")
    message = Subscription(topics=["input"], user_data=info.encode(),
                           owned_partitions=[Subscription.TopicPartition(topic="input", partitions=active)])
    return struct.pack(">h", 1) + message.encode(1)


def dump(value: Any) -> Any:
    """Everything a group's state holds, dict and list orders included, as plain comparable values."""
    if isinstance(value, GroupState):
        return ("GroupState", [(n, dump(getattr(value, n))) for n in
                               ("classic", "classic_info", "streams", "classic_members", "pending", "info_stamp")])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, [(f.name, dump(getattr(value, f.name))) for f in dataclasses.fields(value)])
    if isinstance(value, DeadlineMap):  # every deadline findable in its heap
        heap = set(value.heap)
        return ("deadlines", [(dump(k), dump(v), (value.deadline(v), k) in heap) for k, v in value.items()])
    if isinstance(value, ClassicMembers):
        return ("members", [(dump(k), dump(v)) for k, v in value.items()], dump(value.timers))
    if isinstance(value, dict):
        return ("dict", [(dump(k), dump(v)) for k, v in value.items()])
    if isinstance(value, (set, frozenset)):
        return ("set", sorted(map(repr, value)))
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if isinstance(value, TimelineOrder):
        return ("order", list(value), value.size, len(value.slots))
    if isinstance(value, Owners):
        return ("owners", dump(value.active), dump(value.standby), dump(value.warmup))
    return repr(value)


class Group:
    """Classic members c0..c2 (Kafka Streams clients) and streams-protocol members s0..s2 of group "app"."""

    def __init__(self, max_size: int = 2**31 - 1) -> None:
        config = GroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0)
        self.c = MigrationCoordinator(config, TOPICS, classic_initial_delay_ms=0,
                                      classic_config=ClassicConfig(max_size=max_size))
        self.now = 0
        self.ids: dict[str, str] = {}  # classic member -> its member id
        self.generation: dict[str, int] = {}
        self.owned: dict[str, list[int]] = {}
        self.epoch: dict[str, int] = {}
        self.endpoints: dict[str, int] = {}  # streams member -> the endpoint information epoch it knows

    def request(self, op: str, name: str) -> tuple[int, int, Message]:
        owned = self.owned.get(name, [])
        if op == "join":
            return 11, 9, Join(group_id="app", member_id=self.ids.get(name, ""), session_timeout_ms=10_000,
                               rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=[
                                   Join.JoinGroupRequestProtocol(name="stream", metadata=subscription(name, owned))])
        if op == "sync":
            return 14, 5, Sync(group_id="app", generation_id=self.generation.get(name, -1),
                               member_id=self.ids.get(name, name), protocol_type="consumer", protocol_name="stream",
                               assignments=[])
        if op == "beat":
            return 12, 4, Beat(group_id="app", generation_id=self.generation.get(name, -1),
                               member_id=self.ids.get(name, name))
        if op == "leave":
            return 13, 3, Leave(group_id="app", members=[Leave.MemberIdentity(member_id=self.ids.get(name, name))])
        epoch = self.epoch.get(name, 0)
        if op == "sleave":
            epoch = -1
        return 88, 1, HB(group_id="app", member_id=name, member_epoch=epoch, process_id=name,
                         rebalance_timeout_ms=10_000 if epoch == 0 else -1,
                         user_endpoint=HB.Endpoint(host=name, port=7070), topology=TOPOLOGY if epoch == 0 else None,
                         active_tasks=[HB.TaskIds(subtopology_id="0", partitions=owned)] if owned and epoch else [],
                         standby_tasks=[], warmup_tasks=[], endpoint_information_epoch=self.endpoints.get(name, 0),
                         task_offsets=[HB.TaskOffset(subtopology_id="0", partition=p, offset=50) for p in range(2)])

    def learn(self, op: str, name: str, answers: list) -> None:
        for _, response in answers:
            if op == "join" and response.member_id:
                self.ids[name] = response.member_id
                if response.error_code == 0:
                    self.generation[name] = response.generation_id
            elif op == "sync" and response.error_code == 0 and response.assignment:
                self.owned[name] = sorted(assigned_tasks(response.assignment).active.get("0", ()))
            elif op == "stream" and response.error_code == 0 and response.member_id == name:
                self.epoch[name] = response.member_epoch
                self.endpoints[name] = response.endpoint_information_epoch
                if response.active_tasks is not None:
                    self.owned[name] = sorted(p for t in response.active_tasks for p in t.partitions)
            elif op == "sleave":
                self.epoch.pop(name, None)
                self.owned.pop(name, None)

    def run(self, op: str, name: str) -> tuple[list, list]:
        if op == "poll":
            answers, records, _ = self.c.poll_group("app", self.now)
            return answers, records
        api, version, request = self.request(op, name)
        return self.c.handle(next(tokens), header(api, version), request, self.now)

    def state(self) -> Any:
        return dump(self.c._states.get("app"))


class Boom(Exception):
    pass


class Fuse(list):
    """Journal entries that blow up at the n-th change: a handler raising in the middle of its changes."""

    def __init__(self, entries: list, fuse: int) -> None:
        super().__init__(entries)
        self.fuse = fuse

    def append(self, entry: Any) -> None:
        if self.fuse == 0:
            raise Boom
        self.fuse -= 1
        super().append(entry)


OPS = st.tuples(st.sampled_from(["join", "sync", "beat", "leave", "stream", "stream", "sleave", "poll"]),
                st.integers(0, 2), st.integers(0, 12_000), st.one_of(st.none(), st.integers(0, 400)))


@settings(max_examples=max(120, settings.default.max_examples), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=30))
def test_a_failed_change_leaves_the_group_exactly_as_it_was(steps: list) -> None:
    """Random requests and timers; at random steps the change raises after a random number of its changes (or
    completes and its write fails): rolled back, the group's state equals what it was before, orders
    included, and the same step then runs as if nothing had happened."""
    g = Group()
    failed = 0
    for op, i, sleep, fuse in steps:
        name = f"s{i}" if op in ("stream", "sleave") else f"c{i}"
        g.now += sleep
        if fuse is not None and "app" in g.c._states:
            before = g.state()
            change = g.c.begin("app")
            journal = g.c._states["app"].journal
            real = journal.entries
            journal.entries = Fuse(real, fuse)
            try:
                g.run(op, name)
                g.c.next_deadline("app")  # as the gateway asks before the write (stale heap entries go)
            except Boom:
                failed += 1
            finally:
                kept = list(journal.entries)
                journal.entries = real
                real[:] = kept
            change.rollback()
            assert ACTIVE.journal is None
            state = g.state()
            assert state == before, (op, name, fuse)
            assert "False)" not in repr(state), "a deadline missing from its heap"
        change = g.c.begin("app")
        answers, _ = g.run(op, name)
        change.commit()
        g.learn(op, name, answers)


def test_rollback_of_one_group_after_another_committed() -> None:
    """Changes of different groups are independent: A rolls back after B committed later changes."""
    c = MigrationCoordinator(GroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0), TOPICS)

    def join(group: str, member: str, now: int) -> Message:
        request = HB(group_id=group, member_id=member, member_epoch=0, process_id=member, rebalance_timeout_ms=10_000,
                     topology=TOPOLOGY, active_tasks=[], standby_tasks=[], warmup_tasks=[])
        [(_, response)], records = c.handle(next(tokens), header(88, 1), request, now)
        assert response.error_code == 0 and records
        return response

    join("a", "a1", 0)
    join("b", "b1", 0)
    before_a = dump(c._states["a"])
    change_a = c.begin("a")
    join("a", "a2", 10)
    change_b = c.begin("b")
    join("b", "b2", 20)
    change_b.commit()
    after_b = dump(c._states["b"])
    join("a", "a3", 30)
    change_a.rollback()
    assert dump(c._states["a"]) == before_a and set(c.streams.group("a").members) == {"a1"}
    assert dump(c._states["b"]) == after_b and set(c.streams.group("b").members) == {"b1", "b2"}
    with pytest.raises(RuntimeError):
        change_a.commit()  # closed


def test_a_new_group_rolled_back_is_gone() -> None:
    c = MigrationCoordinator(GroupConfig(), TOPICS)
    change = c.begin("new")
    request = HB(group_id="new", member_id="m", member_epoch=0, process_id="m", rebalance_timeout_ms=10_000,
                 topology=TOPOLOGY, active_tasks=[], standby_tasks=[], warmup_tasks=[])
    c.handle(next(tokens), header(88, 1), request, 0)
    assert c.group_ids() == ["new"] and c.next_deadline("new") is not None
    change.rollback()
    assert c.group_ids() == [] and c.streams.group("new") is None and c.next_deadline("new") is None


@pytest.mark.parametrize("streams_group", [False, True])
def test_pending_member_ids_expire_after_the_session_time_out(streams_group: bool) -> None:
    """A JoinGroup without member id (v4+) gets one to rejoin with; unused, it expires after the session
    time-out (as Kafka's pending members do), in a classic group and in a streams group alike."""
    g = Group()
    if streams_group:
        g.learn("stream", "s0", g.run("stream", "s0")[0])
        assert g.c.streams.group("app") is not None
    [(_, first)], _ = g.run("join", "c0")
    assert first.error_code == 79 and first.member_id.startswith("c-")  # MEMBER_ID_REQUIRED
    pending = g.c.pending_ids("app") if streams_group else list(g.c.classic["app"].pending_ids)
    assert pending == [first.member_id]
    assert g.c.next_deadline("app") <= 10_000
    g.now = 9_999
    g.c.poll_group("app", g.now)
    assert first.member_id in (g.c.pending_ids("app") if streams_group else g.c.classic["app"].pending_ids)
    g.now = 10_000
    g.c.poll_group("app", g.now)
    assert g.c.pending_ids("app") == [] and (streams_group or not g.c.classic["app"].pending_ids)
    g.ids["c0"] = first.member_id
    [(_, late)], _ = g.run("join", "c0")
    assert late.error_code == 25  # UNKNOWN_MEMBER_ID: the id expired


@pytest.mark.parametrize("streams_group", [False, True])
def test_pending_member_ids_count_against_the_group_size(streams_group: bool) -> None:
    g = Group(max_size=3)
    if streams_group:
        g.learn("stream", "s0", g.run("stream", "s0")[0])
    answers = [g.run("join", f"c{i}")[0][0][1] for i in range(3)]
    held = 1 if streams_group else 0  # the streams-protocol member counts
    assert [a.error_code for a in answers] == [79] * (3 - held) + [81] * held  # GROUP_MAX_SIZE_REACHED
    assert answers[-1].member_id == "" if held else True
    assert g.run("join", "c9")[0][0][1].error_code == 81
    g.now = 10_000
    g.c.poll_group("app", g.now)
    assert g.run("join", "c9")[0][0][1].error_code == 79


def steady_group(shape: str, n: int) -> tuple[Group, list[tuple[str, str]]]:
    """A stable group of n members: streams-protocol members, or half classic, half streams (mid-migration);
    the initial delay batches the joins into one assignment."""
    g = Group()
    g.c = MigrationCoordinator(GroupConfig(initial_rebalance_delay_ms=3_000), {"input": 64, "app-store-changelog": 64},
                             classic_initial_delay_ms=0)
    classic = [f"c{i}" for i in range(n // 2)] if shape == "mixed" else []
    streams = [f"s{i}" for i in range(n - len(classic))]
    if classic:
        for name in classic:  # a classic group first: one generation, the leader assigns nothing
            g.learn("join", name, g.run("join", name)[0])
        for name in classic:
            g.learn("join", name, g.run("join", name)[0])
        g.c.poll_group("app", g.now)
    for _ in range(60):
        changed = False
        for name in streams:
            before = (g.epoch.get(name), g.owned.get(name), g.endpoints.get(name))
            g.learn("stream", name, g.run("stream", name)[0])
            changed |= before != (g.epoch.get(name), g.owned.get(name), g.endpoints.get(name))
        for name in classic:
            [(_, beat)], _ = g.run("beat", name)
            if beat.error_code:
                changed = True
                g.learn("join", name, g.run("join", name)[0])
                g.learn("sync", name, g.run("sync", name)[0])
        g.now += 1_000
        g.c.poll_group("app", g.now)
        if not changed and g.c.streams.group("app").state == "Stable":
            return g, [("stream", s) for s in streams[:3]] + [("beat", c) for c in classic[:3]]
    raise AssertionError("the group did not settle")


def work(g: Group, op: str, name: str) -> tuple[int, int]:
    """(Python calls, journal entries) of one request through the gateway's path (begin, handle, commit)."""
    api, version, request = g.request(op, name)
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    change = g.c.begin("app")
    sys.setprofile(count)
    try:
        [(_, response)], records = g.c.handle(next(tokens), header(api, version), request, g.now)
    finally:
        sys.setprofile(None)
    entries = [(e[0].__name__, e[2]) for e in g.c._states["app"].journal.entries]
    change.commit()
    assert response.error_code == 0 and records == []
    return calls, entries


@pytest.mark.parametrize("shape, size", [("streams", 1000), ("mixed", 500)])
def test_a_steady_heartbeat_does_the_same_work_at_any_group_size(shape: str, size: int) -> None:
    """No copy, scan or rebuild of the group per steady heartbeat: the calls made and the changes journaled
    (its session time-out) are the same at 1000 members (500 mid-migration: its classic members' SyncGroups
    carry every host's partitions, the set-up is quadratic) as at 10."""
    small, probes_small = steady_group(shape, 10)
    large, probes_large = steady_group(shape, size)
    for (op, s), (_, l) in zip(probes_small, probes_large):
        small_work, large_work = work(small, op, s), work(large, op, l)
        assert len(large_work[1]) == len(small_work[1]) == 1, (op, small_work, large_work)  # its session
        assert large_work[0] <= small_work[0] + 5, (op, small_work, large_work)


def test_a_member_removed_and_rolled_back_keeps_its_place() -> None:
    """Dicts keep their order through a roll-back: the classic leader is the first member, and Kafka's
    orders of members follow the insertion order."""
    g = Group()
    for name in ("c0", "c1", "c2"):
        g.learn("join", name, g.run("join", name)[0])
    for name in ("c0", "c1", "c2"):
        g.learn("join", name, g.run("join", name)[0])
    g.c.poll_group("app", g.now)
    members = list(g.c.classic["app"].members)
    assert len(members) == 3
    before = g.state()
    change = g.c.begin("app")
    answers, _ = g.run("leave", "c0")
    assert answers[0][1].members[0].error_code == 0 and list(g.c.classic["app"].members) == members[1:]
    change.rollback()
    assert list(g.c.classic["app"].members) == members and g.state() == before

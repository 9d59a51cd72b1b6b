"""The groups the gateway coordinates itself: the gateway's local handler.

FindCoordinator for a managed group names the gateway; the group APIs (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, StreamsGroupHeartbeat, StreamsGroupDescribe) go to the migration
coordinator; offsets are checked against the member's generation or epoch there, then stored
upstream under the same group id as an admin would write them (no generation, no member), which
the broker accepts because it has no members of that group: after the migration the application
talks to the brokers directly and finds its offsets. Every other request naming a managed group
is answered here as the broker would (group_apis.py), never forwarded. Time-outs run on a ticker;
every record is appended to the state log first, so a restarted gateway resumes each group.

Each group is isolated (compat/group_state.py): a change whose handling raises, or whose records cannot be
written, is rolled back and its request answered COORDINATOR_NOT_AVAILABLE; the ticker runs each
group's timers alone and never stops.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from compat.coordinator import MigrationCoordinator
from compat.gateway import group_apis as apis
from compat.gateway.state import StateLog, StateTopic
from compat.gateway.supervisor import Throttle
from compat.group_state import Change
from compat.gateway.upstream import Upstream
from kprotocol.errors import DecodeError
from kprotocol.registry import api_classes, message_class
from kprotocol.runtime.struct import Message
from kprotocol.streams_group.errors import STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
from kprotocol.streams_group.records import CoordinatorRecord

log = logging.getLogger("kprotocol.gateway")
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, TXN_OFFSET_COMMIT, STREAMS_GROUP_DESCRIBE = 8, 9, 10, 28, 89
COORDINATED = {11, 12, 13, 14, 88}  # JoinGroup, Heartbeat, LeaveGroup, SyncGroup, StreamsGroupHeartbeat
API_KEYS = apis.API_KEYS  # every request the gateway reads (Produce, Fetch and the rest pass undecoded)
TOPICS_MAX_AGE_S = 0.5
TICK_S = 0.1
PERSISTENCE_ERRORS = (OSError, ConnectionError, asyncio.TimeoutError)
ZERO_UUID = uuid.UUID(int=0)
SUBSCRIPTION = message_class("ConsumerProtocolSubscription")


def now_ms() -> int:
    return int(time.time() * 1000)


class ManagedGroups:
    """`handler(header, request, client_host)`: an awaitable answer for a managed group, else None."""

    def __init__(self, groups: Collection[str], coordinator: MigrationCoordinator, upstream: Upstream,
                 state: StateLog | StateTopic | None, listener: Any,
                 lists_groups: Callable[[], bool] | None = None) -> None:
        self.groups = set(groups)
        self.coordinator = coordinator
        self.upstream = upstream
        self.state = state
        self.listener = listener  # () -> (node id, host, port) of the gateway listener to name as coordinator
        self.lists_groups = lists_groups  # () -> whether this connection's ListGroups shows the managed groups
        self._tokens = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}
        self._topics_at = 0.0
        self._topic_names: dict[uuid.UUID, str] = {}
        self._ticker: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._due: dict[str, int] = {}  # group -> its next deadline (0: unknown), when a roll-back copy is needed
        self._retry_at: dict[str, int] = {}  # group -> when its timers run again after a failure
        self._failing_since: float | None = None  # state writes failing since (monotonic), and for which groups
        self._failing_groups: set[str] = set()
        self._throttle = Throttle(60.0)

    async def start(self) -> None:
        if self.state is not None:
            records = await _maybe_await(self.state.load())
            self.coordinator.replay(records, now_ms())
            resumed = self.coordinator.group_ids()
            log.info("resumed %d groups from %d records in %s%s", len(resumed), len(records), self.state.path,
                     f": {', '.join(resumed)}" if resumed else "")
        self._ticker = asyncio.create_task(self._tick())

    async def stop_timers(self) -> None:
        """No more time-outs: a gateway going down must not expire the sessions of members that are
        only waiting for it to come back (a restarted gateway gives every member a fresh session)."""
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None

    async def close(self) -> None:
        await self.stop_timers()
        self.upstream.close()

    def __call__(self, header: Message, request: Message, client_host: str) -> Awaitable[Message] | None:
        api_key, version = header.request_api_key, header.request_api_version
        if api_key == FIND_COORDINATOR:
            return self._find_coordinator(header, request)
        if api_key == apis.LIST_GROUPS:
            return self._guard(header, request, [], self._list_groups(header, request))
        named = apis.named_groups(api_key, version, request)
        managed = [g for g in named if g in self.groups]
        if not managed:
            return None
        if len(managed) < len(named):  # some of a request's groups are managed: those answered here, the rest upstream
            return self._guard(header, request, managed, self._split(header, request, managed))
        return self._guard(header, request, managed, self._answer(header, request, client_host))

    async def _answer(self, header: Message, request: Message, client_host: str) -> Message:
        """The answer to a request naming managed groups only."""
        api_key, version = header.request_api_key, header.request_api_version
        if api_key in COORDINATED:
            return await self._coordinate(header, request, client_host)
        if api_key == STREAMS_GROUP_DESCRIBE:
            async with self._lock:
                return self.coordinator.handle(None, header, request, now_ms())[0][0][1]
        if api_key in (OFFSET_COMMIT, TXN_OFFSET_COMMIT):
            return await self._offset_commit(header, request)
        if api_key == OFFSET_FETCH:
            return await self._offset_fetch(header, request)
        if api_key == apis.DESCRIBE_GROUPS:
            return self._describe_groups(request)
        if api_key == apis.DELETE_GROUPS:
            return await self._delete_groups(header, request)
        if api_key == apis.OFFSET_DELETE:
            return await self._offset_delete(header, request)
        if api_key in (apis.CONSUMER_GROUP_DESCRIBE, apis.SHARE_GROUP_DESCRIBE):
            return apis.describe_other_kind(api_key, version, request, set(self.coordinator.group_ids()))
        if api_key == apis.DESCRIBE_SHARE_GROUP_OFFSETS:
            return apis.describe_share_offsets(version, request)
        if api_key == apis.STREAMS_GROUP_TOPOLOGY_UPDATE:
            return apis.topology_update_unsupported(request)
        return apis.not_this_kind(api_key, version, request)

    def _guard(self, header: Message, request: Message, groups: list[str],
               answer: Awaitable[Message]) -> Awaitable[Message]:
        """The answer, or COORDINATOR_NOT_AVAILABLE when producing it failed (logged once per group and cause)."""
        async def guarded() -> Message:
            try:
                return await answer
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log_failure(groups, f"api {header.request_api_key} v{header.request_api_version}", exc)
                return apis.error_answer(header.request_api_key, header.request_api_version, request,
                                         apis.COORDINATOR_NOT_AVAILABLE)
        return guarded()

    def _log_failure(self, groups: Collection[str], what: str, exc: BaseException,
                     outcome: str = "answered COORDINATOR_NOT_AVAILABLE, the group kept as it was") -> None:
        """One line per group, what failed and cause a minute (with how many were held back)."""
        key = (tuple(groups), what, type(exc).__name__)
        if self._throttle.ready(key):
            more = self._throttle.suppressed(key)
            log.error("group %s: %s failed (%s)%s: %s: %s", ",".join(groups) or "*", what, outcome,
                      f", {more} more since" if more else "", type(exc).__name__, exc,
                      exc_info=not isinstance(exc, PERSISTENCE_ERRORS))

    # --- coordination ---------------------------------------------------------------------------

    async def _coordinate(self, header: Message, request: Message, client_host: str) -> Message:
        token = next(self._tokens)
        group_id = request.group_id
        future = self._waiting[token] = asyncio.get_running_loop().create_future()
        try:
            async with self._lock:
                if header.request_api_key in (11, 88):
                    await self._refresh_topics()
                change = self.coordinator.begin(group_id)
                was_classic = group_id in self.coordinator.classic
                try:
                    answers, records = self.coordinator.handle(token, header, request, now_ms(),
                                                               client_host=client_host)
                except Exception:
                    change.rollback()
                    raise
                if was_classic and self.coordinator.streams.group(group_id) is not None:
                    self._log_conversion(group_id)
                self._due[group_id] = 0
                if not await self._persist(group_id, records, change):
                    return apis.error_answer(header.request_api_key, header.request_api_version, request,
                                             apis.COORDINATOR_NOT_AVAILABLE)
                self._deliver(answers)
                try:
                    await self._create_internal_topics()
                except PERSISTENCE_ERRORS as exc:  # the change stands; the topics are asked for again next time
                    self._log_failure([group_id], "creating internal topics", exc, "asked again next time")
            response = await future
        finally:
            self._waiting.pop(token, None)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("group %s: api %d v%d from %s -> error %s", group_id, header.request_api_key,
                      header.request_api_version, getattr(request, "member_id", "?"),
                      getattr(response, "error_code", None))
        return response

    def _log_conversion(self, group_id: str) -> None:
        """One line when a classic group becomes a streams group, and a warning when its classic members ran more
        standby replicas than the gateway's `streams.num.standby.replicas` (a group config under KIP-1071)."""
        group = self.coordinator.streams.group(group_id)
        classic = self.coordinator.streams.classic_members.get(group_id, set())
        log.info("group %s: a streams-protocol member joined, now a streams group at epoch %d with %d classic "
                 "member(s)", group_id, group.epoch, len(classic))
        ran = self.coordinator.classic_standby_replicas(group_id)
        configured = self.coordinator.streams.config_for(group_id).assignment.num_standby_replicas
        if ran > configured:
            log.warning("group %s: its classic members ran %d standby replica(s) per task, the gateway's "
                        "streams.num.standby.replicas is %d: give --group-config streams.num.standby.replicas=%d "
                        "to keep them", group_id, ran, configured, ran)

    async def _persist(self, group_id: str, records: list[CoordinatorRecord], change: Change) -> bool:
        """Write `records` before anyone hears of them; if the write fails, roll the group back (the change is
        closed either way)."""
        if self.state is None or not records:
            change.commit()
            return True
        try:
            await _maybe_await(self.state.append(records))
        except BaseException as exc:
            change.rollback()
            if not isinstance(exc, PERSISTENCE_ERRORS):
                raise
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                log.error("state writes to %s failing (%s: %s): group %s answers COORDINATOR_NOT_AVAILABLE to "
                          "every change until a write succeeds", self.state.path, type(exc).__name__, exc, group_id)
            self._failing_groups.add(group_id)
            return False
        change.commit()
        if self._failing_since is not None:
            log.warning("state writes to %s succeed again after %.1f s: groups %s resume", self.state.path,
                        time.monotonic() - self._failing_since, ", ".join(sorted(self._failing_groups)))
            self._failing_since, self._failing_groups = None, set()
        return True

    def _deliver(self, answers: list[tuple[Any, Message]]) -> None:
        for token, response in answers:
            future = self._waiting.pop(token, None)
            if future is not None and not future.done():
                future.set_result(response)

    async def _tick(self) -> None:
        """Each group's timers, alone: an error in one group's stops neither the others nor the ticker."""
        while True:
            await asyncio.sleep(TICK_S)
            try:
                async with self._lock:
                    for group_id in self.coordinator.group_ids():
                        await self._poll(group_id, now_ms())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the ticker itself never dies
                self._log_failure(["*"], "the ticker", exc, "it goes on")

    async def _poll(self, group_id: str, now: int) -> None:
        """The group's timers at every tick; a copy to roll back to is taken when one of its deadlines is due
        (it changes nothing otherwise). After a failure, retried once a second."""
        if self._retry_at.get(group_id, 0) > now:
            return
        change = self.coordinator.begin(group_id)
        try:
            answers, records, due = self.coordinator.poll_group(group_id, now)
        except Exception as exc:
            change.rollback()
            self._due[group_id], self._retry_at[group_id] = 0, now + 1000
            self._log_failure([group_id], "timers", exc, "rolled back, retried in a second")
            return
        if not await self._persist(group_id, records, change):
            self._due[group_id], self._retry_at[group_id] = 0, now + 1000
            return
        self._retry_at.pop(group_id, None)
        self._due[group_id] = now + 1000 if due is None else min(due, now + 1000)
        self._deliver(answers)

    async def _refresh_topics(self) -> None:
        if time.monotonic() - self._topics_at < TOPICS_MAX_AGE_S:
            return
        response = await self.upstream.bootstrap.send(message_class("MetadataRequest")(topics=None))
        self.coordinator.set_topics({t.name: len(t.partitions) for t in response.topics
                                     if t.error_code == 0 and not t.is_internal})
        self._topic_names = {t.topic_id: t.name for t in response.topics if t.error_code == 0 and t.name}
        self._topics_at = time.monotonic()

    async def _create_internal_topics(self) -> None:
        wanted = self.coordinator.streams.internal_topics_to_create
        if not wanted:
            return
        create = message_class("CreateTopicsRequest")
        topics = [create.CreatableTopic(name=t.name, num_partitions=t.partitions,
                                        replication_factor=t.replication_factor,
                                        configs=[create.CreatableTopicConfig(name=k, value=v) for k, v in t.configs])
                  for t in wanted.values()]
        response = await self.upstream.bootstrap.send(create(topics=topics, timeout_ms=30_000))
        wanted.clear()
        log.info("created internal topics upstream: %s", {t.name: t.error_code for t in response.topics})
        self._topics_at = 0.0

    def _find_coordinator(self, header: Message, request: Message) -> Awaitable[Message] | None:
        version = header.request_api_version
        keys = [request.key] if version < 4 else list(request.coordinator_keys)
        if request.key_type != 0 or not keys or not all(k in self.groups for k in keys):
            return None
        node_id, host, port = self.listener()
        _, cls = api_classes(FIND_COORDINATOR)
        if version < 4:
            response = cls(node_id=node_id, host=host, port=port)
        else:
            response = cls(coordinators=[cls.Coordinator(key=k, node_id=node_id, host=host, port=port) for k in keys])
        return _ready(response)

    # --- the other group APIs -------------------------------------------------------------------

    def _kind(self, group_id: str) -> tuple[str, Any] | None:
        """("classic", group) or ("streams", group) of a managed group the gateway holds members of, or an
        empty one it still has; None when it holds nothing of it."""
        classic = self.coordinator.classic.get(group_id)
        if classic is not None:
            return "classic", classic
        streams = self.coordinator.streams.group(group_id)
        return ("streams", streams) if streams is not None else None

    def _describe_groups(self, request: Message) -> Message:
        """DescribeGroups: a classic group described as the broker does; a streams group is Dead to it."""
        _, cls = api_classes(apis.DESCRIBE_GROUPS)
        described = []
        for group_id in request.groups:
            kind = self._kind(group_id)
            if kind is None or kind[0] == "streams":
                described.append(cls.DescribedGroup(group_id=group_id, group_state="Dead", protocol_type="",
                                                    protocol_data="", members=[]))
                continue
            group = kind[1]
            stable = group.state == "Stable"
            described.append(cls.DescribedGroup(
                group_id=group_id, group_state=group.state, protocol_type=group.protocol_type or "",
                protocol_data=(group.protocol_name or "") if stable else "", members=[
                    cls.DescribedGroupMember(member_id=m.member_id, group_instance_id=m.instance_id,
                                             client_id=m.client_id, client_host=m.client_host,
                                             member_metadata=_metadata(m, group.protocol_name) if stable else b"",
                                             member_assignment=m.assignment if stable else b"")
                    for m in group.members.values()]))
        return cls(groups=described)

    def _active(self, group_id: str) -> tuple[str, Any] | None:
        kind = self._kind(group_id)
        return kind if kind is not None and kind[1].members else None

    async def _delete_groups(self, header: Message, request: Message) -> Message:
        """A group with members: NON_EMPTY_GROUP. An empty one: its records go (tombstones), then its
        offsets upstream, as the broker deletes an empty group."""
        _, cls = api_classes(apis.DELETE_GROUPS)
        results, empty = {}, []
        async with self._lock:
            for group_id in dict.fromkeys(request.groups_names):
                if self._active(group_id):
                    results[group_id] = cls.DeletableGroupResult(group_id=group_id, error_code=apis.NON_EMPTY_GROUP)
                    continue
                change = self.coordinator.begin(group_id)
                records = self.coordinator.forget(group_id)
                if not await self._persist(group_id, records, change):
                    results[group_id] = cls.DeletableGroupResult(group_id=group_id,
                                                                 error_code=apis.COORDINATOR_NOT_AVAILABLE)
                    continue
                empty.append(group_id)
        for group_id in empty:
            upstream = await self.upstream.coordinator(group_id)
            answer = await upstream.send(request.replace(groups_names=[group_id]), header.request_api_version)
            results[group_id] = answer.results[0]
        return cls(results=[results[g] for g in dict.fromkeys(request.groups_names)])

    async def _offset_delete(self, header: Message, request: Message) -> Message:
        """Partitions of the topics an active group reads: GROUP_SUBSCRIBED_TO_TOPIC; the rest (and every
        partition of an empty group) are deleted upstream."""
        _, cls = api_classes(apis.OFFSET_DELETE)
        active = self._active(request.group_id)
        subscribed = _subscribed_topics(*active) if active else set()
        kept = [t for t in request.topics if t.name in subscribed]
        rest = [t for t in request.topics if t.name not in subscribed]
        answers = [cls.OffsetDeleteResponseTopic(name=t.name, partitions=[cls.OffsetDeleteResponsePartition(
            partition_index=p.partition_index, error_code=apis.GROUP_SUBSCRIBED_TO_TOPIC) for p in t.partitions])
            for t in kept]
        if rest or not kept:
            upstream = await self.upstream.coordinator(request.group_id)
            answer = await upstream.send(request.replace(topics=rest), header.request_api_version)
            if answer.error_code and not kept:
                return answer
            answers += list(answer.topics)
        order = {t.name: i for i, t in enumerate(request.topics)}
        return cls(topics=sorted(answers, key=lambda t: order.get(t.name, 0)))

    async def _list_groups(self, header: Message, request: Message) -> Message:
        """The broker's list without the managed groups, then the managed groups as the gateway holds them
        (on the connection that names the gateway as their coordinator), filtered as Kafka filters."""
        from compat.gateway.proxy import current_target

        version = header.request_api_version
        target = current_target.get()
        upstream = self.upstream.connection(target) if target is not None else self.upstream.bootstrap
        answer = await upstream.send(request, version)
        if answer.error_code:
            return answer
        listed = [g for g in answer.groups if g.group_id not in self.groups]
        if self.lists_groups is None or self.lists_groups():
            _, cls = api_classes(apis.LIST_GROUPS)
            states = {s.lower() for s in (getattr(request, "states_filter", None) or ())}
            types = {t.lower() for t in (getattr(request, "types_filter", None) or ())}
            for group_id in sorted(self.groups):
                kind = self._kind(group_id)
                if kind is None:
                    continue
                name, group = kind
                state = group.state
                if (states and state.lower() not in states) or (types and name not in types):
                    continue
                protocol_type = (group.protocol_type or "") if name == "classic" else "streams"
                listed.append(cls.ListedGroup(group_id=group_id, protocol_type=protocol_type, group_state=state,
                                              group_type=name))
        return answer.replace(groups=listed)

    async def _split(self, header: Message, request: Message, managed: list[str]) -> Message:
        """A request naming managed and other groups: the managed part answered here, the rest by each
        group's coordinator upstream, merged in the request's order."""
        api_key, version = header.request_api_key, header.request_api_version
        named = apis.named_groups(api_key, version, request)
        ours = apis.with_groups(api_key, request, managed)
        parts = [await self._answer(header, ours, "")]
        by_address: dict[Any, list[str]] = {}
        for group_id in named:
            if group_id not in self.groups:
                connection = await self.upstream.coordinator(group_id)
                by_address.setdefault(id(connection), [connection]).append(group_id)
        for connection, *groups in by_address.values():
            parts.append(await connection.send(apis.with_groups(api_key, request, groups), version))
        _, cls = api_classes(api_key)
        return apis.merged(api_key, cls, named, parts)

    # --- offsets --------------------------------------------------------------------------------

    async def _offset_commit(self, header: Message, request: Message) -> Message:
        version = header.request_api_version
        transactional = header.request_api_key == TXN_OFFSET_COMMIT
        partitions = [(await self._topic_name(t), p.partition_index) for t in request.topics for p in t.partitions]
        error = self.coordinator.validate_commit(
            request.group_id, request.member_id if version >= (3 if transactional else 1) else "",
            request.generation_id_or_member_epoch if version >= (3 if transactional else 1) else -1,
            getattr(request, "group_instance_id", None), transactional, version, partitions)
        if error:
            log.info("group %s: %s v%d of member %s at epoch %d refused with error %d", request.group_id,
                     "TxnOffsetCommit" if transactional else "OffsetCommit", version, request.member_id,
                     request.generation_id_or_member_epoch, error)
            return commit_refusal(header.request_api_key, request, error)
        changes = {"generation_id_or_member_epoch": -1, "member_id": ""}
        if hasattr(request, "group_instance_id"):
            changes["group_instance_id"] = None
        upstream = await self.upstream.coordinator(request.group_id)
        return await upstream.send(request.replace(**changes), version)

    async def _offset_fetch(self, header: Message, request: Message) -> Message:
        version = header.request_api_version
        if version >= 8:
            for g in request.groups:
                member_id = getattr(g, "member_id", None)
                if member_id is not None:
                    error = self._check_fetch(g.group_id, member_id, g.member_epoch)
                    if error:
                        _, cls = api_classes(OFFSET_FETCH)
                        return cls(groups=[cls.OffsetFetchResponseGroup(group_id=x.group_id, error_code=error)
                                           for x in request.groups])
            request = request.replace(groups=[g.replace(member_id=None, member_epoch=-1)
                                              if hasattr(g, "member_epoch") else g for g in request.groups])
            group_id = request.groups[0].group_id
        else:
            group_id = request.group_id
        upstream = await self.upstream.coordinator(group_id)
        return await upstream.send(request, version)

    def _check_fetch(self, group_id: str, member_id: str, epoch: int) -> int:
        """0 when `member_id` at `epoch` may fetch the group's offsets (a classic member: its generation)."""
        group = self.coordinator.streams.group(group_id)
        if group is None or (epoch < 0 and not member_id):
            return 0
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        return 0 if epoch == member.member_epoch else STALE_MEMBER_EPOCH

    async def _topic_name(self, topic: Message) -> str | None:
        """The name of a commit's topic: named from v0 on, by id in OffsetCommit v10 and TxnOffsetCommit v6."""
        name = getattr(topic, "name", "")
        if name or topic.topic_id == ZERO_UUID:
            return name
        if topic.topic_id not in self._topic_names:
            self._topics_at = 0.0
            await self._refresh_topics()
        return self._topic_names.get(topic.topic_id)


def commit_refusal(api_key: int, request: Message, error: int) -> Message:
    """An OffsetCommit or TxnOffsetCommit answer refusing every partition of `request` with `error`,
    each topic named as the request named it (by name, or by id from OffsetCommit v10 and TxnOffsetCommit v6)."""
    _, cls = api_classes(api_key)
    transactional = api_key == TXN_OFFSET_COMMIT
    part = cls.TxnOffsetCommitResponsePartition if transactional else cls.OffsetCommitResponsePartition
    topic = cls.TxnOffsetCommitResponseTopic if transactional else cls.OffsetCommitResponseTopic
    return cls(topics=[topic(name=t.name, topic_id=t.topic_id,
                             partitions=[part(partition_index=p.partition_index, error_code=error)
                                         for p in t.partitions]) for t in request.topics])


def _metadata(member: Any, protocol: str | None) -> bytes:
    """A classic member's metadata for the group's protocol (empty when it has none)."""
    return dict(member.protocols).get(protocol, b"")


def _subscribed_topics(kind: str, group: Any) -> set[str]:
    """The topics an active group reads, as the broker judges OffsetDelete: a streams group's topology
    sources, a classic group's members' subscriptions (ConsumerProtocol, as Kafka Streams members send)."""
    if kind == "streams":
        topology = group.topology
        if topology is None:
            return set()
        return {t for s in topology.subtopologies for t in [*s.source_topics,
                                                             *(r.name for r in s.repartition_source_topics)]}
    topics: set[str] = set()
    for member in group.members.values():
        metadata = _metadata(member, group.protocol_name)
        try:
            low, high = SUBSCRIPTION.valid_versions
            version = max(low, min(int.from_bytes(metadata[:2], "big", signed=True), high))
            topics.update(SUBSCRIPTION.decode_prefix(metadata[2:], version)[0].topics)
        except (DecodeError, ValueError):  # not the consumer protocol: no topic known to be read
            continue
    return topics


async def _maybe_await(value: Any) -> Any:
    """The state log answers at once, the state topic after a round trip."""
    return await value if inspect.isawaitable(value) else value


def _ready(value: Message) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future

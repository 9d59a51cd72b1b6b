"""The groups the gateway coordinates itself: the gateway's local handler.

FindCoordinator for a managed group names the gateway; the group APIs (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, StreamsGroupHeartbeat, StreamsGroupDescribe) go to the migration
coordinator; offsets are checked against the member's generation or epoch there, then stored
upstream under the same group id as an admin would write them (no generation, no member), which
the broker accepts because it has no members of that group: after the migration the application
talks to the brokers directly and finds its offsets. Time-outs run on a ticker; every record is
appended to the state log first, so a restarted gateway resumes each group.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Collection
from typing import Any

from compat.coordinator import MigrationCoordinator
from compat.gateway.state import StateLog, StateTopic
from compat.gateway.upstream import Upstream
from kprotocol.registry import api_classes, message_class
from kprotocol.runtime.struct import Message
from kprotocol.streams_group.errors import STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
from kprotocol.streams_group.records import CoordinatorRecord

log = logging.getLogger("kprotocol.gateway")
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, TXN_OFFSET_COMMIT, STREAMS_GROUP_DESCRIBE = 8, 9, 10, 28, 89
COORDINATED = {11, 12, 13, 14, 88, 89}  # JoinGroup, Heartbeat, LeaveGroup, SyncGroup, StreamsGroup*
API_KEYS = frozenset({*COORDINATED, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, TXN_OFFSET_COMMIT})  # all it reads
TOPICS_MAX_AGE_S = 0.5
ZERO_UUID = uuid.UUID(int=0)


def now_ms() -> int:
    return int(time.time() * 1000)


class ManagedGroups:
    """`handler(header, request, client_host)`: an awaitable answer for a managed group, else None."""

    def __init__(self, groups: Collection[str], coordinator: MigrationCoordinator, upstream: Upstream,
                 state: StateLog | StateTopic | None, listener: Any) -> None:
        self.groups = set(groups)
        self.coordinator = coordinator
        self.upstream = upstream
        self.state = state
        self.listener = listener  # () -> (node id, host, port) of the gateway listener to name as coordinator
        self._tokens = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}
        self._topics_at = 0.0
        self._topic_names: dict[uuid.UUID, str] = {}
        self._ticker: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        if self.state is not None:
            records = await _maybe_await(self.state.load())
            self.coordinator.replay(records, now_ms())
            log.info("resumed %d groups from %d records in %s", len(self.coordinator.streams.groups)
                     + len(self.coordinator.classic), len(records), self.state.path)
        self._ticker = asyncio.create_task(self._tick())

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self.upstream.close()

    def __call__(self, header: Message, request: Message, client_host: str) -> Awaitable[Message] | None:
        api_key = header.request_api_key
        if api_key == FIND_COORDINATOR:
            return self._find_coordinator(header, request)
        if api_key == STREAMS_GROUP_DESCRIBE:
            managed = request.group_ids and all(g in self.groups for g in request.group_ids)
            return self._coordinate(header, request, client_host) if managed else None
        if api_key == OFFSET_FETCH:
            groups = [request.group_id] if header.request_api_version < 8 else [g.group_id for g in request.groups]
            return self._offset_fetch(header, request) if groups and all(g in self.groups for g in groups) else None
        group_id = getattr(request, "group_id", None)
        if group_id not in self.groups:
            return None
        if api_key in COORDINATED:
            return self._coordinate(header, request, client_host)
        if api_key in (OFFSET_COMMIT, TXN_OFFSET_COMMIT):
            return self._offset_commit(header, request)
        return None

    # --- coordination ---------------------------------------------------------------------------

    async def _coordinate(self, header: Message, request: Message, client_host: str) -> Message:
        token = next(self._tokens)
        future = self._waiting[token] = asyncio.get_running_loop().create_future()
        async with self._lock:
            if header.request_api_key in (11, 88):
                await self._refresh_topics()
            answers, records = self.coordinator.handle(token, header, request, now_ms(), client_host=client_host)
            await self._settle(answers, records)
            await self._create_internal_topics()
        response = await future
        if log.isEnabledFor(logging.DEBUG):
            log.debug("group %s: api %d v%d from %s -> error %s", getattr(request, "group_id", "*"),
                      header.request_api_key,
                      header.request_api_version, getattr(request, "member_id", "?"),
                      getattr(response, "error_code", None))
        return response

    async def _settle(self, answers: list[tuple[Any, Message]], records: list[CoordinatorRecord]) -> None:
        if self.state is not None:
            await _maybe_await(self.state.append(records))  # persisted before anyone hears of the change
        for token, response in answers:
            future = self._waiting.pop(token, None)
            if future is not None and not future.done():
                future.set_result(response)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            async with self._lock:
                answers, records, _ = self.coordinator.poll(now_ms())
                await self._settle(answers, records)

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
        wanted.clear()
        response = await self.upstream.bootstrap.send(create(topics=topics, timeout_ms=30_000))
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


async def _maybe_await(value: Any) -> Any:
    """The state log answers at once, the state topic after a round trip."""
    return await value if inspect.isawaitable(value) else value


def _ready(value: Message) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future

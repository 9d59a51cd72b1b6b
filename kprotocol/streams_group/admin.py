"""What `kprotocol streams-groups` asks of the brokers or the gateway, in Kafka's protocol.

A `GroupAdmin` talks to a broker (each group asked of its coordinator, found with FindCoordinator) or
to the migration gateway (which coordinates its managed groups itself). A group is a streams group
(KIP-1071, StreamsGroupDescribe) or, before its first streams-protocol member and after its last, a
classic group (DescribeGroups) whose members' assignments carry Kafka Streams' AssignmentInfo.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kprotocol.connection import Connection
from kprotocol.errors import error_text
from kprotocol.registry import message_class
from kprotocol.tools.inputs import UsageError

CLIENT_ID = "kprotocol-streams-groups"
GROUP_ID_NOT_FOUND = 69
RETRIABLE_COORDINATOR = (14, 15, 16)  # loading, not available, not the coordinator
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps


@dataclass
class ClassicMember:
    """A member of a classic group, its Streams subscription and assignment decoded (when they decode)."""

    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    process_id: str = "-"
    topics: list[str] = field(default_factory=list)
    partitions: list[tuple[str, int]] = field(default_factory=list)
    active: list[str] = field(default_factory=list)   # task ids "0_1"
    standby: list[str] = field(default_factory=list)
    problem: str | None = None                        # why its payloads did not decode


@dataclass
class ClassicGroup:
    """A classic group as DescribeGroups shows it (that answer carries no generation id)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[ClassicMember]
    error_code: int = 0


def _consumer(cls_name: str, data: bytes | None) -> Any:
    cls = message_class(cls_name)
    if not data or len(data) < 2:
        raise ValueError("empty")
    version = int.from_bytes(data[:2], "big", signed=True)
    low, high = cls.valid_versions
    return cls.decode(data[2:], max(low, min(version, high)))


def classic_member(m: Any) -> ClassicMember:
    """A DescribeGroups member, its consumer-protocol payloads and Streams userdata decoded."""
    from kprotocol.streams import AssignmentInfo, SubscriptionInfo

    out = ClassicMember(m.member_id, m.client_id, m.client_host, m.group_instance_id)
    try:
        if m.member_metadata:
            subscription = _consumer("ConsumerProtocolSubscription", m.member_metadata)
            out.topics = list(subscription.topics)
            if subscription.user_data:
                out.process_id = str(SubscriptionInfo.decode(subscription.user_data).process_id)
        if m.member_assignment:
            assignment = _consumer("ConsumerProtocolAssignment", m.member_assignment)
            out.partitions = sorted((tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions)
            if assignment.user_data:
                info = AssignmentInfo.decode(assignment.user_data)
                out.active = sorted(f"{t.subtopology}_{t.partition}" for t in info.active_tasks)
                out.standby = sorted(f"{t.subtopology}_{t.partition}" for t, _ in info.standby_tasks)
    except (ValueError, EOFError) as exc:  # kprotocol.DecodeError is a ValueError
        out.problem = str(exc)
    return out


class GroupAdmin:
    """Connections to the coordinators of the groups asked about; close() ends them."""

    def __init__(self, host: str, port: int, gateway: bool, timeout_s: float = 15.0) -> None:
        self.bootstrap, self.gateway, self.timeout_s = (host, port), gateway, timeout_s
        self._connections: dict[tuple[str, int], Connection] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}
        self.node_ids: dict[tuple[str, int], int] = {}  # coordinators' broker ids, as FindCoordinator named them

    def __enter__(self) -> GroupAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def connection(self, where: tuple[str, int]) -> Connection:
        if where not in self._connections:
            try:
                self._connections[where] = Connection(*where, client_id=CLIENT_ID)
            except OSError as exc:
                raise UsageError(f"cannot reach {where[0]}:{where[1]}: {exc.strerror or exc}") from None
        return self._connections[where]

    def coordinator(self, group_id: str) -> tuple[str, int]:
        """The gateway itself, or the broker coordinating `group_id` (retried while it loads)."""
        if self.gateway:
            return self.bootstrap
        if group_id not in self._coordinators:
            find = message_class("FindCoordinatorRequest")
            conn = self.connection(self.bootstrap)
            version = conn.version_for(find)
            deadline = time.monotonic() + self.timeout_s
            while True:
                request = find(key=group_id, key_type=0) if version < 4 else \
                    find(key_type=0, coordinator_keys=[group_id])
                answer = conn.send(request, version)
                found = answer if version < 4 else answer.coordinators[0]
                if found.error_code == 0:
                    self._coordinators[group_id] = (found.host, found.port)
                    self.node_ids[(found.host, found.port)] = found.node_id
                    break
                if found.error_code not in RETRIABLE_COORDINATOR or time.monotonic() > deadline:
                    raise UsageError(f"no coordinator for group {group_id}: "
                                     f"{error_text(found.error_code, found.error_message)}")
                time.sleep(0.5)
        return self._coordinators[group_id]

    def _by_coordinator(self, group_ids: Iterable[str]) -> dict[tuple[str, int], list[str]]:
        out: dict[tuple[str, int], list[str]] = {}
        for g in dict.fromkeys(group_ids):
            out.setdefault(self.coordinator(g), []).append(g)
        return out

    # --- describing --------------------------------------------------------------------------------------

    def describe_streams(self, group_ids: list[str]) -> tuple[dict[str, Any], int]:
        """StreamsGroupDescribe of each group at its coordinator: (group id -> described group, version)."""
        describe = message_class("StreamsGroupDescribeRequest")
        found, version = {}, 0
        for where, ids in self._by_coordinator(group_ids).items():
            conn = self.connection(where)
            version = conn.version_for(describe)
            for g in conn.send(describe(group_ids=ids), version).groups:
                found[g.group_id] = g
        return found, version

    def describe_classic(self, group_ids: list[str]) -> dict[str, ClassicGroup]:
        """DescribeGroups of each group (Dead when there is no such classic group)."""
        describe = message_class("DescribeGroupsRequest")
        found = {}
        for where, ids in self._by_coordinator(group_ids).items():
            for g in self.connection(where).send(describe(groups=ids)).groups:
                found[g.group_id] = ClassicGroup(g.group_id, g.group_state, g.protocol_type, g.protocol_data,
                                                 [classic_member(m) for m in g.members], g.error_code)
        return found

    def describe(self, group_ids: list[str]) -> tuple[dict[str, Any], dict[str, ClassicGroup], int]:
        """Streams groups, and the groups that are classic (not found as streams groups but alive as
        classic ones): (streams by id, classic by id, StreamsGroupDescribe version). A group in neither
        stays in the first with its error."""
        streams, version = self.describe_streams(group_ids)
        missing = [g for g, d in streams.items() if d.error_code == GROUP_ID_NOT_FOUND]
        classic = {g: c for g, c in self.describe_classic(missing).items() if not c.error_code
                   and c.state not in ("Dead",)} if missing else {}
        for g in classic:
            del streams[g]
        return streams, classic, version

    # --- listing -----------------------------------------------------------------------------------------

    def brokers(self) -> list[tuple[str, int]]:
        """Every broker (or every listener of the gateway) from Metadata."""
        metadata = message_class("MetadataRequest")
        answer = self.connection(self.bootstrap).send(metadata(topics=[]))
        return sorted({(b.host, b.port) for b in answer.brokers})

    def list_groups(self, types: list[str]) -> list[Any]:
        """ListGroups of every broker (the groups of those types; group_type kept)."""
        request = message_class("ListGroupsRequest")
        listed: dict[str, Any] = {}
        places = [self.bootstrap] if self.gateway else self.brokers()
        for where in places:
            conn = self.connection(where)
            version = conn.version_for(request)
            answer = conn.send(request(states_filter=[], types_filter=types) if version >= 5 else request(), version)
            if answer.error_code:
                raise UsageError(f"ListGroups at {where[0]}:{where[1]}: {error_text(answer.error_code)}")
            for g in answer.groups:
                listed.setdefault(g.group_id, g)
        return [listed[g] for g in sorted(listed)]

    # --- offsets -----------------------------------------------------------------------------------------

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets (OffsetFetch of every topic, by name: v9)."""
        fetch = message_class("OffsetFetchRequest")
        conn = self.connection(self.coordinator(group_id))
        version = min(conn.version_for(fetch), 9)  # v10 names topics by id
        answer = conn.send(fetch(groups=[fetch.OffsetFetchRequestGroup(group_id=group_id, topics=None)],
                                 require_stable=False) if version >= 8 else
                           fetch(group_id=group_id, topics=None), version)
        group = answer.groups[0] if version >= 8 else answer
        if group.error_code:
            raise UsageError(f"group {group_id}: OffsetFetch: {error_text(group.error_code)}")
        out = {}
        for t in group.topics:
            for p in t.partitions:
                if p.error_code:
                    raise UsageError(f"group {group_id}: OffsetFetch {t.name}-{p.partition_index}: "
                                     f"{error_text(p.error_code)}")
                if p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p.committed_offset
        return out

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Partitions of each existing topic (Metadata); missing topics are left out."""
        names = sorted(set(topics))
        if not names:
            return {}
        metadata = message_class("MetadataRequest")
        answer = self.connection(self.bootstrap).send(
            metadata(topics=[metadata.MetadataRequestTopic(name=t) for t in names], allow_auto_topic_creation=False))
        return {t.name: len(t.partitions) for t in answer.topics if t.error_code == 0}

    def list_offsets(self, partitions: Iterable[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets of each partition at its leader: EARLIEST, LATEST or a timestamp (ms); a timestamp
        past the last record gives the end offset, as Kafka's tool resets."""
        partitions = sorted(set(partitions))
        if not partitions:
            return {}
        metadata = message_class("MetadataRequest")
        answer = self.connection(self.bootstrap).send(metadata(
            topics=[metadata.MetadataRequestTopic(name=t) for t in sorted({t for t, _ in partitions})],
            allow_auto_topic_creation=False))
        nodes = {b.node_id: (b.host, b.port) for b in answer.brokers}
        leaders = {(t.name, p.partition_index): nodes.get(p.leader_id) for t in answer.topics if t.error_code == 0
                   for p in t.partitions}
        by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for tp in partitions:
            if leaders.get(tp) is not None:
                by_leader.setdefault(leaders[tp], []).append(tp)
        request = message_class("ListOffsetsRequest")
        out: dict[tuple[str, int], int] = {}
        for where, tps in by_leader.items():
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            got = self.connection(where).send(request(replica_id=-1, isolation_level=0, topics=[
                request.ListOffsetsTopic(name=t, partitions=[request.ListOffsetsPartition(
                    partition_index=p, timestamp=timestamp, current_leader_epoch=-1) for p in ps])
                for t, ps in topics.items()]))
            for t in got.topics:
                for p in t.partitions:
                    if p.error_code == 0 and p.offset >= 0:
                        out[(t.name, p.partition_index)] = p.offset
        if timestamp >= 0:  # no record at or after the time: the end, as Kafka's reset does
            missing = [tp for tp in partitions if tp not in out]
            out.update(self.list_offsets(missing, LATEST) if missing else {})
        return out

    def commit(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Commit `offsets` as an administrator (no member, generation -1): partition -> error code."""
        commit = message_class("OffsetCommitRequest")
        conn = self.connection(self.coordinator(group_id))
        version = min(conn.version_for(commit), 9)  # v10 names topics by id
        topics: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in sorted(offsets.items()):
            topics.setdefault(t, []).append((p, o))
        answer = conn.send(commit(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                                  group_instance_id=None, retention_time_ms=-1, topics=[
            commit.OffsetCommitRequestTopic(name=t, partitions=[commit.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
                for p, o in ps]) for t, ps in topics.items()]), version)
        return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}

    def delete(self, group_ids: list[str]) -> dict[str, int]:
        """DeleteGroups at each group's coordinator: group id -> error code."""
        request = message_class("DeleteGroupsRequest")
        out = {}
        for where, ids in self._by_coordinator(group_ids).items():
            for r in self.connection(where).send(request(groups_names=ids)).results:
                out[r.group_id] = r.error_code
        return out

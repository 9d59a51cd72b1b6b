"""The `__consumer_offsets` records of a streams group, built from coordinator state.

A `CoordinatorRecord` holds the generated key and value messages (value None: a tombstone);
`encode()` gives the bytes Kafka writes (int16 type + key, int16 version + value).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from kprotocol.coordinator_topics.decode import decode_record
from kprotocol.coordinator_topics.record_types import record_types
from kprotocol.registry import message_class
from kprotocol.streams_group.member import Member
from kprotocol.streams_group.tasks import TaskSets, Tasks

_PREFIX = struct.Struct(">h")
_K = {name: message_class(f"StreamsGroup{name}Key") for name in (
    "Metadata", "Topology", "MemberMetadata", "TargetAssignmentMember", "TargetAssignmentMetadata",
    "CurrentMemberAssignment")}
_V = {name: message_class(f"StreamsGroup{name}Value") for name in _K}
OffsetCommitKey, OffsetCommitValue = message_class("OffsetCommitKey"), message_class("OffsetCommitValue")
GroupMetadataKey = message_class("GroupMetadataKey")
GROUP_METADATA = 2
VALUE_VERSIONS = {1: 3, 2: 3}  # what Kafka 4.x writes: offset commits without topic id, classic group metadata


class CoordinatorRecord(NamedTuple):
    key: Any
    value: Any | None

    @property
    def type_id(self) -> int:
        return type(self.key).api_key

    @property
    def group_id(self) -> str:
        """The group the record belongs to (offset and classic records name it `group`)."""
        key = self.key
        return key.group if self.type_id in (1, GROUP_METADATA) else key.group_id

    @property
    def value_version(self) -> int:
        return VALUE_VERSIONS.get(self.type_id, 0)

    def encode(self) -> tuple[bytes, bytes | None]:
        key = _PREFIX.pack(self.type_id) + self.key.encode(type(self.key).valid_versions[0])
        if self.value is None:
            return key, None
        return key, _PREFIX.pack(self.value_version) + self.value.encode(self.value_version)

    def to_dict(self) -> dict[str, Any]:
        """The record as `kprotocol.coordinator_topics.decode_record` shows it."""
        return decode_record(*self.encode())


def _task_ids(cls: Any, tasks: Tasks, epochs: Mapping[str, Mapping[int, int]] | None = None) -> list[Any]:
    out = []
    for sub in sorted(tasks):
        parts = sorted(tasks[sub])
        extra = {} if epochs is None else {"assignment_epochs": [epochs[sub][p] for p in parts]}
        out.append(cls(subtopology_id=sub, partitions=parts, **extra))
    return out


def tasks_from(task_ids: list[Any]) -> dict[str, frozenset[int]]:
    return {t.subtopology_id: frozenset(t.partitions) for t in task_ids if t.partitions}


def epochs_from(task_ids: list[Any], default: int) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for t in task_ids:
        epochs = t.assignment_epochs if t.assignment_epochs is not None else [default] * len(t.partitions)
        out.setdefault(t.subtopology_id, {}).update(zip(t.partitions, epochs))
    return out


def group_metadata(group_id: str, epoch: int, metadata_hash: int, validated_topology_epoch: int,
                   configs: Mapping[str, str]) -> CoordinatorRecord:
    v = _V["Metadata"]
    return CoordinatorRecord(_K["Metadata"](group_id=group_id), v(
        epoch=epoch, metadata_hash=metadata_hash, validated_topology_epoch=validated_topology_epoch,
        last_assignment_configs=[v.LastAssignmentConfig(key=k, value=configs[k]) for k in sorted(configs)]))


def topology(group_id: str, value: Any) -> CoordinatorRecord:
    return CoordinatorRecord(_K["Topology"](group_id=group_id), value)


def member_metadata(group_id: str, m: Member) -> CoordinatorRecord:
    v = _V["MemberMetadata"]
    endpoint = None if m.user_endpoint is None else v.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1])
    return CoordinatorRecord(_K["MemberMetadata"](group_id=group_id, member_id=m.member_id), v(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        rebalance_timeout_ms=m.rebalance_timeout_ms, topology_epoch=m.topology_epoch, process_id=m.process_id,
        user_endpoint=endpoint, client_tags=[v.KeyValue(key=k, value=val) for k, val in m.client_tags]))


def target_member(group_id: str, member_id: str, target: TaskSets) -> CoordinatorRecord:
    v = _V["TargetAssignmentMember"]
    return CoordinatorRecord(_K["TargetAssignmentMember"](group_id=group_id, member_id=member_id), v(
        active_tasks=_task_ids(v.TaskIds, target.active), standby_tasks=_task_ids(v.TaskIds, target.standby),
        warmup_tasks=_task_ids(v.TaskIds, target.warmup)))


def target_metadata(group_id: str, epoch: int, timestamp_ms: int) -> CoordinatorRecord:
    return CoordinatorRecord(_K["TargetAssignmentMetadata"](group_id=group_id),
                             _V["TargetAssignmentMetadata"](assignment_epoch=epoch, assignment_timestamp=timestamp_ms))


def current_assignment(group_id: str, m: Member) -> CoordinatorRecord:
    v = _V["CurrentMemberAssignment"]
    ids = v.TaskIds
    return CoordinatorRecord(_K["CurrentMemberAssignment"](group_id=group_id, member_id=m.member_id), v(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=m.state,
        active_tasks=_task_ids(ids, m.assigned.active, m.active_epochs),
        standby_tasks=_task_ids(ids, m.assigned.standby), warmup_tasks=_task_ids(ids, m.assigned.warmup),
        active_tasks_pending_revocation=_task_ids(ids, m.pending_revocation.active, m.active_epochs),
        standby_tasks_pending_revocation=_task_ids(ids, m.pending_revocation.standby),
        warmup_tasks_pending_revocation=_task_ids(ids, m.pending_revocation.warmup)))


def remove_member(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    """The three tombstones of a member leaving, in Kafka's order."""
    return [CoordinatorRecord(_K[name](group_id=group_id, member_id=member_id), None)
            for name in ("CurrentMemberAssignment", "TargetAssignmentMember", "MemberMetadata")]


def delete_group(group_id: str, member_ids: list[str]) -> list[CoordinatorRecord]:
    """Tombstones for every record of an empty group, in Kafka's order."""
    out = [CoordinatorRecord(_K["CurrentMemberAssignment"](group_id=group_id, member_id=m), None) for m in member_ids]
    out += [CoordinatorRecord(_K["TargetAssignmentMember"](group_id=group_id, member_id=m), None) for m in member_ids]
    out.append(CoordinatorRecord(_K["TargetAssignmentMetadata"](group_id=group_id), None))
    out += [CoordinatorRecord(_K["MemberMetadata"](group_id=group_id, member_id=m), None) for m in member_ids]
    out += [CoordinatorRecord(_K[name](group_id=group_id), None) for name in ("Metadata", "Topology")]
    return out


def classic_group_tombstone(group_id: str) -> CoordinatorRecord:
    """The tombstone of an empty classic group that a streams group replaces."""
    return CoordinatorRecord(GroupMetadataKey(group=group_id), None)


def offset_commit(group_id: str, topic: str, partition: int, offset: int, leader_epoch: int, metadata: str | None,
                  commit_ms: int, expire_ms: int = -1) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group=group_id, topic=topic, partition=partition), OffsetCommitValue(
        offset=offset, leader_epoch=leader_epoch, metadata=metadata or "", commit_timestamp=commit_ms,
        expire_timestamp=expire_ms))


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """A record of `__consumer_offsets` as typed messages, or None unless it is a streams group, classic group
    or offset record."""
    (type_id,) = _PREFIX.unpack_from(key)
    kind = record_types().get(type_id)
    if kind is None or not (type_id in (1, 2) or kind.key.__name__.startswith("StreamsGroup")):
        return None
    k = kind.key.decode(key[2:], kind.key_version)
    if value is None:
        return CoordinatorRecord(k, None)
    (version,) = _PREFIX.unpack_from(value)
    return CoordinatorRecord(k, kind.value.decode(value[2:], version))

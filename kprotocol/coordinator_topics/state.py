"""Replay `__consumer_offsets` batches into the latest state of every group.

Each record type fills one section of its group (a single value, or one entry of a map keyed
by member id, regular expression or partition); a tombstone removes what its key names, and a
group with nothing left disappears. Transactional offset commits wait for their producer's
COMMIT marker (an ABORT drops them); those still open are listed as pending.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kprotocol.coordinator_topics.decode import decode_record
from kprotocol.errors import DecodeError
from kprotocol.records import RecordBatch, decode_control


@dataclass(frozen=True, slots=True)
class Section:
    """Where a record type lands: `group[kind][name]`, or `group[kind][name][key[member_field]]`."""

    kind: str
    name: str
    member_field: str | None = None


SECTIONS: dict[int, Section] = {
    2: Section("classic", "metadata"),
    3: Section("consumer", "metadata"),
    4: Section("consumer", "partitionMetadata"),
    5: Section("consumer", "members", "memberId"),
    6: Section("consumer", "targetAssignmentMetadata"),
    7: Section("consumer", "targetAssignment", "memberId"),
    8: Section("consumer", "currentAssignment", "memberId"),
    9: Section("share", "partitionMetadata"),
    10: Section("share", "members", "memberId"),
    11: Section("share", "metadata"),
    12: Section("share", "targetAssignmentMetadata"),
    13: Section("share", "targetAssignment", "memberId"),
    14: Section("share", "currentAssignment", "memberId"),
    15: Section("share", "statePartitionMetadata"),
    16: Section("consumer", "regularExpressions", "regularExpression"),
    17: Section("streams", "metadata"),
    18: Section("streams", "partitionMetadata"),
    19: Section("streams", "members", "memberId"),
    20: Section("streams", "targetAssignmentMetadata"),
    21: Section("streams", "targetAssignment", "memberId"),
    22: Section("streams", "currentAssignment", "memberId"),
    23: Section("streams", "topology"),
    24: Section("streams", "targetAssignmentResolvedTopicIds"),
}
OFFSET_COMMIT_TYPES = (0, 1)


class GroupStateBuilder:
    """Feed batches in log order with `apply_batch`; read the result with `to_dict`."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}
        self.pending: dict[int, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {}
        self.problems: list[str] = []

    def apply_batch(self, batch: RecordBatch) -> None:
        for record in batch.records:
            if batch.is_control:
                self._apply_marker(batch.producer_id, record)
                continue
            if record.key is None:
                self.problems.append(f"record at offset {record.offset} has no key")
                continue
            decoded = decode_record(record.key, record.value)
            if batch.is_transactional and decoded["key"].get("type") in OFFSET_COMMIT_TYPES:
                self.pending.setdefault(batch.producer_id, []).append((decoded["key"], decoded["value"]))
            else:
                self.apply(decoded, record.offset)

    def apply(self, decoded: dict[str, Any], offset: int = -1) -> None:
        """Apply one `decode_record` result."""
        key, value = decoded["key"], decoded["value"]
        if "data" not in key or (value is not None and "data" not in value):
            self.problems.append(f"record at offset {offset} did not decode: {key.get('error') or value}")
            return
        type_id, data = key["type"], key["data"]
        if type_id in OFFSET_COMMIT_TYPES:
            self._apply_offset(data, value)
        elif type_id in SECTIONS:
            self._apply_section(SECTIONS[type_id], data, value)

    def _apply_marker(self, producer_id: int, record) -> None:
        try:
            marker = decode_control(record)
        except DecodeError as exc:
            self.problems.append(f"control record at offset {record.offset}: {exc}")
            return
        commits = self.pending.pop(producer_id, [])
        if marker["type"] == "COMMIT":
            for key, value in commits:
                self._apply_offset(key["data"], value)

    def _group(self, group_id: str) -> dict[str, Any]:
        return self.groups.setdefault(group_id, {})

    def _apply_offset(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        group = self._group(key["group"])
        offsets = group.setdefault("offsets", {})
        partitions = offsets.setdefault(key["topic"], {})
        if value is None:
            partitions.pop(str(key["partition"]), None)
        else:
            partitions[str(key["partition"])] = value["data"]
        self._prune(key["group"])

    def _apply_section(self, section: Section, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        group_id = key.get("groupId", key.get("group"))
        kind = self._group(group_id).setdefault(section.kind, {})
        if section.member_field is None:
            if value is None:
                kind.pop(section.name, None)
            else:
                kind[section.name] = value["data"]
        else:
            entries = kind.setdefault(section.name, {})
            if value is None:
                entries.pop(key[section.member_field], None)
            else:
                entries[key[section.member_field]] = value["data"]
        self._prune(group_id)

    def _prune(self, group_id: str) -> None:
        group = self.groups[group_id]
        for name in list(group):
            part = group[name]
            for inner in [k for k, v in part.items() if v == {}]:
                del part[inner]
            if not part:
                del group[name]
        if not group:
            del self.groups[group_id]

    def to_dict(self) -> dict[str, Any]:
        groups = {}
        for group_id in sorted(self.groups):
            group = self.groups[group_id]
            kinds = [k for k in ("classic", "consumer", "streams", "share") if k in group]
            groups[group_id] = {"type": kinds[0] if kinds else "offsets-only", **group}
        pending = [{"producerId": pid, "group": k["data"]["group"], "topic": k["data"]["topic"],
                    "partition": k["data"]["partition"], "value": v}
                   for pid, commits in self.pending.items() for k, v in commits]
        return {"groups": groups, "pendingTransactionalOffsets": pending, "problems": self.problems}


def replay(batches: Iterable[RecordBatch]) -> dict[str, Any]:
    """The state after every batch of `batches`, in order."""
    builder = GroupStateBuilder()
    for batch in batches:
        builder.apply_batch(batch)
    return builder.to_dict()

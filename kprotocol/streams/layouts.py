"""Every version's byte layout, declared once with `construct`; the same declaration decodes and encodes.

Collections decode to lists in wire order. Fields are named like the dataclass attributes they feed.
"""

from __future__ import annotations

from typing import Any

from construct import Construct, Struct

from kprotocol.errors import EncodeError
from kprotocol.streams.model import HostInfo, TaskId, TaskOffsetSum, TopicPartition
from kprotocol.streams.primitives import (
    I8,
    I32,
    I64,
    Counted,
    Input,
    MUtf8,
    NullableStr16,
    Record,
    Utf8Bytes32,
    Utf16Name,
    Uuid,
    compile_layout,
    record,
    values,
)


class Layout:
    """One version's declaration and its compiled form (built on first use).

    The compiled form does the work; on any failure the declaration is run again, interpreted, so the
    error raised is the precise one (typed, with offset and field path).
    """

    def __init__(self, declaration: Construct) -> None:
        self.declaration = declaration
        self._compiled: Construct | None = None

    @property
    def compiled(self) -> Construct:
        if self._compiled is None:
            self._compiled = compile_layout(self.declaration)
        return self._compiled

    def parse(self, data: bytes) -> dict[str, Any]:
        try:
            return self.compiled.parse_stream(Input(data))
        except Exception:  # noqa: BLE001 - the interpreted declaration reports it precisely
            return self.declaration.parse_stream(Input(data))

    def build(self, fields: dict[str, Any]) -> bytes:
        try:
            return self.compiled.build(fields)
        except Exception:  # noqa: BLE001 - as in parse
            pass
        try:
            return self.declaration.build(fields)
        except (TypeError, AttributeError, ValueError) as exc:
            if isinstance(exc, EncodeError):
                raise
            raise EncodeError(f"cannot encode: {exc}") from exc


new = tuple.__new__  # builds NamedTuples without a Python-level __new__ frame (hot decode loops)

# ---- SubscriptionInfo -------------------------------------------------------------------------------

TASK_ID8 = Record(
    lambda sub, part: new(TaskId, (sub, part, None)), lambda task: task[:2], "subtopology" / I32, "partition" / I32
)
TASK_LIST = Counted(TASK_ID8, 8)
END_POINT = Utf8Bytes32(empty_is_none=True)
# v7-9: groups of (topic_group_id, [(partition, offset_sum)]), flattened by the SubscriptionInfo class.
PARTITION_SUMS = Counted(record(values, "partition" / I32, "offset_sum" / I64), 12)
GROUPED_SUMS = Counted(record(values, "topic_group_id" / I32, "partitions" / PARTITION_SUMS), 8)
FLAT_SUMS = Counted(
    Record(
        lambda sub, part, offset, name: new(TaskOffsetSum, (new(TaskId, (sub, part, name)), offset)),
        lambda s: (s.task.subtopology, s.task.partition, s.offset_sum, s.task.named_topology),
        "topic_group_id" / I32,
        "partition" / I32,
        "offset_sum" / I64,
        "named_topology" / NullableStr16(),
    ),
    18,
)
CLIENT_TAGS = Counted(record(values, "key" / Utf8Bytes32(), "value" / Utf8Bytes32()), 8)


def _subscription(version: int) -> Construct:
    fields: list[Construct] = ["version" / I32]
    if version >= 3:
        fields.append("latest_supported_version" / I32)
    fields.append("process_id" / Uuid())
    if version <= 6:
        fields += ["prev_tasks" / TASK_LIST, "standby_tasks" / TASK_LIST]
        if version >= 2:
            fields.append("user_end_point" / END_POINT)
        return Struct(*fields)
    fields += ["user_end_point" / END_POINT, "task_offset_sums" / (GROUPED_SUMS if version <= 9 else FLAT_SUMS)]
    if version >= 8:
        fields.append("unique_field" / I8)
    if version >= 9:
        fields.append("error_code" / I32)
    if version >= 11:
        fields.append("client_tags" / CLIENT_TAGS)
    return Struct(*fields)


SUBSCRIPTION = {version: Layout(_subscription(version)) for version in range(1, 12)}

# ---- AssignmentInfo ---------------------------------------------------------------------------------

TASK_ID_NAMED = record(
    lambda *fields: new(TaskId, fields), "subtopology" / I32, "partition" / I32, "named_topology" / Utf16Name()
)
TPS = Counted(record(lambda *fields: new(TopicPartition, fields), "topic" / MUtf8(), "partition" / I32), 6)
HOST_TPS = Counted(
    Record(
        lambda host, port, tps: (new(HostInfo, (host, port)), tps),
        lambda entry: (entry[0].host, entry[0].port, entry[1]),
        "host" / MUtf8(),
        "port" / I32,
        "partitions" / TPS,
    ),
    10,
)
DICTIONARY = Counted(record(values, "index" / I32, "topic" / MUtf8()), 6)
# v5+: partitions refer to dictionary indexes; resolved by the AssignmentInfo class.
HOST_INDEXES = Counted(
    Record(
        lambda host, port, refs: (new(HostInfo, (host, port)), refs),
        lambda entry: (entry[0].host, entry[0].port, entry[1]),
        "host" / MUtf8(),
        "port" / I32,
        "partitions" / Counted(record(values, "topic_index" / I32, "partition" / I32), 8),
    ),
    10,
)


def _assignment(version: int) -> Construct:
    task, task_size = (TASK_ID_NAMED, 12) if version >= 10 else (TASK_ID8, 8)
    fields: list[Construct] = ["version" / I32]
    if version >= 3:
        fields.append("commonly_supported_version" / I32)
    fields += [
        "active_tasks" / Counted(task, task_size),
        "standby_tasks" / Counted(record(values, "task" / task, "partitions" / TPS), task_size + 4),
    ]
    if version in (2, 3, 4):
        fields.append("partitions_by_host" / HOST_TPS)
    elif version >= 5:
        fields += ["topic_dictionary" / DICTIONARY, "partitions_by_host" / HOST_INDEXES]
        if version >= 6:
            fields.append("standby_partitions_by_host" / HOST_INDEXES)
    if version >= 4:
        fields.append("err_code" / I32)
    if version >= 7:
        fields.append("next_rebalance_ms" / I64)
    return Struct(*fields)


ASSIGNMENT = {version: Layout(_assignment(version)) for version in range(1, 12)}

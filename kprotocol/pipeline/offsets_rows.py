"""Rows of the `records`, `offsets_committed`, `group_members` and `problems` tables for one split of
a coordinator-topic segment. Spark tasks and the single-process path run the same code: for
`__consumer_offsets`, the compiled path of `kprotocol offsets decode` (kprotocol.coordinator_topics.lines)
writes the records and offsets_committed tables straight into Arrow column buffers, this module
builds the rest and whatever it does not take.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pyarrow as pa

from kprotocol.coordinator_topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE, decode_record, lines, type_names
from kprotocol.errors import DecodeError
from kprotocol.pipeline.files import read_range
from kprotocol.pipeline.splits import SegmentSplit
from kprotocol.pipeline.tables import SCHEMAS, column_kinds, from_columns, json_text
from kprotocol.records import Record, RecordBatch, decode_control
from kprotocol.records.segment import SegmentProblem, read_segment_bytes

Row = dict[str, Any]
Rows = list[Row] | pa.Table
TABLES = ("records", "offsets_committed", "group_members", "problems")
COLUMNAR = ("records", "offsets_committed")  # the tables the compiled path builds as Arrow columns
GROUP_METADATA, STREAMS_MEMBER, STREAMS_TARGET_MEMBER, STREAMS_CURRENT = 2, 19, 21, 22
CONSUMER_MEMBER, CONSUMER_TARGET_MEMBER, CONSUMER_CURRENT = 5, 7, 8
MEMBER_TYPES = {GROUP_METADATA, CONSUMER_MEMBER, CONSUMER_TARGET_MEMBER, CONSUMER_CURRENT,
                STREAMS_MEMBER, STREAMS_TARGET_MEMBER, STREAMS_CURRENT}


def coordinator_topic(topic: str | None) -> str:
    """The coordinator topic whose record types a partition directory holds (default: offsets)."""
    return topic if topic in (TRANSACTION_STATE, SHARE_GROUP_STATE) else CONSUMER_OFFSETS


def split_rows(split: SegmentSplit) -> dict[str, Rows]:
    """Every table's rows for one split: a list of dicts, or for the records and offsets_committed
    of `__consumer_offsets` through the compiled path an Arrow table of the table's schema (the same
    rows in the same order; `write_part` takes either, `len` counts either, `as_dicts` turns either
    into dicts)."""
    tables: dict[str, list[Row]] = {name: [] for name in TABLES}
    topic = coordinator_topic(split.topic)
    names = type_names(topic)
    data = read_range(split.uri, split.start, split.end)
    if lines.ENABLED and topic == CONSUMER_OFFSETS:
        return _compiled_tables(data, split, names, tables)
    for entry in read_segment_bytes(data, split.uri):
        _entry_rows(entry, split, topic, names, _appender(tables))
    return tables


def as_dicts(rows: Rows) -> list[Row]:
    """A table's rows of `split_rows` as dicts."""
    return rows.to_pylist() if isinstance(rows, pa.Table) else rows


SPLIT_POSITION = re.compile(r"\(offset (\d+)\)")  # where a decoder error says it stopped, in the bytes it was given


def in_file(message: str, start: int) -> str:
    """A decoder's message about a split's bytes with its byte positions made the file's (the split
    starts at byte `start`)."""
    if not start:
        return message
    return SPLIT_POSITION.sub(lambda m: f"(offset {int(m[1]) + start})", message)


def _appender(tables: dict[str, list[Row]]) -> Callable[[str, Row], None]:
    return lambda table, row: tables[table].append(row)


def _entry_rows(entry: RecordBatch | SegmentProblem, split: SegmentSplit, topic: str, names: dict[int, str],
                add: Callable[[str, Row], None]) -> None:
    if isinstance(entry, SegmentProblem):
        add("problems", {
            "source": split.uri, "partition": split.partition, "position": split.start + entry.position,
            "length": entry.length, "kind": entry.kind, "offset": None,
            "message": in_file(entry.message, split.start)})
    else:
        for table, row in batch_rows(entry, split.start + entry.byte_offset, split, topic, names):
            add(table, row)


def _compiled_tables(data: bytes, split: SegmentSplit, names: dict[int, str],
                     tables: dict[str, list[Row]]) -> dict[str, Rows]:
    """The tables of a `__consumer_offsets` split through the compiled path: records and
    offsets_committed written by the decoder into Arrow column buffers (no Python object per record);
    what it stops at (or a record it does not take) goes through `batch_rows` (`record_rows`), whose
    rows of those two tables are appended to the same builders in their place."""
    base = {"topic": split.topic or CONSUMER_OFFSETS, "partition": split.partition, "segment": split.uri}
    constants = {"records": base, "offsets_committed": {"source_partition": split.partition}}  # the split's
    builders = {table: lines.columns(SCHEMAS[table].names, column_kinds(SCHEMAS[table], constants[table].keys()))
                for table in COLUMNAR}

    def add(table: str, row: Row) -> None:
        builder = builders.get(table)
        if builder is None:
            tables[table].append(row)
        else:
            builder.append(row)

    def fallback(offset: int, timestamp: int, key: bytes | None, value: bytes | None, position: int,
                 producer_id: int | None) -> None:
        record_base = {**base, "batch_position": position, "producer_id": producer_id}
        for table, row in record_rows(Record(offset, timestamp, key, value), record_base, False,
                                      producer_id is not None, split, CONSUMER_OFFSETS, names, position):
            add(table, row)

    def derive(row: Row, transactional: bool) -> None:
        value = row["value_json"]
        for table, member in _derived(row, orjson.loads(row["key_json"]),
                                      None if value is None else orjson.loads(value), transactional):
            add(table, member)

    compiled = lines.decoder(fallback, frozenset(MEMBER_TYPES))
    records, commits = builders["records"], builders["offsets_committed"]
    pos = 0
    while pos < len(data):
        pos, stopped = compiled.columns(data, pos, len(data), split.start, records, commits, base, derive)
        if stopped:
            entry = next(read_segment_bytes(data, split.uri, start=pos), None)
            if entry is None:  # an all-zero tail
                break
            _entry_rows(entry, split, CONSUMER_OFFSETS, names, add)
            pos = entry.position + entry.length if isinstance(entry, SegmentProblem) else entry.byte_offset + entry.size
    out: dict[str, Rows] = dict(tables)
    for table, builder in builders.items():
        out[table] = from_columns(builder.finish(), SCHEMAS[table], constants[table])
    return out


def batch_rows(batch: RecordBatch, position: int, split: SegmentSplit, topic: str,
               names: dict[int, str]) -> Iterator[tuple[str, Row]]:
    """(table, row) pairs of one batch at `position` of the split's file."""
    base = {"topic": split.topic or topic, "partition": split.partition, "segment": split.uri,
            "batch_position": position, "producer_id": batch.producer_id if batch.is_transactional else None}
    for record in batch.records:
        yield from record_rows(record, base, batch.is_control, batch.is_transactional, split, topic, names, position)


def record_rows(record: Record, base: Row, control: bool, transactional: bool, split: SegmentSplit, topic: str,
                names: dict[int, str], position: int) -> Iterator[tuple[str, Row]]:
    """(table, row) pairs of one record of a batch whose columns are `base`."""
    row: Row = {**base, "offset": record.offset, "timestamp": record.timestamp, "record_type": None,
                "record_type_name": None, "group": None, "key_json": None, "value_json": None,
                "tombstone": record.value is None, "control": None, "problem": None}
    if control:
        try:
            row["control"] = decode_control(record)["type"]
        except DecodeError as exc:
            row["problem"] = str(exc)
        row["tombstone"] = False
    elif record.key is None:
        row["problem"] = "record has no key"
    else:
        decoded = decode_record(record.key, record.value, topic=topic)
        key, value = decoded["key"], decoded["value"]
        data = key.get("data") or {}
        row.update(record_type=key.get("type"), record_type_name=names.get(key.get("type")),
                   group=data.get("group", data.get("groupId")), key_json=json_text(key),
                   value_json=json_text(value), problem=lines.record_problem(decoded))
        if topic == CONSUMER_OFFSETS and "data" in key and (value is None or "data" in value):
            yield from _derived(row, key, value, transactional)
    if row["problem"]:
        yield "problems", {"source": split.uri, "partition": split.partition, "position": position,
                           "length": None, "kind": "record", "offset": record.offset, "message": row["problem"]}
    yield "records", row


def _derived(row: Row, key: Row, value: Row | None, transactional: bool) -> Iterator[tuple[str, Row]]:
    type_id, data = key["type"], key["data"]
    body = value["data"] if value else None
    if type_id in (0, 1):
        yield "offsets_committed", {
            "group": data["group"], "topic": data["topic"], "partition": data["partition"],
            "offset": body["offset"] if body else None, "leader_epoch": (body or {}).get("leaderEpoch"),
            "metadata": body["metadata"] if body else None,
            "commit_timestamp": body["commitTimestamp"] if body else None,
            "expire_timestamp": (body or {}).get("expireTimestamp"), "deleted": body is None,
            "transactional": transactional, "producer_id": row["producer_id"],
            "record_offset": row["offset"], "record_timestamp": row["timestamp"],
            "source_partition": row["partition"]}
    elif type_id in MEMBER_TYPES:
        for member in member_rows(type_id, data, body):
            yield "group_members", {**member, "record_type_name": row["record_type_name"],
                                    "record_offset": row["offset"], "record_timestamp": row["timestamp"],
                                    "source_partition": row["partition"]}


MEMBER_COLUMNS = ("group", "protocol", "generation", "member_id", "instance_id", "client_id", "client_host",
                  "process_id", "rack", "endpoint", "left", "owned_active", "owned_standby", "assigned_active",
                  "assigned_standby", "assigned_warmup", "assigned_partitions", "pending_revocation",
                  "next_rebalance_ms", "error_code")


def _member(**values: Any) -> Row:
    row = dict.fromkeys(MEMBER_COLUMNS)
    row["left"] = False
    row.update(values)
    return row


def _tasks(task_ids: list[Row] | None) -> list[str]:
    return [f"{t['subtopologyId']}_{p}" for t in task_ids or () for p in t["partitions"]]


def _partitions(topics: list[Row] | None, name: str = "topic") -> list[str]:
    return [f"{t.get(name, t.get('topicId'))}-{p}" for t in topics or () for p in t["partitions"]]


def member_rows(type_id: int, key: Row, value: Row | None) -> list[Row]:
    """group_members rows of one group record: one per member it describes (a tombstone: member left)."""
    group = key.get("group", key.get("groupId"))
    if type_id == GROUP_METADATA:
        return _classic_members(group, value)
    protocol = "streams" if type_id in (STREAMS_MEMBER, STREAMS_TARGET_MEMBER, STREAMS_CURRENT) else "consumer"
    member_id = key.get("memberId")
    if value is None:
        return [_member(group=group, protocol=protocol, member_id=member_id, left=True)]
    if type_id in (STREAMS_MEMBER, CONSUMER_MEMBER):
        endpoint = value.get("userEndpoint")
        return [_member(group=group, protocol=protocol, member_id=member_id, instance_id=value.get("instanceId"),
                        client_id=value.get("clientId"), client_host=value.get("clientHost"),
                        process_id=value.get("processId"), rack=value.get("rackId"),
                        endpoint=f"{endpoint['host']}:{endpoint['port']}" if endpoint else None)]
    if type_id in (STREAMS_TARGET_MEMBER, STREAMS_CURRENT):
        pending = (_tasks(value.get("activeTasksPendingRevocation")) + _tasks(value.get("standbyTasksPendingRevocation"))
                   + _tasks(value.get("warmupTasksPendingRevocation")))
        return [_member(group=group, protocol=protocol, member_id=member_id, generation=value.get("memberEpoch"),
                        assigned_active=_tasks(value.get("activeTasks")),
                        assigned_standby=_tasks(value.get("standbyTasks")),
                        assigned_warmup=_tasks(value.get("warmupTasks")),
                        pending_revocation=pending if type_id == STREAMS_CURRENT else None)]
    partitions = value.get("assignedPartitions", value.get("topicPartitions"))
    return [_member(group=group, protocol=protocol, member_id=member_id, generation=value.get("memberEpoch"),
                    assigned_partitions=_partitions(partitions),
                    pending_revocation=_partitions(value.get("partitionsPendingRevocation"))
                    if type_id == CONSUMER_CURRENT else None)]


def _classic_members(group: str, value: Row | None) -> list[Row]:
    if value is None:
        return [_member(group=group, protocol="classic", left=True)]
    rows = []
    for m in value.get("members", []):
        sub = ((m.get("decodedSubscription") or {}).get("data")) or {}
        asg = ((m.get("decodedAssignment") or {}).get("data")) or {}
        sub_streams, asg_streams = sub.get("streamsUserData") or {}, asg.get("streamsUserData") or {}
        standby = asg_streams.get("standbyTasks")
        rows.append(_member(
            group=group, protocol="classic", generation=value.get("generation"), member_id=m.get("memberId"),
            instance_id=m.get("groupInstanceId"), client_id=m.get("clientId"), client_host=m.get("clientHost"),
            process_id=sub_streams.get("processId"), rack=sub.get("rackId"), endpoint=sub_streams.get("userEndPoint"),
            owned_active=sub_streams.get("prevTasks"), owned_standby=sub_streams.get("standbyTasks"),
            assigned_active=asg_streams.get("activeTasks"),
            assigned_standby=[t for t, _ in standby] if standby else None,
            assigned_partitions=_partitions(asg.get("assignedPartitions")) if asg else None,
            next_rebalance_ms=asg_streams.get("nextRebalanceMs"), error_code=asg_streams.get("errCode")))
    return rows

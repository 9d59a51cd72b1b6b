"""The pipeline's Parquet tables: one directory each under the output directory, stable column names.

Every Spark task writes its own part file per table (`part-<split>.parquet`, so a retried task
replaces its output instead of doubling it); Spark SQL, pandas, DuckDB and notebooks read each
directory as one table.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from kprotocol.pipeline.files import filesystem

STR, I32, I64, F64, BOOL = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()
STRS = pa.list_(pa.string())
WRITE_OPTIONS = {"compression": "zstd", "compression_level": 1}  # half snappy's size, and faster to write
PLAIN = ("_json", "offset", "timestamp", "position")  # columns of (nearly) unique values: no dictionary


def write_options(schema: pa.Schema) -> dict[str, Any]:
    """WRITE_OPTIONS; statistics for every column but the JSON documents (their min/max prune nothing
    and were a fifth of the time to write the records table); dictionary encoding but for JSON
    documents, offsets, timestamps and positions, whose dictionaries fill up and fall back to plain
    (plain from the start: the offsets tables of a 64 MiB segment wrote in 0.63 s, not 0.77, and
    took 15 MB, not 18)."""
    names = schema.names
    return {**WRITE_OPTIONS, "write_statistics": [name for name in names if not name.endswith("_json")],
            "use_dictionary": [name for name in names if not name.endswith(PLAIN)]}


SCHEMAS: dict[str, pa.Schema] = {
    # Every record of the coordinator topics, decoded as `kprotocol offsets decode` does.
    "records": pa.schema([
        ("topic", STR), ("partition", I32), ("segment", STR), ("batch_position", I64), ("producer_id", I64),
        ("offset", I64), ("timestamp", I64), ("record_type", I32), ("record_type_name", STR), ("group", STR),
        ("key_json", STR), ("value_json", STR), ("tombstone", BOOL), ("control", STR), ("problem", STR)]),
    # Offset commits (record types 0 and 1); `deleted` marks a tombstone.
    "offsets_committed": pa.schema([
        ("group", STR), ("topic", STR), ("partition", I32), ("offset", I64), ("leader_epoch", I32),
        ("metadata", STR), ("commit_timestamp", I64), ("expire_timestamp", I64), ("deleted", BOOL),
        ("transactional", BOOL), ("producer_id", I64), ("record_offset", I64), ("record_timestamp", I64),
        ("source_partition", I32)]),
    # One row per member per group record (classic GroupMetadata with Streams userdata decoded,
    # consumer/streams member metadata, target and current assignments); `left` for a tombstone.
    "group_members": pa.schema([
        ("group", STR), ("protocol", STR), ("generation", I32), ("member_id", STR), ("instance_id", STR),
        ("client_id", STR), ("client_host", STR), ("process_id", STR), ("rack", STR), ("endpoint", STR),
        ("left", BOOL), ("owned_active", STRS), ("owned_standby", STRS), ("assigned_active", STRS),
        ("assigned_standby", STRS), ("assigned_warmup", STRS), ("assigned_partitions", STRS),
        ("pending_revocation", STRS), ("next_rebalance_ms", I64), ("error_code", I32), ("record_type_name", STR),
        ("record_offset", I64), ("record_timestamp", I64), ("source_partition", I32)]),
    # Derived per group from its records (see kprotocol.pipeline.rebalances).
    "rebalances": pa.schema([
        ("group", STR), ("protocol", STR), ("epoch", I32), ("start_timestamp", I64), ("end_timestamp", I64),
        ("duration_ms", I64), ("trigger", STR), ("members_before", STRS), ("members_after", STRS),
        ("tasks_moved", I32), ("warmup_tasks", I32), ("probing", BOOL)]),
    # Request/response exchanges decoded from packet captures (kprotocol.capture), one row each;
    # times in seconds since the epoch, bodies as Kafka JSON with `records` fields null: their
    # batches are summarised in record_batches_json (`recordBatches` of `capture decode`).
    "exchanges": pa.schema([
        ("source", STR), ("conn", STR), ("correlation_id", I32), ("api_key", I32), ("api_name", STR),
        ("api_version", I32), ("client_id", STR), ("group", STR), ("member_id", STR), ("request_time", F64),
        ("response_time", F64), ("latency_ms", F64), ("request_size", I64), ("response_size", I64),
        ("request_first_packet", I64), ("request_last_packet", I64), ("response_first_packet", I64),
        ("response_last_packet", I64), ("error_codes", pa.list_(I32)), ("error_names", STRS), ("flags", STRS),
        ("no_response_reason", STR), ("request_error", STR), ("response_error", STR), ("request_json", STR),
        ("response_json", STR), ("record_batches_json", STR)]),
    # Copies in the input (kprotocol.pipeline.copies): rows of `table` read from `source` that `copy_of`
    # holds too, dropped from the tables (records: with the rows derived from them).
    "duplicates": pa.schema([("table", STR), ("source", STR), ("copy_of", STR), ("rows", I64)]),
    # Topic id -> name, from the __cluster_metadata log when the data directory has one (consumer-protocol
    # group records name topics by id: see kprotocol.pipeline.topic_names).
    "topic_names": pa.schema([("topic_id", STR), ("topic", STR)]),
    # Anything that could not be read: corrupt or truncated batches, undecodable records; from
    # captures also damaged packets, gaps, unframed bytes and orphan responses.
    "problems": pa.schema([
        ("source", STR), ("partition", I32), ("position", I64), ("length", I64), ("kind", STR), ("offset", I64),
        ("message", STR)]),
}


# Working tables of a job, removed when it ends: the group records each offsets task keeps apart, so that
# the rebalances stage reads a few percent of the records instead of every commit's JSON again
GROUP_RECORDS = "_group_records"
WORKING_SCHEMAS: dict[str, pa.Schema] = {
    GROUP_RECORDS: pa.schema([SCHEMAS["records"].field(name) for name in (
        "group", "partition", "offset", "timestamp", "record_type", "key_json", "value_json")]),
}


@contextmanager
def paused_gc() -> Iterator[None]:
    """Run a task's decoding without the cyclic garbage collector: decoded rows hold no cycles, and
    collections over millions of live row dicts cost a fifth of the task."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def table_dir(out: str, table: str) -> str:
    return out.rstrip("/") + "/" + table


def write_part(out: str, table: str, part: int, rows: list[dict] | pa.Table, prefix: str = "part") -> None:
    """Write one task's rows of `table`, dicts or an Arrow table of its schema (an empty part keeps the
    schema visible to readers). Each job names its parts with its own prefix, so the offsets and
    captures jobs share `problems`."""
    schema = SCHEMAS[table] if table in SCHEMAS else WORKING_SCHEMAS[table]
    if isinstance(rows, pa.Table):
        if not rows.schema.equals(schema):
            raise ValueError(f"{table}: a table of schema {rows.schema}, not the table's {schema}")
        data = rows
    else:
        data = to_arrow(rows, schema)
    fsys, path = filesystem(table_dir(out, table))
    fsys.create_dir(path, recursive=True)
    pq.write_table(data, f"{path}/{prefix}-{part:05d}.parquet", filesystem=fsys, **write_options(schema))


class PartWriter:
    """One task's part file of `table`, written a row group at a time as rows come (a task holding a
    whole capture's rows would need several times the capture's size in memory)."""

    ROW_GROUP = 4096

    def __init__(self, out: str, table: str, part: int, prefix: str = "part") -> None:
        self.fsys, path = filesystem(table_dir(out, table))
        self.fsys.create_dir(path, recursive=True)
        self.where = f"{path}/{prefix}-{part:05d}.parquet"
        self.schema = SCHEMAS[table]
        self.rows: list[dict] = []
        self.count = 0
        self.writer: pq.ParquetWriter | None = None

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.where, self.schema, filesystem=self.fsys,
                                           **write_options(self.schema))
        self.writer.write_table(to_arrow(self.rows, self.schema))
        self.count += len(self.rows)
        self.rows.clear()

    def close(self) -> int:
        """Write what is left (an empty part keeps the schema visible); the number of rows written."""
        if self.rows or self.writer is None:
            self._flush()
        self.writer.close()  # type: ignore[union-attr]
        return self.count


def json_bytes(value: Any) -> bytes | None:
    """A JSON column's value as UTF-8 bytes (`to_arrow` takes them as they are); None stays None."""
    if value is None:
        return None
    try:
        return orjson.dumps(value)
    except TypeError:  # a lone surrogate from a Java string: the standard library escapes it
        return json.dumps(value, separators=(",", ":")).encode()


def json_text(value: Any) -> str | None:
    """A JSON column's value as text: for many small values this measured faster than bytes end to end."""
    data = json_bytes(value)
    return None if data is None else data.decode()


def to_arrow(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Rows to a table column by column (several times faster than `Table.from_pylist`): one C-level
    `itemgetter` call per row, transposed by `zip`. A string column may hold UTF-8 `bytes` (JSON from
    orjson, valid by construction): those become the column's buffers as they are."""
    names = schema.names
    try:
        if len(names) == 1:  # itemgetter of one name gives the value itself, not a tuple
            columns = [[row[names[0]] for row in rows]]
        else:
            columns = list(zip(*map(itemgetter(*names), rows))) if rows else [() for _ in names]
    except KeyError:  # rows that leave columns out: those are null
        columns = [[row.get(name) for row in rows] for name in names]
    return pa.Table.from_arrays([_array(column, field.type) for column, field in zip(columns, schema)],
                                schema=schema)


def _array(column: tuple | list, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    first = next((value for value in column if value is not None), None) if kind == STR else None
    if type(first) is not bytes:  # (a column's values are all str or all bytes; either is read right)
        return pa.array(column, type=kind)
    binary = pa.array(column, type=pa.binary())  # str values are encoded, bytes taken as they are
    if isinstance(binary, pa.ChunkedArray):  # past 32-bit offsets: pyarrow split it
        return pa.chunked_array([_as_string(chunk) for chunk in binary.chunks], kind)
    return _as_string(binary)


def _as_string(binary: pa.Array) -> pa.Array:
    """A binary array of UTF-8 (orjson's output) as a string array: the same buffers, no second check."""
    return pa.Array.from_buffers(STR, len(binary), binary.buffers(), null_count=binary.null_count,
                                 offset=binary.offset)


# How a column builder of the compiled decoder (kprotocol.coordinator_topics._offsets.Columns) holds a type;
# SKIP: a column it leaves to `from_columns`' constants.
SKIP = -1
COLUMN_KINDS = {STR: 0, I32: 1, I64: 2, BOOL: 3}
CONSTANT_BYTES = 1 << 30  # a constant string column is cut into chunks of at most this much data


def column_kinds(schema: pa.Schema, constants: frozenset[str] | set[str] = frozenset()) -> tuple[int, ...]:
    """The kinds of a column builder for `schema`, the `constants` columns left out."""
    return tuple(SKIP if field.name in constants else COLUMN_KINDS[field.type] for field in schema)


def from_columns(finished: tuple[int, list], schema: pa.Schema, constants: dict[str, Any]) -> pa.Table:
    """A column builder's finished buffers as a table of `schema`, without a conversion per value
    (`pa.Array.from_buffers` wraps them as they are); the columns it left out hold `constants`."""
    rows, columns = finished
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for field, chunks in zip(schema, columns, strict=True):
        if chunks is None:
            arrays.append(_constant(constants[field.name], field.type, rows))
            continue
        pieces = [pa.Array.from_buffers(field.type, length, [None if valid is None else pa.py_buffer(valid),
                                                             pa.py_buffer(values),
                                                             *(() if data is None else (pa.py_buffer(data),))],
                                        null_count=nulls)
                  for length, nulls, valid, values, data in chunks]
        arrays.append(pieces[0] if len(pieces) == 1 else pa.chunked_array(pieces, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _constant(value: Any, kind: pa.DataType, rows: int) -> pa.Array | pa.ChunkedArray:
    """`rows` times `value` (a string column in chunks that 32-bit offsets can hold)."""
    scalar = pa.scalar(value, kind)
    size = len(value.encode()) if isinstance(value, str) else 0
    step = max(1, CONSTANT_BYTES // size) if size else rows
    if rows <= step:
        return pa.repeat(scalar, rows)
    return pa.chunked_array([pa.repeat(scalar, min(step, rows - start)) for start in range(0, rows, step)], kind)


def reset(out: str, tables: tuple[str, ...], prefix: str = "part") -> None:
    """Remove one job's earlier parts of `tables` (the pipeline overwrites, it never appends)."""
    for table in tables:
        fsys, path = filesystem(table_dir(out, table))
        if fsys.get_file_info(path).type == 0:  # 0: NotFound
            continue
        for entry in fsys.get_file_info(pafs.FileSelector(path)):
            if entry.base_name.startswith(prefix + "-"):
                fsys.delete_file(entry.path)


def remove_table(out: str, table: str) -> None:
    """Remove a working table's directory (nothing when there is none)."""
    fsys, path = filesystem(table_dir(out, table))
    if fsys.get_file_info(path).type != pafs.FileType.NotFound:
        fsys.delete_dir(path)

"""A compact JSON summary of a records field, for traffic where records are not the point.

    records_summary(data) -> {"batches": [...], "problems": [...]}

Each batch keeps its header fields, whether its CRC is valid, and its records decompressed; keys,
values and header values longer than `max_bytes` become `{"length", "prefixHex", "sha256"}`
instead of their full hex. A Fetch response may end with a partial batch: such bytes are reported
under `problems`, never dropped silently.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kprotocol.errors import DecodeError
from kprotocol.records.errors import ChecksumError
from kprotocol.records.model import Record, RecordBatch
from kprotocol.records.reader import DEFAULT_MAX_RECORDS, RecordsReader, batch_extent, read_batch, records_v2
from kprotocol.runtime.accel import _speedups

MAX_BYTES = 64
PREFIX = 16


def _bytes(data: bytes | None, max_bytes: int) -> Any:
    if data is None:
        return None
    if len(data) <= max_bytes:
        return {"length": len(data), "hex": data.hex()}
    return {"length": len(data), "prefixHex": data[:PREFIX].hex(), "sha256": hashlib.sha256(data).hexdigest()}


def _record(record: Record, max_bytes: int) -> dict[str, Any]:
    return {"offset": record.offset, "timestamp": record.timestamp, "key": _bytes(record.key, max_bytes),
            "value": _bytes(record.value, max_bytes),
            "headers": [{"key": h.key, "value": _bytes(h.value, max_bytes)} for h in record.headers]}


def _summaries_v2(max_bytes: int) -> RecordsReader:
    """A v2 records reader whose records are their summaries (compiled when the payload is canonical)."""
    def read(payload: bytes, count: int, base_offset: int, base_ts: int, log_append_time: int | None,
             base_sequence: int) -> list[dict[str, Any]]:
        if _speedups is not None:
            fast = _speedups.summarize_v2(payload, count, base_offset, base_ts, log_append_time, max_bytes, PREFIX,
                                          hashlib.sha256)
            if fast is not None:
                return fast
        return [_record(r, max_bytes)
                for r in records_v2(payload, count, base_offset, base_ts, log_append_time, base_sequence)]
    return read


def batch_summary(batch: RecordBatch, crc_valid: bool, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The batch's header fields and its records' summaries (read with `_summaries_v2` for magic 2)."""
    return {"baseOffset": batch.base_offset, "lastOffset": batch.last_offset, "magic": batch.magic,
            "crc": batch.crc, "crcValid": crc_valid, "attributes": batch.attributes,
            "compression": batch.compression.label, "isTransactional": batch.is_transactional,
            "isControl": batch.is_control, "timestampType": batch.timestamp_type,
            "baseTimestamp": batch.base_timestamp, "maxTimestamp": batch.max_timestamp,
            "partitionLeaderEpoch": batch.partition_leader_epoch, "producerId": batch.producer_id,
            "producerEpoch": batch.producer_epoch, "baseSequence": batch.base_sequence,
            "recordCount": len(batch.records), "sizeInBytes": batch.size,
            "records": [r if isinstance(r, dict) else _record(r, max_bytes) for r in batch.records]}


def records_summary(data: bytes, max_bytes: int = MAX_BYTES, max_records: int = DEFAULT_MAX_RECORDS) -> dict[str, Any]:
    batches: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    summaries = _summaries_v2(max_bytes)
    pos = 0
    while pos < len(data):
        try:
            try:
                batch, crc_valid = read_batch(data, pos, max_records=max_records, read_records_v2=summaries), True
            except ChecksumError:
                batch, crc_valid = read_batch(data, pos, verify_crc=False, max_records=max_records,
                                              read_records_v2=summaries), False
        except DecodeError as exc:
            try:
                size = batch_extent(data, pos)
            except DecodeError:
                size = len(data) - pos  # the rest cannot be framed (a partial last batch, or garbage)
            problems.append({"byteOffset": pos, "length": size, "error": f"{type(exc).__name__}: {exc}"})
            pos += size
            continue
        batches.append(batch_summary(batch, crc_valid, max_bytes))
        pos += batch.size
    out: dict[str, Any] = {"batches": batches}
    if problems:
        out["problems"] = problems
    return out

"""Build record batches of magic 0, 1 and 2; uncompressed output matches Kafka's byte for byte."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import crc32c

from kprotocol.records.compression import Compression, compress
from kprotocol.records.model import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    RecordBatch,
)
from kprotocol.records.reader import V2_CRC_START, V2_HEADER
from kprotocol.runtime.primitives import uvarint, varint, varlong


def write_batch(
    records: Sequence[Record],
    *,
    magic: int = 2,
    compression: Compression | str | int = Compression.NONE,
    base_offset: int | None = None,
    last_offset: int | None = None,
    log_append_time: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One batch of `records` (absolute offsets). For magic 0/1 without compression this is one
    entry per record, as Kafka writes them. `log_append_time` selects LogAppendTime."""
    codec = Compression.parse(compression)
    if base_offset is None:
        base_offset = records[0].offset if records else 0
    if last_offset is None:
        last_offset = records[-1].offset if records else base_offset
    if magic in (0, 1):
        if codec is Compression.ZSTD:
            raise ValueError("zstd needs magic 2")
        if transactional or control or delete_horizon_ms is not None or producer_id != -1:
            raise ValueError(f"magic {magic} has no producer, control or delete-horizon fields")
        return _write_legacy(records, magic, codec, last_offset, log_append_time, max_timestamp)
    if magic != 2:
        raise ValueError(f"unknown magic {magic}")
    if base_timestamp is None:
        base_timestamp = delete_horizon_ms if delete_horizon_ms is not None else (
            records[0].wire_timestamp if records else NO_TIMESTAMP)
    if max_timestamp is None:
        max_timestamp = log_append_time if log_append_time is not None else max(
            (r.wire_timestamp for r in records), default=NO_TIMESTAMP)
    attributes = int(codec)
    attributes |= ATTR_LOG_APPEND_TIME if log_append_time is not None else 0
    attributes |= ATTR_TRANSACTIONAL if transactional else 0
    attributes |= ATTR_CONTROL if control else 0
    attributes |= ATTR_DELETE_HORIZON if delete_horizon_ms is not None else 0
    body = b"".join(_record_v2(r, base_offset, base_timestamp) for r in records)
    if records:  # an empty batch (e.g. left by compaction) has no payload to compress
        body = compress(codec, body, 2)
    header = V2_HEADER.pack(
        base_offset, V2_HEADER.size - 12 + len(body), partition_leader_epoch, 2, 0, attributes,
        last_offset - base_offset, base_timestamp, max_timestamp, producer_id, producer_epoch,
        base_sequence, len(records))
    crc = crc32c.crc32c(header[V2_CRC_START:] + body)
    return header[:17] + struct.pack(">I", crc) + header[V2_CRC_START:] + body


def rewrite_batch(batch: RecordBatch, compression: Compression | str | int | None = None) -> bytes:
    """Encode a decoded batch again (with its own compression unless another is given)."""
    codec = batch.compression if compression is None else Compression.parse(compression)
    log_append = batch.timestamp_type == "LOG_APPEND_TIME"
    if batch.magic < 2:
        return write_batch(batch.records, magic=batch.magic, compression=codec, last_offset=batch.last_offset,
                           log_append_time=batch.max_timestamp if log_append else None,
                           max_timestamp=batch.max_timestamp)
    return write_batch(
        batch.records, compression=codec, base_offset=batch.base_offset, last_offset=batch.last_offset,
        log_append_time=batch.max_timestamp if log_append else None, base_timestamp=batch.base_timestamp,
        max_timestamp=batch.max_timestamp, partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
        transactional=batch.is_transactional, control=batch.is_control, delete_horizon_ms=batch.delete_horizon_ms)


def _bytes_v2(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def _record_v2(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    parts = [b"\x00", varlong(record.wire_timestamp - base_timestamp), varint(record.offset - base_offset),
             _bytes_v2(record.key), _bytes_v2(record.value), varint(len(record.headers))]
    for header in record.headers:
        parts += [_bytes_v2(header.key.encode("utf-8")), _bytes_v2(header.value)]
    body = b"".join(parts)
    return uvarint((len(body) << 1) ^ (len(body) >> 31)) + body


def _legacy_bytes(data: bytes | None) -> bytes:
    return b"\xff\xff\xff\xff" if data is None else struct.pack(">i", len(data)) + data


def _legacy_entry(offset: int, magic: int, attributes: int, timestamp: int,
                  key: bytes | None, value: bytes | None) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _legacy_bytes(key) + _legacy_bytes(value)
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def _write_legacy(records: Sequence[Record], magic: int, codec: Compression, last_offset: int,
                  log_append_time: int | None, max_timestamp: int | None) -> bytes:
    time_attr = ATTR_LOG_APPEND_TIME if log_append_time is not None and magic == 1 else 0
    if codec is Compression.NONE or not records:
        return b"".join(
            _legacy_entry(r.offset, magic, time_attr, r.wire_timestamp, r.key, r.value) for r in records)
    base = records[0].offset if records else last_offset
    inner = b"".join(
        _legacy_entry(r.offset - base if magic else r.offset, magic, 0, r.wire_timestamp, r.key, r.value)
        for r in records)
    if max_timestamp is None:
        max_timestamp = log_append_time if log_append_time is not None else max(
            (r.wire_timestamp for r in records), default=NO_TIMESTAMP)
    return _legacy_entry(last_offset, magic, int(codec) | time_attr, max_timestamp, None,
                         compress(codec, inner, magic))

"""Parse record batches of magic 0, 1 and 2 from bytes.

Every length is checked against the input before use, CRCs are verified (CRC32 for magic 0/1,
CRC32C for magic 2), and decompression is bounded, so hostile input fails with a `DecodeError`
that names the batch instead of exhausting memory.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c

from kprotocol.errors import DecodeError, InvalidLengthError, InvalidValueError, TruncatedError
from kprotocol.records.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from kprotocol.records.errors import ChecksumError
from kprotocol.records.model import (
    ATTR_COMPRESSION,
    ATTR_LOG_APPEND_TIME,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Header,
    Record,
    RecordBatch,
    increment_sequence,
    new_header,
    new_record,
)
from kprotocol.runtime.primitives import read_varint, read_varlong

LOG_OVERHEAD = 12  # base offset + length
MAGIC_OFFSET = 16  # the magic byte sits at the same place in every format
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_CRC_START = 21
LEGACY_HEADER = struct.Struct(">qiIbb")
MIN_SIZE = {0: 14, 1: 22, 2: V2_HEADER.size - LOG_OVERHEAD}
MIN_V2_RECORD = 7
MAX_CODEC = 4  # zstd; attribute values 5-7 name no codec
# More records than a 1 MiB batch of the smallest records can hold (7 bytes each); `max_records` raises it.
DEFAULT_MAX_RECORDS = 1 << 18
# Continuation bytes after the payload send a varint read past its end to the general reader,
# which reports the truncation.
_PAD = b"\x80\x80\x80"
# How a v2 batch's records are read: (payload, count, base_offset, base_timestamp, log_append_time or
# None, base_sequence) -> the batch's records.
RecordsReader = Callable[[bytes, int, int, int, "int | None", int], Sequence[Any]]


def batch_extent(data: bytes, pos: int) -> int:
    """Total size in bytes of the batch starting at `pos`, after checking its length and magic."""
    if pos + LOG_OVERHEAD > len(data):
        raise TruncatedError(f"batch header needs {LOG_OVERHEAD} bytes, {len(data) - pos} remain", pos)
    (length,) = struct.unpack_from(">i", data, pos + 8)
    if pos + MAGIC_OFFSET >= len(data):
        raise TruncatedError("batch ends before its magic byte", pos)
    magic = data[pos + MAGIC_OFFSET]
    if magic not in MIN_SIZE:
        raise InvalidValueError(f"unknown record batch magic {magic}", pos + MAGIC_OFFSET)
    if length < MIN_SIZE[magic]:
        raise InvalidLengthError(f"batch length {length} is below the minimum for magic {magic}", pos + 8)
    end = pos + LOG_OVERHEAD + length
    if end > len(data):
        raise TruncatedError(f"batch of {LOG_OVERHEAD + length} bytes runs past the end of the input", pos)
    return LOG_OVERHEAD + length


def read_batches(
    data: bytes | bytearray | memoryview | str,
    *,
    verify_crc: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    max_records: int = DEFAULT_MAX_RECORDS,
) -> Iterator[RecordBatch]:
    """Every batch in `data` (bytes, or a hex string), in order, one at a time."""
    buf = bytes.fromhex(data) if isinstance(data, str) else bytes(data)
    pos = 0
    while pos < len(buf):
        batch = read_batch(buf, pos, verify_crc=verify_crc, max_decompressed=max_decompressed,
                           max_records=max_records)
        yield batch
        pos += batch.size


def read_batch(
    data: bytes, pos: int = 0, *, verify_crc: bool = True, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    max_records: int = DEFAULT_MAX_RECORDS, read_records_v2: RecordsReader | None = None,
) -> RecordBatch:
    """The single batch starting at `pos`. A batch declaring more than `max_records` records is refused
    before anything is decompressed, so memory stays bounded whatever a hostile batch inflates to.
    `read_records_v2` (the signature of `records_v2`) replaces how a v2 batch's records are read."""
    try:
        size = batch_extent(data, pos)
        if data[pos + MAGIC_OFFSET] == 2:
            return _read_v2(data, pos, size, verify_crc, max_decompressed, max_records, read_records_v2 or records_v2)
        return _read_legacy(data, pos, size, verify_crc, max_decompressed)
    except DecodeError as exc:
        if exc.reason.startswith("batch at offset") or pos + 8 > len(data):
            raise
        (base_offset,) = struct.unpack_from(">q", data, pos)
        raise type(exc)(f"batch at offset {base_offset}: {exc.reason}", exc.offset, exc.path) from None


# ---------------------------------------------------------------- magic 2

def _read_v2(data: bytes, pos: int, size: int, verify_crc: bool, limit: int,
             max_records: int, read_records: RecordsReader) -> RecordBatch:
    (base_offset, _, leader_epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
     producer_id, producer_epoch, base_sequence, count) = V2_HEADER.unpack_from(data, pos)
    end = pos + size
    if verify_crc:
        computed = crc32c.crc32c(data[pos + V2_CRC_START : end])
        if computed != crc:
            raise ChecksumError(
                f"batch at offset {base_offset}: CRC32C mismatch (stored {crc:#010x}, computed {computed:#010x})",
                pos + 17)
    codec = attributes & ATTR_COMPRESSION
    if codec > MAX_CODEC:
        raise InvalidValueError(f"batch at offset {base_offset}: unknown compression codec {codec}", pos + 21)
    if count > max_records:
        raise InvalidLengthError(f"batch at offset {base_offset}: record count {count} exceeds the limit of "
                                 f"{max_records} (max_records)", pos + 57)
    payload_start = pos + V2_HEADER.size
    payload = data[payload_start:end]
    if codec and payload:
        payload = decompress(codec, payload, limit)
    if count < 0 or count * MIN_V2_RECORD > len(payload):
        raise InvalidLengthError(f"record count {count} does not fit in {len(payload)} bytes", pos + 57)
    log_append = bool(attributes & ATTR_LOG_APPEND_TIME)
    try:
        records = read_records(payload, count, base_offset, base_ts, max_ts if log_append else None, base_sequence)
    except DecodeError as exc:
        exc.offset = pos if codec or exc.offset is None else payload_start + exc.offset
        raise
    return RecordBatch(
        base_offset=base_offset, last_offset=base_offset + last_delta, magic=magic, crc=crc,
        attributes=attributes, max_timestamp=max_ts, size=size, byte_offset=pos, records=records,
        partition_leader_epoch=leader_epoch, base_timestamp=base_ts, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, count=count)


def records_v2(payload: bytes, count: int, base_offset: int, base_ts: int,
                log_append_time: int | None, base_sequence: int) -> tuple[Record, ...]:
    """Decode `count` records in one loop: one- and two-byte varints (nearly every length and
    delta) are decoded inline, longer ones by the general readers, which also report truncation."""
    n = len(payload)
    buf = payload + _PAD
    records: list[Record] = []
    append = records.append
    make = new_record
    make_header = new_header
    no_sequence = base_sequence == NO_SEQUENCE
    sequence_room = 0x7FFFFFFF - base_sequence
    pos = index = 0
    try:
        for index in range(count):
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif 0 < (c := buf[pos + 1]) < 0x80:
                length = (b & 0x7F) | c << 7
                length = (length >> 1) ^ -(length & 1)
                pos += 2
            else:
                length, pos = read_varint(payload, pos)
            end = pos + length
            if length < 0 or end > n:
                raise InvalidLengthError(f"record length {length} runs past the records", pos)
            pos += 1  # attributes: unused
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif 0 < (c := buf[pos + 1]) < 0x80:
                ts_delta = (b & 0x7F) | c << 7
                ts_delta = (ts_delta >> 1) ^ -(ts_delta & 1)
                pos += 2
            else:
                ts_delta, pos = read_varlong(payload, pos)
            b = buf[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif 0 < (c := buf[pos + 1]) < 0x80:
                offset_delta = (b & 0x7F) | c << 7
                offset_delta = (offset_delta >> 1) ^ -(offset_delta & 1)
                pos += 2
            else:
                offset_delta, pos = read_varint(payload, pos)
            b = buf[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            elif 0 < (c := buf[pos + 1]) < 0x80:
                size = (b & 0x7F) | c << 7
                size = (size >> 1) ^ -(size & 1)
                pos += 2
            else:
                size, pos = read_varint(payload, pos)
            if size >= 0:
                if pos + size > end:
                    raise InvalidLengthError(f"key length {size} runs past the record", pos)
                key = buf[pos : pos + size]
                pos += size
            elif size == -1:
                key = None
            else:
                raise InvalidLengthError(f"key length {size} is negative", pos)
            b = buf[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            elif 0 < (c := buf[pos + 1]) < 0x80:
                size = (b & 0x7F) | c << 7
                size = (size >> 1) ^ -(size & 1)
                pos += 2
            else:
                size, pos = read_varint(payload, pos)
            if size >= 0:
                if pos + size > end:
                    raise InvalidLengthError(f"value length {size} runs past the record", pos)
                value = buf[pos : pos + size]
                pos += size
            elif size == -1:
                value = None
            else:
                raise InvalidLengthError(f"value length {size} is negative", pos)
            b = buf[pos]
            if b < 0x80:
                header_count = (b >> 1) ^ -(b & 1)
                pos += 1
            elif 0 < (c := buf[pos + 1]) < 0x80:
                header_count = (b & 0x7F) | c << 7
                header_count = (header_count >> 1) ^ -(header_count & 1)
                pos += 2
            else:
                header_count, pos = read_varint(payload, pos)
            if header_count:
                if header_count < 0 or header_count * 2 > end - pos:
                    raise InvalidLengthError(f"header count {header_count} does not fit in the record", pos)
                header_list = []
                for _ in range(header_count):
                    b = buf[pos]
                    if b < 0x80:
                        size = (b >> 1) ^ -(b & 1)
                        pos += 1
                    elif 0 < (c := buf[pos + 1]) < 0x80:
                        size = (b & 0x7F) | c << 7
                        size = (size >> 1) ^ -(size & 1)
                        pos += 2
                    else:
                        size, pos = read_varint(payload, pos)
                    if size < 0:
                        if size != -1:
                            raise InvalidLengthError(f"header key length {size} is negative", pos)
                        raise InvalidValueError("header key is null", pos)
                    if pos + size > end:
                        raise InvalidLengthError(f"header key length {size} runs past the record", pos)
                    try:
                        name = buf[pos : pos + size].decode("utf-8")
                    except UnicodeDecodeError:
                        raise InvalidValueError("header key is not valid UTF-8", pos + size) from None
                    pos += size
                    b = buf[pos]
                    if b < 0x80:
                        size = (b >> 1) ^ -(b & 1)
                        pos += 1
                    elif 0 < (c := buf[pos + 1]) < 0x80:
                        size = (b & 0x7F) | c << 7
                        size = (size >> 1) ^ -(size & 1)
                        pos += 2
                    else:
                        size, pos = read_varint(payload, pos)
                    if size >= 0:
                        if pos + size > end:
                            raise InvalidLengthError(f"header value length {size} runs past the record", pos)
                        data = buf[pos : pos + size]
                        pos += size
                    elif size == -1:
                        data = None
                    else:
                        raise InvalidLengthError(f"header value length {size} is negative", pos)
                    header_list.append(make_header(name, data))
                headers: tuple[Header, ...] = tuple(header_list)
            else:
                headers = ()
            if pos != end:
                raise InvalidLengthError(f"record length {length} disagrees with its fields", pos)
            written = base_ts + ts_delta
            if no_sequence:
                sequence = NO_SEQUENCE
            elif offset_delta <= sequence_room:
                sequence = base_sequence + offset_delta
            else:
                sequence = increment_sequence(base_sequence, offset_delta)
            if log_append_time is None:
                append(make(base_offset + offset_delta, written, key, value, headers, sequence, None))
            else:
                append(make(base_offset + offset_delta, log_append_time, key, value, headers, sequence,
                            None if written == log_append_time else written))
    except DecodeError as exc:
        raise exc.within(f"records[{index}]") from None
    if pos != n:
        raise InvalidValueError(f"{n - pos} bytes remain after the last record", pos)
    return tuple(records)


# ---------------------------------------------------------------- magic 0 and 1

@dataclass(frozen=True, slots=True)
class LegacyEntry:
    """One magic 0/1 message with its log offset and total size."""

    offset: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    size: int


def _legacy_entry(data: bytes, pos: int, verify_crc: bool) -> LegacyEntry:
    size = batch_extent(data, pos)
    offset, _, crc, magic, attributes = LEGACY_HEADER.unpack_from(data, pos)
    end = pos + size
    if verify_crc:
        computed = zlib.crc32(data[pos + MAGIC_OFFSET : end])
        if computed != crc:
            raise ChecksumError(
                f"batch at offset {offset}: CRC32 mismatch (stored {crc:#010x}, computed {computed:#010x})",
                pos + 12)
    cursor = pos + MAGIC_OFFSET + 2
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = struct.unpack_from(">q", data, cursor)
        cursor += 8
    key, cursor = _legacy_bytes(data, cursor, end, "key")
    value, cursor = _legacy_bytes(data, cursor, end, "value")
    if cursor != end:
        raise InvalidLengthError(f"message size {size - LOG_OVERHEAD} disagrees with its fields", cursor)
    return LegacyEntry(offset, crc, magic, attributes, timestamp, key, value, size)


def _legacy_bytes(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise TruncatedError(f"{what} length runs past the message", pos)
    (length,) = struct.unpack_from(">i", data, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise InvalidLengthError(f"{what} length {length} runs past the message", pos)
    return data[pos : pos + length], pos + length


def _read_legacy(data: bytes, pos: int, size: int, verify_crc: bool, limit: int) -> RecordBatch:
    wrapper = _legacy_entry(data, pos, verify_crc)
    codec = wrapper.attributes & ATTR_COMPRESSION
    if codec > MAX_CODEC:
        raise InvalidValueError(f"message at offset {wrapper.offset}: unknown compression codec {codec}", pos + 17)
    log_append = wrapper.magic == 1 and bool(wrapper.attributes & ATTR_LOG_APPEND_TIME)
    if not codec:
        records: tuple[Record, ...] = (Record(wrapper.offset, wrapper.timestamp, wrapper.key, wrapper.value),)
    else:
        try:
            records = _legacy_inner(decompress(codec, wrapper.value or b"", limit), wrapper,
                                    wrapper.timestamp if log_append else None, verify_crc)
        except DecodeError as exc:
            exc.offset = pos
            raise
    return RecordBatch(
        base_offset=records[0].offset if records else wrapper.offset, last_offset=wrapper.offset,
        magic=wrapper.magic, crc=wrapper.crc, attributes=wrapper.attributes, max_timestamp=wrapper.timestamp,
        size=size, byte_offset=pos, records=records)


def _legacy_inner(payload: bytes, wrapper: LegacyEntry, log_append_time: int | None,
                  verify_crc: bool) -> tuple[Record, ...]:
    """The messages inside a compressed wrapper. Magic 1 stores inner offsets relative to the
    first one and the wrapper carries the last absolute offset; magic 0 stores absolute offsets."""
    entries = []
    pos = 0
    while pos < len(payload):
        entry = _legacy_entry(payload, pos, verify_crc)
        if entry.attributes & ATTR_COMPRESSION:
            raise InvalidValueError("a compressed message is nested inside another", pos)
        entries.append(entry)
        pos += entry.size
    shift = wrapper.offset - entries[-1].offset if entries and wrapper.magic > 0 else 0
    records = []
    for entry in entries:
        timestamp = entry.timestamp if log_append_time is None else log_append_time
        records.append(Record(entry.offset + shift, timestamp, entry.key, entry.value,
                              written_timestamp=None if entry.timestamp == timestamp else entry.timestamp))
    return tuple(records)

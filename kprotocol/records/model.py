"""Decoded records and batches; `to_dict()` gives the shape of the shared RecordBatches vectors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from kprotocol.records.compression import Compression

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

ATTR_COMPRESSION = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequences wrap from Integer.MAX_VALUE to 0."""
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value_hex": _hex(self.value)}


@dataclass(frozen=True, slots=True)
class Record:
    """One record. `timestamp` is the effective one (a LogAppendTime batch's for every record);
    `written_timestamp` keeps the value stored on the wire when that differs."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int | None = None
    written_timestamp: int | None = None

    @property
    def wire_timestamp(self) -> int:
        return self.timestamp if self.written_timestamp is None else self.written_timestamp

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key_hex": _hex(self.key),
            "value_hex": _hex(self.value),
            "headers": [h.to_dict() for h in self.headers],
        }
        if self.sequence is not None:
            out["sequence"] = self.sequence
        return out


def _constructors() -> tuple[Callable[[str, bytes | None], Header], Callable[..., Record]]:
    """Positional `Header` and `Record` constructors for decode loops. They set the slots directly,
    skipping the frozen dataclass `__init__`'s per-field `object.__setattr__` calls."""
    new = object.__new__
    header_key, header_value = (Header.__dict__[f.name].__set__ for f in fields(Header))
    offset_, timestamp_, key_, value_, headers_, sequence_, written_ = (
        Record.__dict__[f.name].__set__ for f in fields(Record))

    def new_header(key: str, value: bytes | None) -> Header:
        header = new(Header)
        header_key(header, key)
        header_value(header, value)
        return header

    def new_record(offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: tuple[Header, ...], sequence: int | None, written_timestamp: int | None) -> Record:
        record = new(Record)
        offset_(record, offset)
        timestamp_(record, timestamp)
        key_(record, key)
        value_(record, value)
        headers_(record, headers)
        sequence_(record, sequence)
        written_(record, written_timestamp)
        return record

    return new_header, new_record


new_header, new_record = _constructors()


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A v2 batch, or a magic 0/1 entry (a single record or a compressed wrapper of several)."""

    base_offset: int
    last_offset: int
    magic: int
    crc: int
    attributes: int
    max_timestamp: int
    size: int
    byte_offset: int
    records: tuple[Record, ...] = field(default=())
    partition_leader_epoch: int = -1
    base_timestamp: int = NO_TIMESTAMP
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    count: int | None = None

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION)

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_CONTROL)

    @property
    def timestamp_type(self) -> str:
        if self.magic == 0:
            return "NO_TIMESTAMP_TYPE"
        return "LOG_APPEND_TIME" if self.attributes & ATTR_LOG_APPEND_TIME else "CREATE_TIME"

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset - self.base_offset)

    @property
    def delete_horizon_ms(self) -> int | None:
        if self.magic >= 2 and self.attributes & ATTR_DELETE_HORIZON:
            return self.base_timestamp
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseOffset": self.base_offset,
            "lastOffset": self.last_offset,
            "partitionLeaderEpoch": self.partition_leader_epoch,
            "magic": self.magic,
            "crc": self.crc,
            "attributes": self.attributes,
            "compression": self.compression.label,
            "isTransactional": self.is_transactional,
            "isControl": self.is_control,
            "timestampType": self.timestamp_type,
            "maxTimestamp": self.max_timestamp,
            "producerId": self.producer_id,
            "producerEpoch": self.producer_epoch,
            "baseSequence": self.base_sequence,
            "lastSequence": self.last_sequence,
            "deleteHorizonMs": self.delete_horizon_ms,
            "countOrNull": self.count,
            "sizeInBytes": self.size,
            "byteOffset": self.byte_offset,
            "records": [r.to_dict() for r in self.records],
        }

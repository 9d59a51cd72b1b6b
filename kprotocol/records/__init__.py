"""Kafka record batches (magic 0, 1 and 2), log segments and control records.

    from kprotocol.records import read_batches, write_batch, Record
    for batch in read_batches(data):
        batch.to_dict()
    write_batch([Record(0, 1700000000000, b"k", b"v")], compression="zstd")
"""

from __future__ import annotations

from kprotocol.records.compression import Compression
from kprotocol.records.control import decode_control, marker_record
from kprotocol.records.errors import ChecksumError, CompressionError, DecompressionLimitError
from kprotocol.records.message import to_json_with_records
from kprotocol.records.model import Header, Record, RecordBatch
from kprotocol.records.reader import read_batch, read_batches
from kprotocol.records.segment import LogEntry, SegmentProblem, read_logs, read_segment, read_segment_bytes
from kprotocol.records.writer import rewrite_batch, write_batch

__all__ = [
    "ChecksumError",
    "Compression",
    "CompressionError",
    "DecompressionLimitError",
    "Header",
    "LogEntry",
    "Record",
    "RecordBatch",
    "SegmentProblem",
    "decode_control",
    "marker_record",
    "read_batch",
    "read_batches",
    "read_logs",
    "read_segment",
    "read_segment_bytes",
    "rewrite_batch",
    "to_json_with_records",
    "write_batch",
]

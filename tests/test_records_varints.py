"""Magic-2 record varints of every width: the reader's inline one/two-byte paths and the general one."""

from __future__ import annotations

import crc32c
import pytest

from kprotocol.errors import InvalidLengthError, InvalidValueError, TruncatedError
from kprotocol.records import Header, Record, read_batches, write_batch
from kprotocol.records.reader import V2_CRC_START, V2_HEADER


def _batch(payload: bytes, count: int) -> bytes:
    """An uncompressed v2 batch around raw record bytes (base offset and timestamp 0)."""
    header = V2_HEADER.pack(0, V2_HEADER.size - 12 + len(payload), -1, 2, 0, 0, 0, 0, 0, -1, -1, -1, count)
    crc = crc32c.crc32c(header[V2_CRC_START:] + payload)
    return header[:17] + crc.to_bytes(4, "big") + header[V2_CRC_START:] + payload


@pytest.mark.parametrize("size", [0, 63, 64, 8191, 8192, 1_048_576])
def test_lengths_deltas_and_counts_of_every_varint_width_round_trip(size):
    count = 65 if size == 64 else 8192 if size == 8192 else 2
    headers = tuple(Header("h" * (size % 100), bytes(size) if i == 1 else None) for i in range(count))
    records = [
        Record(10, 1_700_000_000_000, bytes(size), None, headers, 7),
        Record(10 + size, 1_700_000_000_000 + size * 1000, None, bytes(size), (), 7 + size),
        Record(10 + size + 2**20, 1_700_000_000_000 - 2**40, b"", b"k" * size, headers[:1], 7 + size + 2**20),
    ]
    (batch,) = read_batches(write_batch(records, producer_id=1, producer_epoch=0, base_sequence=7))
    assert batch.records == tuple(records)


@pytest.mark.parametrize(("record", "error", "path"), [
    (b"\x0a\x00\x00\x00\x01\x00\x00", InvalidLengthError, "records[0]"),  # length 5, fields need 6
    (b"\x0c\x00\x00\x00\x01\x00\x80", TruncatedError, "records[0]"),  # header count runs past the end
    (b"\x0e\x00\x00\x00\x80\x00\x00\x00", InvalidValueError, "records[0]"),  # key length not minimal
    (b"\x0a\x00\x00\x00\x01\x04\x00\x00", InvalidLengthError, "records[0]"),  # value runs past the record
    (b"\x0c\x00\x00\x00\x01\x01\x02", InvalidLengthError, "records[0]"),  # header count 1 in no bytes
])
def test_malformed_varints_are_reported_in_the_record(record, error, path):
    with pytest.raises(error) as info:
        list(read_batches(_batch(record, 1)))
    assert info.value.path == path

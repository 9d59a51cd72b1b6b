"""Hypothesis round trips for batch write/read, and malformed input."""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprotocol.errors import DecodeError, TruncatedError
from kprotocol.records import (
    ChecksumError,
    Compression,
    DecompressionLimitError,
    Header,
    Record,
    read_batches,
    write_batch,
)

optional_bytes = st.none() | st.binary(max_size=64)
headers = st.lists(st.builds(Header, st.text(max_size=8), optional_bytes), max_size=3).map(tuple)


@st.composite
def record_lists(draw, magic: int):
    base_offset = draw(st.integers(0, 2**40))
    gaps = draw(st.lists(st.integers(0, 5), min_size=1, max_size=12))
    offsets, current = [], base_offset
    for gap in gaps:
        offsets.append(current)
        current += gap + 1
    timestamps = st.integers(-1, 2**42) if magic else st.just(-1)
    return [
        Record(offset, draw(timestamps), draw(optional_bytes), draw(optional_bytes),
               draw(headers) if magic == 2 else (), -1 if magic == 2 else None)
        for offset in offsets
    ]


def _codecs(magic: int):
    return st.sampled_from([c for c in Compression if magic == 2 or c is not Compression.ZSTD])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_v2_round_trip(data):
    records = data.draw(record_lists(2))
    codec = data.draw(_codecs(2))
    producer_id = data.draw(st.sampled_from([-1, 0, 2**62]))
    base_sequence = -1 if producer_id == -1 else data.draw(st.integers(0, 2**31 - 1))
    raw = write_batch(records, compression=codec, producer_id=producer_id, producer_epoch=3 if producer_id >= 0 else -1,
                      base_sequence=base_sequence, transactional=producer_id >= 0, partition_leader_epoch=7)
    (batch,) = read_batches(raw)
    assert batch.compression is codec and batch.size == len(raw)
    assert batch.base_offset == records[0].offset and batch.last_offset == records[-1].offset
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
    if base_sequence >= 0:
        assert batch.records[0].sequence == base_sequence


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_legacy_round_trip(data):
    magic = data.draw(st.sampled_from([0, 1]))
    records = data.draw(record_lists(magic))
    codec = data.draw(_codecs(magic))
    raw = write_batch(records, magic=magic, compression=codec)
    batches = list(read_batches(raw))
    assert len(batches) == (1 if codec is not Compression.NONE else len(records))
    got = [r for b in batches for r in b.records]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == [
        (r.offset, r.timestamp, r.key, r.value) for r in records]


def test_log_append_time_overrides_record_timestamps_and_keeps_written_ones():
    records = [Record(5, 1000, b"a", b"1"), Record(6, 1010, None, b"2")]
    raw = write_batch(records, log_append_time=99999)
    (batch,) = read_batches(raw)
    assert [r.timestamp for r in batch.records] == [99999, 99999]
    assert [r.wire_timestamp for r in batch.records] == [1000, 1010]
    assert batch.timestamp_type == "LOG_APPEND_TIME"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_only_raises_decode_errors(garbage):
    try:
        list(read_batches(garbage))
    except DecodeError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 255))
def test_any_single_corruption_is_detected_or_harmless(position, value):
    """Harmless: the same records, but for the two header fields Kafka's CRC does not cover either (the base
    offset, bytes 0-7, shifts every offset alike; the partition leader epoch, bytes 12-15)."""
    clean = write_batch([Record(i, 1700000000000 + i, b"k%d" % i, b"v" * i) for i in range(5)], compression="lz4")
    raw = bytearray(clean)
    at = position % len(raw)
    raw[at] = value
    try:
        got = list(read_batches(bytes(raw)))
    except DecodeError:
        return
    (before,) = read_batches(clean)
    (after,) = got

    def content(batch, offsets: bool = True, epoch: bool = True):
        return (batch.partition_leader_epoch if epoch else None, [
            (r.offset - (0 if offsets else batch.base_offset), r.timestamp, r.key, r.value, r.headers)
            for r in batch.records])
    assert content(after, offsets=at >= 8, epoch=not 12 <= at < 16) == \
        content(before, offsets=at >= 8, epoch=not 12 <= at < 16), f"byte {at} set to {value}: undetected change"


def test_crc_error_names_the_batch_offset():
    raw = bytearray(write_batch([Record(4242, 1, b"k", b"v")]))
    raw[-1] ^= 0xFF
    with pytest.raises(ChecksumError, match="batch at offset 4242: CRC32C mismatch"):
        list(read_batches(bytes(raw)))
    legacy = bytearray(write_batch([Record(77, 1, b"k", b"v")], magic=1))
    legacy[-1] ^= 0xFF
    with pytest.raises(ChecksumError, match="batch at offset 77: CRC32 mismatch"):
        list(read_batches(bytes(legacy)))


def test_hostile_counts_and_lengths_fail_fast():
    raw = bytearray(write_batch([Record(0, 1, b"k", b"v")]))
    struct.pack_into(">i", raw, 57, 2**31 - 1)  # record count
    with pytest.raises(DecodeError, match="record count"):
        list(read_batches(bytes(raw), verify_crc=False))
    struct.pack_into(">i", raw, 8, 2**31 - 1)  # batch length
    with pytest.raises(TruncatedError):
        list(read_batches(bytes(raw)))


@pytest.mark.parametrize("codec", ["gzip", "zstd", "snappy", "lz4"])
def test_decompression_is_bounded(codec):
    records = [Record(0, 1, None, bytes(2_000_000))]
    raw = write_batch(records, compression=codec)
    assert len(raw) < 200_000
    with pytest.raises(DecompressionLimitError):
        list(read_batches(raw, max_decompressed=1_000_000))
    assert list(read_batches(raw))[0].records[0].value == bytes(2_000_000)


def test_plain_snappy_block_is_accepted():
    inner = write_batch([Record(0, 1, b"k", b"v"), Record(1, 2, None, b"w")], magic=1)
    wrapper_value = bytes(cramjam.snappy.compress_raw(inner))
    body = struct.pack(">bbq", 1, 2, 2) + b"\xff\xff\xff\xff" + struct.pack(">i", len(wrapper_value)) + wrapper_value

    raw = struct.pack(">qiI", 1, len(body) + 4, zlib.crc32(body)) + body
    (batch,) = read_batches(raw)
    assert [r.value for r in batch.records] == [b"v", b"w"]



@settings(max_examples=200, deadline=None)
@given(st.data())
def test_compiled_record_summaries_equal_the_python_ones(data):
    """records_summary's compiled path (kprotocol._speedups.summarize_v2) gives what the Python reader
    gives, for every batch and for damaged payloads (where it declines and Python says what is wrong)."""
    from kprotocol.records import summary
    from kprotocol.records.reader import records_v2
    from kprotocol.runtime.accel import _speedups

    assert _speedups is not None, "make test builds the compiled fast path"
    long_values = st.none() | st.binary(max_size=200)
    records = [dataclasses.replace(r, key=data.draw(long_values), value=data.draw(long_values))
               for r in data.draw(record_lists(2))]
    log_append_time = data.draw(st.none() | st.integers(0, 2**42))
    raw = write_batch(records, compression=data.draw(_codecs(2)), log_append_time=log_append_time)
    max_bytes = data.draw(st.sampled_from([0, 16, 64, 1000]))
    (batch,) = read_batches(raw)
    assert summary.records_summary(raw, max_bytes)["batches"] == [summary.batch_summary(batch, True, max_bytes)]
    if raw[22] & 7:
        return
    payload = bytearray(raw[61:])  # uncompressed: damage one byte of the records
    payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    fast = _speedups.summarize_v2(bytes(payload), len(records), 0, 0, None, 64, summary.PREFIX, hashlib.sha256)
    try:
        slow = [summary._record(r, 64) for r in records_v2(bytes(payload), len(records), 0, 0, None, -1)]
    except DecodeError:
        assert fast is None
    else:
        assert fast is None or fast == slow

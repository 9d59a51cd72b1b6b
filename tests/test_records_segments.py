"""Log segments: the fixture reads completely; damaged copies report every problem and keep every valid batch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprotocol.records import Record, RecordBatch, SegmentProblem, read_batches, read_logs, read_segment, write_batch
from kprotocol.records.segment import read_segment_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "offsets"
SEGMENT = FIXTURES / "00000000000000000000.log"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())


def _split(entries):
    batches = [e for e in entries if isinstance(e, RecordBatch)]
    problems = [e for e in entries if isinstance(e, SegmentProblem)]
    return batches, problems


def test_fixture_reads_completely():
    batches, problems = _split(list(read_segment(SEGMENT)))
    assert problems == []
    assert [b.base_offset for b in batches] == MANIFEST["batches"]
    assert [b.to_dict() for b in batches] == [b.to_dict() for b in read_batches(SEGMENT.read_bytes())]
    assert {b.compression.label for b in batches} >= {"none", "gzip", "lz4", "zstd"}
    assert any(b.is_control for b in batches) and any(b.is_transactional and not b.is_control for b in batches)


@pytest.mark.parametrize("name", ["damaged-crc.log", "damaged-truncated.log", "damaged-garbage.log"])
def test_damaged_copy_reports_every_problem_and_keeps_every_valid_batch(name):
    expected = MANIFEST[name]
    batches, problems = _split(list(read_segment(FIXTURES / name)))
    assert [{"kind": p.kind, "position": p.position, "length": p.length} for p in problems] == expected["problems"]
    assert all(p.message and p.source.endswith(name) for p in problems)
    good = {b.base_offset: b.to_dict()["records"] for b in read_batches(SEGMENT.read_bytes())}
    kept = {b.base_offset: b.to_dict()["records"] for b in batches if b.base_offset in good}
    assert kept == {k: v for k, v in good.items() if k not in expected["lostBatches"]}


def test_crc_problem_names_the_batch_offset():
    _, (problem,) = _split(list(read_segment(FIXTURES / "damaged-crc.log")))
    assert f"batch at offset {MANIFEST['damaged-crc.log']['lostBatches'][0]}: CRC32C mismatch" in problem.message


def test_directory_reads_segments_in_base_offset_order(tmp_path):
    first = write_batch([Record(0, 1, b"a", b"1"), Record(1, 2, b"b", b"2")])
    second = write_batch([Record(2, 3, b"c", b"3")], compression="zstd")
    third = write_batch([Record(10, 4, b"d", b"4")], magic=1)
    (tmp_path / "00000000000000000010.log").write_bytes(third)
    (tmp_path / "00000000000000000002.log").write_bytes(second)
    (tmp_path / "00000000000000000000.log").write_bytes(first)
    (tmp_path / "00000000000000000000.index").write_bytes(b"\x00" * 8)
    (tmp_path / "empty").mkdir()
    entries = list(read_logs([tmp_path]))
    assert [e.base_offset for _, e in entries] == [0, 2, 10]
    assert [f.name for f, _ in entries] == ["00000000000000000000.log", "00000000000000000002.log",
                                            "00000000000000000010.log"]


def test_preallocated_zero_tail_is_not_a_problem(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(SEGMENT.read_bytes() + bytes(4096))
    batches, problems = _split(list(read_segment(path)))
    assert problems == [] and len(batches) == len(MANIFEST["batches"])


def test_empty_segment(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"")
    assert list(read_segment(path)) == []


def test_corruption_anywhere_loses_at_most_the_damaged_batch():
    data = SEGMENT.read_bytes()
    spans = [(b.byte_offset, b.byte_offset + b.size, b.base_offset) for b in read_batches(data)]
    for position in range(0, len(data), 97):
        damaged = bytearray(data)
        damaged[position] ^= 0x5A
        batches, problems = _split(list(read_segment_bytes(bytes(damaged))))
        start, hit = next((start, base) for start, end, base in spans if start <= position < end)
        assert {b.base_offset for b in batches} >= {base for _, _, base in spans if base != hit}
        outside_crc = position - start < 8 or 12 <= position - start < 16  # base offset, leader epoch
        assert problems or outside_crc, position


def test_copied_fixture_matches_in_a_directory(tmp_path):
    shutil.copy(SEGMENT, tmp_path / SEGMENT.name)
    assert len(list(read_logs([tmp_path]))) == len(MANIFEST["batches"])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_every_byte_is_a_batch_or_a_reported_problem(data):
    segment = SEGMENT.read_bytes()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(segment)), max_size=3)))
    damaged = bytearray(segment)
    for cut in cuts:
        damaged[cut:cut] = data.draw(st.binary(min_size=1, max_size=30))
    batches, problems = _split(list(read_segment_bytes(bytes(damaged))))
    covered = sorted([(b.byte_offset, b.size) for b in batches] + [(p.position, p.length) for p in problems])
    position = 0
    for start, size in covered:
        assert start == position
        position += size
    assert not any(damaged[position:])  # only an all-zero tail may go unreported


def test_hostile_batches_fail_at_read_time_in_bounded_memory() -> None:
    """An invalid codec is a DecodeError when the batch is read, and a small compressed batch that
    declares millions of tiny records is refused before it is inflated."""
    import time
    import tracemalloc

    import zstandard

    from kprotocol.errors import DecodeError
    from kprotocol.records import read_batches, write_batch
    from kprotocol.records.model import Record

    plain = bytearray(write_batch([Record(0, 0, b"k", b"v")]))
    plain[21 + 1] = (plain[21 + 1] & 0xF8) | 5  # attributes low byte: codec bits set to 5
    with pytest.raises(DecodeError, match="unknown compression codec 5"):
        list(read_batches(bytes(plain), verify_crc=False))

    count = 2_000_000
    tiny = b"\x0c\x00\x00\x00\x01\x01\x00" * count  # 7-byte records: no key, no value, no headers
    bomb = bytearray(write_batch([Record(0, 0, None, None)], compression="zstd"))
    header = bomb[:61]
    payload = zstandard.ZstdCompressor().compress(tiny)
    header[57:61] = count.to_bytes(4, "big")
    header[8:12] = (len(header) - 12 + len(payload)).to_bytes(4, "big")
    del tiny
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(DecodeError, match="exceeds the limit"):
        list(read_batches(bytes(header) + payload, verify_crc=False))
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 2 and peak < 200 << 20


def test_a_batch_over_the_record_limit_is_a_problem_before_inflating() -> None:
    """A tiny compressed batch that declares millions of records is refused by its header, at every
    entry point, with the limit configurable."""
    from kprotocol.errors import DecodeError
    from kprotocol.records.summary import records_summary

    raw = write_batch([Record(offset=i, timestamp=0, key=None, value=b"") for i in range(300)], compression="zstd")
    assert [b.count for b in read_batches(raw)] == [300]
    with pytest.raises(DecodeError, match="exceeds the limit"):
        list(read_batches(raw, max_records=100))
    problems = [e for e in read_segment_bytes(raw, max_records=100) if isinstance(e, SegmentProblem)]
    assert problems and "exceeds the limit" in problems[0].message
    assert "exceeds the limit" in records_summary(raw, max_records=100)["problems"][0]["error"]

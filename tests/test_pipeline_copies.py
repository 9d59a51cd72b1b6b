"""Copies in the pipeline's input are kept once: a segment and its copies (records by topic, partition
and offset), a capture and its pcapng conversion (exchanges by connection, correlation id and times);
the copies are told once, in the duplicates table and the report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kprotocol.pipeline import run_captures, run_offsets
from kprotocol.pipeline.copies import Coverage, overlaps
from kprotocol.pipeline.report import write_report

ROOT = Path(__file__).resolve().parents[1]
SEGMENT = ROOT / "fixtures" / "offsets" / "00000000000000000000.log"
CAPTURES = ROOT / "fixtures" / "captures"
pytestmark = pytest.mark.xdist_group("spark")


@pytest.fixture(scope="module")
def spark():
    from kprotocol.pipeline import spark_session

    session = spark_session("local[2]", progress=False)
    yield session
    session.stop()


def _rows(out: Path, table: str) -> list[dict]:
    return pq.read_table(out / table).to_pylist()


def _key(row: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in row.items() if k not in ("segment", "source", "batch_position")))


def test_four_copies_of_a_segment_give_the_tables_of_one(spark, tmp_path: Path) -> None:
    one, four = tmp_path / "one", tmp_path / "four"
    inputs = tmp_path / "in"
    targets = [inputs / "data" / "__consumer_offsets-5" / "00000000000000000000.log",
               inputs / "backup" / "__consumer_offsets-5" / "00000000000000000000.log",
               inputs / "loose2" / "copy2.log", inputs / "loose3" / "copy3.log"]
    for target in targets:  # a partition directory, a backup of it, two loose copies
        target.parent.mkdir(parents=True)
        shutil.copy(SEGMENT, target)
    single = inputs / "data" / "__consumer_offsets-5"
    base = run_offsets([str(single)], str(one), spark=spark, split_bytes=700)
    counts = run_offsets([str(inputs)], str(four), spark=spark, split_bytes=700)
    for table in ("records", "offsets_committed", "group_members", "rebalances", "problems"):
        assert sorted(map(_key, _rows(four, table))) == sorted(map(_key, _rows(one, table))), table
    assert counts["records"] == base["records"] and counts["rebalances"] == base["rebalances"] > 0
    # The copy in a partition directory is a copy of partition 5's segment; the loose copies (partition
    # unknown) are copies as well: same offsets, timestamps and keys.
    assert counts["duplicate_records"] == 3 * base["records"]
    duplicates = _rows(four, "duplicates")
    assert sorted((Path(d["source"]).name, d["rows"]) for d in duplicates) == [
        ("00000000000000000000.log", base["records"]), ("copy2.log", base["records"]),
        ("copy3.log", base["records"])]
    assert {Path(d["copy_of"]).parent.name for d in duplicates} == {"__consumer_offsets-5"}
    assert not [p for p in (four / "records").iterdir() if p.name.startswith(".")]
    page = tmp_path / "report.html"
    write_report(str(four), page)
    text = page.read_text()
    assert "Copies in the input" in text and "copy3.log" in text
    assert text.count("<td>fraud-detector") <= 1  # one rebalance, not four


def test_different_partitions_are_not_copies(spark, tmp_path: Path) -> None:
    """Two partitions' segments hold the same offsets: not copies (their topic-partitions differ)."""
    inputs = tmp_path / "in"
    for partition in (1, 2):
        (inputs / f"__consumer_offsets-{partition}").mkdir(parents=True)
        shutil.copy(SEGMENT, inputs / f"__consumer_offsets-{partition}" / "00000000000000000000.log")
    counts = run_offsets([str(inputs)], str(tmp_path / "out"), spark=spark)
    assert counts["duplicate_records"] == 0 and _rows(tmp_path / "out", "duplicates") == []
    assert len({r["partition"] for r in _rows(tmp_path / "out", "records")}) == 2


def test_a_capture_and_its_pcapng_conversion_give_the_exchanges_of_one(spark, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copy(CAPTURES / "clients.pcap", inputs / "clients.pcap")
    shutil.copy(CAPTURES / "clients.pcapng", inputs / "clients.pcapng")
    alone = run_captures([str(inputs / "clients.pcap")], str(tmp_path / "one"), spark=spark, ports=(60127,))
    both = run_captures([str(inputs)], str(tmp_path / "two"), spark=spark, ports=(60127,))
    assert both["exchanges"] == alone["exchanges"] > 100
    assert both["duplicate_exchanges"] == alone["exchanges"]
    assert sorted(map(_key, _rows(tmp_path / "two", "exchanges"))) == sorted(map(_key, _rows(tmp_path / "one",
                                                                                          "exchanges")))
    assert [(Path(d["source"]).name, Path(d["copy_of"]).name, d["rows"]) for d in _rows(tmp_path / "two",
                                                                                        "duplicates")] == [
        ("clients.pcapng", "clients.pcap", alone["exchanges"])]
    # Split into many tasks (the shuffled path): the same.
    many = run_captures([str(inputs)], str(tmp_path / "many"), spark=spark, ports=(60127,), split_bytes=20_000,
                        owners_max=0)
    assert many["exchanges"] == alone["exchanges"] and many["duplicate_exchanges"] == alone["exchanges"]


def test_only_overlapping_ranges_of_other_sources_are_compared() -> None:
    covered = [Coverage("a0", ("t", 0), "a", 0, 99), Coverage("a1", ("t", 0), "a", 100, 199),
               Coverage("b0", ("t", 0), "b", 150, 250), Coverage("c0", ("t", 1), "c", 0, 300)]
    assert overlaps(covered) == [["a1", "b0"]]
    # Chains join: a thousand copies are one group (one task reads each once).
    copies = [Coverage(f"p{n:04d}", ("t", 0), f"s{n:04d}", 0, 10) for n in range(1000)]
    assert overlaps(copies) == [[f"p{n:04d}" for n in range(1000)]]

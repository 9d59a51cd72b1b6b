"""The Spark pipeline on real PySpark (local[2]): its tables equal the single-process decoders'."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprotocol.cli import main as cli_main
from kprotocol.pipeline import plan_offsets, run_offsets
from kprotocol.pipeline.files import list_inputs
from kprotocol.pipeline.splits import index_positions, plan_segment
from kprotocol.records.segment import read_segment

ROOT = Path(__file__).resolve().parents[1]
OFFSETS = ROOT / "fixtures" / "offsets"
pytestmark = pytest.mark.xdist_group("spark")


@pytest.fixture(scope="module")
def spark():
    from kprotocol.pipeline import spark_session

    session = spark_session("local[2]", progress=False)
    yield session
    session.stop()


def _rows(out: Path, table: str) -> list[dict]:
    return pq.read_table(out / table).to_pylist()


def _cli_records(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> list[dict]:
    """What the single-process `kprotocol offsets decode` prints, one dict per record."""
    cli_main(["offsets", "decode", *map(str, paths), "--no-progress"])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _batch_starts(path: Path) -> list[int]:
    starts, pos = [], 0
    for entry in read_segment(path):
        starts.append(pos)
        pos += getattr(entry, "size", None) or entry.length
    return starts


def test_records_equal_single_process_decoder_at_every_split_size(spark, tmp_path, capsys) -> None:
    segment = OFFSETS / "00000000000000000000.log"
    expected = _cli_records([segment], capsys)
    for split_bytes in (1, 700, 1 << 30):  # every batch its own split, a few splits, one split
        out = tmp_path / str(split_bytes)
        counts = run_offsets([str(segment)], str(out), spark=spark, split_bytes=split_bytes)
        rows = sorted(_rows(out, "records"), key=lambda r: r["offset"])
        assert counts["records"] == len(rows) == len(expected)
        for row, line in zip(rows, expected):
            assert row["offset"] == line["offset"] and row["timestamp"] == line["timestamp"]
            if "control" in line:
                assert row["control"] == line["control"]["type"]
            else:
                assert json.loads(row["key_json"]) == line["key"]
                assert (json.loads(row["value_json"]) if row["value_json"] else None) == line["value"]
                assert row["tombstone"] == (line["value"] is None)
        if split_bytes == 1:
            assert counts["splits"] == len(_batch_starts(segment))


def test_splits_cut_only_at_batch_boundaries(tmp_path) -> None:
    segment = OFFSETS / "00000000000000000000.log"
    starts = set(_batch_starts(segment))
    walked = plan_segment(list_inputs([str(segment)], (".log",))[0], 500)
    assert len(walked) > 3 and all(s.start in starts for s in walked)
    # The same cuts from an offset index, with a preallocated zero tail that must be ignored.
    copy = tmp_path / "00000000000000000000.log"
    shutil.copy(segment, copy)
    entries = b"".join(struct.pack(">ii", i, p) for i, p in enumerate(sorted(starts)) if p) + bytes(80)
    copy.with_suffix(".index").write_bytes(entries)
    assert index_positions(entries, copy.stat().st_size) == sorted(starts)[1:]
    indexed = plan_segment(list_inputs([str(copy)], (".log",))[0], 500)
    assert [s.start for s in indexed] == [s.start for s in walked]


def test_damaged_segments_report_problems_and_keep_valid_records(spark, tmp_path, capsys) -> None:
    manifest = {k: v for k, v in json.loads((OFFSETS / "manifest.json").read_text()).items() if k.endswith(".log")}
    out = tmp_path / "out"
    run_offsets([str(OFFSETS)], str(out), spark=spark, split_bytes=600)
    problems = _rows(out, "problems")
    for name, expected in manifest.items():
        found = sorted((p["kind"], p["position"], p["length"]) for p in problems
                       if p["source"].endswith(name) and p["kind"] != "record")
        assert found == sorted((p["kind"], p["position"], p["length"]) for p in expected["problems"]), name
    records = _rows(out, "records")
    # The damaged files are copies of 00000000000000000000.log: what they share with it is kept once
    # (tests/test_pipeline_copies.py), the rest of each is in the table.
    copies = {Path(d["source"]).name: d["rows"] for d in _rows(out, "duplicates")}
    every = set()
    for name, expected in manifest.items():
        single = _cli_records([OFFSETS / name], capsys)
        every |= {line["offset"] for line in single}
        kept = [r["offset"] for r in records if r["segment"].endswith(name)]
        assert len(kept) + copies.get(name, 0) == len(single), name
        assert set(kept) <= {line["offset"] for line in single}, name
        undecodable = {p["offset"] for p in problems if p["source"].endswith(name) and p["kind"] == "record"}
        assert undecodable == set(expected.get("undecodableRecords", [])), name
    assert sorted(r["offset"] for r in records) == sorted(every)


def test_derived_tables(spark, tmp_path) -> None:
    out = tmp_path / "out"
    segment = OFFSETS / "00000000000000000000.log"
    run_offsets([str(segment)], str(out), spark=spark, split_bytes=700)
    records = _rows(out, "records")
    commits = _rows(out, "offsets_committed")
    assert len(commits) == sum(1 for r in records if r["record_type"] in (0, 1))
    members = _rows(out, "group_members")
    classic = [m for m in members if m["protocol"] == "classic" and m["process_id"]]
    assert classic and all(m["assigned_active"] is not None for m in classic)
    rebalances = {(r["group"], r["protocol"]): r for r in _rows(out, "rebalances")}
    streams = [r for (g, p), r in rebalances.items() if p == "streams"]
    assert streams and all(r["end_timestamp"] >= r["start_timestamp"] for r in streams if r["end_timestamp"])


def test_cli_under_spark_submit_and_report(tmp_path) -> None:
    env = {**os.environ, "SPARK_HOME": str(Path(__import__("pyspark").__file__).parent),
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    submit = Path(sys.executable).parent / "spark-submit"
    script = ROOT / "kprotocol" / "pipeline" / "__main__.py"
    out = tmp_path / "out"
    done = subprocess.run([str(submit), "--master", "local[2]", "--conf", "spark.driver.host=127.0.0.1",
                           str(script), "offsets", str(OFFSETS), "--out", str(out), "--split-mb", "0.001",
                           "--no-progress"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]  # OFFSETS holds damaged segments: exit 1 and one line
    # spark-submit runs the Python driver with its stderr merged into its stdout
    assert "problem(s) in the input (what does not decode): see the problems table in" in done.stdout
    summary = json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))
    assert summary["records"] == len(_rows(out, "records")) and summary["splits"] > 4
    report = tmp_path / "report.html"
    assert cli_main(["report", str(out), "--out", str(report)]) == 0
    text = report.read_text()
    assert "wordcount-app" in text and "<svg class='chart'" in text
    png = tmp_path / "fraud.png"
    assert cli_main(["report", str(out), "--out", str(png), "--group", "fraud-detector"]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")


def test_plan_lists_kafka_data_directories(tmp_path) -> None:
    partition = tmp_path / "data" / "__consumer_offsets-7"
    partition.mkdir(parents=True)
    shutil.copy(OFFSETS / "00000000000000000000.log", partition / "00000000000000000000.log")
    splits = plan_offsets([str(tmp_path / "data")])
    assert [(s.topic, s.partition) for s in splits] == [("__consumer_offsets", 7)]


def test_a_real_brokers_data_directory(spark, tmp_path, capsys) -> None:
    """Segments a real Kafka 4.4 broker wrote (fixtures/kafka): every table from the Kafka data
    directory, split between batches, equals the single-process decoder; both modern groups'
    rebalances are found and complete."""
    data = ROOT / "fixtures" / "kafka" / "data"
    out = tmp_path / "out"
    counts = run_offsets([str(data)], str(out), spark=spark, split_bytes=300)
    assert counts["splits"] > len(list(data.glob("*/*.log")))
    rows = _rows(out, "records")
    for partition in sorted(data.glob("__consumer_offsets-*")):
        expected = _cli_records([partition], capsys)
        got = sorted((r for r in rows if r["topic"] == "__consumer_offsets" and r["partition"] ==
                      int(partition.name.rsplit("-", 1)[1])), key=lambda r: r["offset"])
        assert [r["offset"] for r in got] == [line["offset"] for line in expected]
        for row, line in zip(got, expected):
            if "key" in line:
                assert json.loads(row["key_json"]) == line["key"]
                assert (json.loads(row["value_json"]) if row["value_json"] else None) == line["value"]
    transactions = [r for r in rows if r["topic"] == "__transaction_state"]
    assert transactions and all(r["record_type_name"] == "TransactionLog" for r in transactions)
    assert _rows(out, "problems") == []
    rebalances = {(r["group"], r["protocol"]) for r in _rows(out, "rebalances") if r["end_timestamp"]}
    assert {("streams-g", "streams"), ("consumer-g", "consumer"), ("classic-g", "classic")} <= rebalances
    members = _rows(out, "group_members")
    streams = [m for m in members if m["group"] == "streams-g" and m["assigned_active"]]
    assert sorted({t for m in streams for t in m["assigned_active"]}) == ["0_0", "0_1"]


CAPTURES = ROOT / "fixtures" / "captures"


def _request_without_records(doc: dict) -> str:
    """The exchange's request JSON with records fields null, as the exchanges table keeps it."""
    request = json.loads(json.dumps(doc["request"]))
    for field in doc.get("recordBatches", []):
        if field["path"].startswith("/request/"):
            *parents, leaf = field["path"].split("/")[2:]
            node = request
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            node[leaf] = None
    return json.dumps(request, sort_keys=True)


def test_captures_split_without_losing_connections(spark, tmp_path) -> None:
    from kprotocol.capture import decode_capture
    from kprotocol.pipeline import run_captures

    docs = [e.to_json() for e in decode_capture(CAPTURES / "clients.pcapng", ports=(60127,))]
    expected = sorted((d["conn"], d["correlationId"], d["apiName"], _request_without_records(d),
                       json.dumps(d.get("recordBatches"), sort_keys=True)) for d in docs)
    assert any(d.get("recordBatches") for d in docs)
    # Through the shuffle: many splits cutting through every connection, and one split; and read whole
    # by each of two tasks (one per core), each decoding its share of the connections.
    for split_bytes, owners_max, tasks in ((4096, 0, None), (1 << 30, 0, 1), (4096, 8, 2)):
        out = tmp_path / f"{split_bytes}-{owners_max}"
        counts = run_captures([str(CAPTURES / "clients.pcapng")], str(out), spark=spark, split_bytes=split_bytes,
                              ports=(60127,), owners_max=owners_max)
        rows = _rows(out, "exchanges")
        got = sorted((r["conn"], r["correlation_id"], r["api_name"],
                      json.dumps(json.loads(r["request_json"]), sort_keys=True),
                      json.dumps(json.loads(r["record_batches_json"]) if r["record_batches_json"] else None,
                                 sort_keys=True)) for r in rows)
        assert got == expected and counts["exchanges"] == len(expected) == 199
        assert counts["splits"] > 10 if tasks is None else counts["splits"] == tasks
        assert counts["connections"] == 42 and _rows(out, "problems") == []
    streams = [r for r in rows if r["api_name"] == "StreamsGroupHeartbeat"]
    assert streams and all(r["group"] and r["member_id"] for r in streams)
    assert all(r["latency_ms"] >= 0 for r in rows if r["response_time"] is not None)


def test_captures_report_damage_and_keep_the_rest(spark, tmp_path) -> None:
    from kprotocol.pipeline import run_captures

    raw = bytearray((CAPTURES / "clients.pcapng").read_bytes())
    middle = raw.index(b"\x06\x00\x00\x00", len(raw) // 2)
    raw[middle + 4:middle + 8] = b"\xff\xff\xff\xff"  # a block length of 2^32-1
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "damaged.pcapng").write_bytes(bytes(raw))
    (tmp_path / "in" / "junk.pcap").write_bytes(b"not a capture at all")
    found = []
    for owners_max in (0, 8):  # through the shuffle, and read whole by each task
        out = tmp_path / f"out-{owners_max}"
        counts = run_captures([str(tmp_path / "in")], str(out), spark=spark, split_bytes=8192, ports=(60127,),
                              owners_max=owners_max)
        problems = _rows(out, "problems")
        assert any("block length" in p["message"] for p in problems)
        assert any("not a pcap" in p["message"] and p["source"].endswith("junk.pcap") for p in problems)
        assert counts["exchanges"] >= 190
        found.append((counts, sorted(json.dumps(p, sort_keys=True) for p in problems),
                      sorted(json.dumps(r, sort_keys=True) for r in _rows(out, "exchanges"))))
    assert found[0][1:] == found[1][1:]
    rows = ("exchanges", "problems", "connections")  # the two ways differ in splits and tasks, not in rows
    assert {k: found[0][0][k] for k in rows} == {k: found[1][0][k] for k in rows}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(), st.text().map(str.encode)), max_size=40))
def test_string_columns_take_utf8_bytes_as_they_are(values: list) -> None:
    """`to_arrow` builds a string column from UTF-8 bytes (orjson's output) and str alike: the column
    reads back as the same strings, nulls in place, through Parquet too."""
    import io

    import pyarrow as pa

    from kprotocol.pipeline.tables import WRITE_OPTIONS, to_arrow

    schema = pa.schema([("text", pa.string()), ("n", pa.int64())])
    rows = [{"text": v, "n": i} for i, v in enumerate(values)]
    table = to_arrow(rows, schema)
    table.validate(full=True)
    expected = [v.decode() if isinstance(v, bytes) else v for v in values]
    assert table.column("text").to_pylist() == expected
    sink = io.BytesIO()
    pq.write_table(table, sink, **WRITE_OPTIONS)
    read = pq.read_table(io.BytesIO(sink.getvalue())).to_pylist()
    assert read == [{"text": t, "n": i} for i, t in enumerate(expected)]


def test_json_columns_escape_a_lone_surrogate() -> None:
    """A Java string may carry a lone surrogate, which UTF-8 cannot hold: the column gets it escaped, and
    reads back as the same string."""
    import pyarrow as pa

    from kprotocol.pipeline.tables import json_bytes, to_arrow

    value = {"memberId": "m-\ud800", "n": [1, None]}
    data = json_bytes(value)
    assert json.loads(data) == value and data.decode("ascii")
    assert json_bytes({"a": "é"}) == '{"a":"é"}'.encode()
    assert json_bytes(None) is None
    table = to_arrow([{"text": data}], pa.schema([("text", pa.string())]))
    assert json.loads(table.column("text")[0].as_py()) == value

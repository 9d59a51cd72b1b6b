"""`kprotocol report` flags what is wrong: a task active on two members, empty cells with their reason,
partial tables (a loud banner and exit 1), captures that gave nothing (with the ports to try), problem
positions in the file, not in the split the pipeline cut."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kprotocol.cli import main as cli_main
from kprotocol.pipeline.capture_rows import owned_rows
from kprotocol.pipeline.jobs import _derive_partition, plan_offsets, write_split
from kprotocol.pipeline.manifest import mark, rows_written
from kprotocol.pipeline.report import write_report
from kprotocol.pipeline.tables import GROUP_RECORDS, PartWriter, write_part
from kprotocol.records.segment import SegmentProblem, read_segment

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "kafka" / "data"
CAPTURES = ROOT / "fixtures" / "captures"
OFFSETS = ROOT / "fixtures" / "offsets"


def _member(member: str, **values) -> dict:
    row = {"group": "app", "protocol": "streams", "member_id": member, "left": False, "record_offset": 0,
           "record_timestamp": 1_000, "source_partition": 0}
    row.update(values)
    return row


def test_a_task_active_on_two_members_is_an_error(tmp_path: Path) -> None:
    members = [_member("A", client_id="app-client-a", process_id="11111111-aaaa", record_offset=1),
               _member("B", client_id="app-client-b", process_id="22222222-bbbb", record_offset=2),
               _member("A", generation=3, assigned_active=["0_0", "0_1"], assigned_standby=[], assigned_warmup=[],
                       record_offset=3, record_timestamp=2_000),
               _member("B", generation=3, assigned_active=["0_0", "0_2"], assigned_standby=[], assigned_warmup=[],
                       record_offset=4, record_timestamp=2_000)]
    write_part(str(tmp_path), "group_members", 0, members)
    write_part(str(tmp_path), "rebalances", 0, [{
        "group": "app", "protocol": "streams", "epoch": 3, "start_timestamp": 1_500, "end_timestamp": 2_000,
        "duration_ms": 500, "trigger": "1 joined", "members_before": ["A"], "members_after": ["A", "B"],
        "tasks_moved": 1, "warmup_tasks": 0, "probing": False}])
    target = tmp_path / "report.html"
    write_report(str(tmp_path), target)
    page = target.read_text()
    assert "Task 0_0 is active on 2 members (app-client-a · 11111111, app-client-b · 22222222)" in page
    assert page.count("<tr class='error'>") == 2 and page.count("<mark class='error'") == 2
    assert "1 task(s) active on two members" in page  # the overview's flag
    assert "0_1" in page and "<mark class='error' title='also active on B'>0_0</mark>" in page


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("tables")
    splits = plan_offsets([str(DATA)])
    for number, split in enumerate(splits):
        write_split(str(out), number, split)
    write_part(str(out), "rebalances", 0, _derive_partition(str(out), list(range(len(splits)))))
    shutil.rmtree(out / GROUP_RECORDS)
    writer = PartWriter(str(out), "exchanges", 0, prefix="capture")
    owned_rows(str(CAPTURES / "clients.pcapng"), (0, 1), frozenset({60127}), writer.add)
    writer.close()
    target = out / "report.html"
    write_report(str(out), target)
    return target.read_text()


def test_no_cell_is_empty_without_a_reason(page: str) -> None:
    assert "<td></td>" not in page and "<td class='name'></td>" not in page
    cells = re.findall(r"<span class='na' title='([^']+)'>([^<]+)</span>", page)
    reasons = {shown: why for why, shown in cells}
    assert "classic group&#x27;s completed generation only" in reasons["not logged"]
    assert "No member is in the group at the end of the data: its last rebalance" in page


def _interrupted(out: Path) -> None:
    """What an offsets job leaves when it is killed after its first split: one part, its working table,
    and its mark saying it was running."""
    mark(str(out), "offsets", "running", inputs=[str(DATA)])
    write_split(str(out), 0, plan_offsets([str(DATA)])[0])


def test_partial_tables_are_a_loud_warning_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tables"
    _interrupted(out)
    target = tmp_path / "report.html"
    assert cli_main(["report", str(out), "--out", str(target)]) == 1
    assert "WARNING: partial tables" in capsys.readouterr().err
    assert "<p class='banner'>WARNING: partial tables." in target.read_text()
    # Without the job's mark, its working table still tells.
    (out / "_jobs" / "offsets.json").unlink()
    assert cli_main(["report", str(out), "--out", str(target)]) == 1
    assert "working table" in capsys.readouterr().err


def test_tables_that_lost_a_part_are_partial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tables"
    splits = plan_offsets([str(DATA)])
    for number, split in enumerate(splits):
        write_split(str(out), number, split)
    write_part(str(out), "rebalances", 0, _derive_partition(str(out), list(range(len(splits)))))
    shutil.rmtree(out / GROUP_RECORDS)
    tables = ("records", "group_members", "rebalances")
    mark(str(out), "offsets", "complete", tables={t: rows_written(str(out), t, "part") for t in tables})
    target = tmp_path / "report.html"
    assert cli_main(["report", str(out), "--out", str(target)]) == 0
    assert "<p class='banner'>" not in target.read_text()
    capsys.readouterr()
    (out / "group_members" / "part-00000.parquet").unlink()
    assert cli_main(["report", str(out), "--out", str(target)]) == 1
    assert re.search(r"the group_members table holds \d+ of the \d+ rows", capsys.readouterr().err)


def test_problem_positions_are_the_files_not_the_splits(tmp_path: Path) -> None:
    segment = OFFSETS / "damaged-truncated.log"
    whole = [e for e in read_segment(segment) if isinstance(e, SegmentProblem)]
    splits = plan_offsets([str(segment)], split_bytes=500)
    assert len(splits) > 3 and splits[-1].start > 0
    for number, split in enumerate(splits):
        write_split(str(tmp_path), number, split)
    problems = pq.read_table(tmp_path / "problems").to_pylist()
    assert [(p["position"], p["message"]) for p in problems if p["kind"] != "record"] == \
        [(p.position, p.message) for p in whole]
    target = tmp_path / "report.html"
    write_report(str(tmp_path), target)
    text = target.read_text()
    assert "Problems in the input" in text and html_cell(whole[0].message) in text


def html_cell(text: str) -> str:
    import html

    return html.escape(text)


@pytest.mark.xdist_group("spark")
def test_a_capture_that_gave_nothing_gets_the_ports_to_try(tmp_path: Path) -> None:
    from kprotocol.pipeline import run_captures, spark_session

    spark = spark_session("local[2]", progress=False)
    try:
        run_captures([str(CAPTURES / "sasl.pcap"), str(CAPTURES / "data.pcap")], str(tmp_path), spark=spark,
                     ports=(36897,))
    finally:
        spark.stop()
    state = json.loads((tmp_path / "_jobs" / "captures.json").read_text())
    by_file = {Path(c["source"]).name: c for c in state["captures"]}
    assert by_file["data.pcap"]["exchanges"] > 0 and by_file["data.pcap"]["hint"] is None
    assert by_file["sasl.pcap"]["hint"] == ("no Kafka connection on port 36897; Kafka requests go to port 46333: "
                                            "try --ports 46333")
    target = tmp_path / "report.html"
    write_report(str(tmp_path), target)
    assert "sasl.pcap</code>: no Kafka connection on port 36897; Kafka requests go to port 46333" in target.read_text()

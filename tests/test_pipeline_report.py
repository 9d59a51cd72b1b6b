"""`kprotocol report` tells the truth: rebalances derived from a group's records (members that left,
a group that became empty, moved tasks), the captures' membership requests with error names, charts
with legends; the HTML checked in a real headless browser (Debian's chromium)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kprotocol.errors import error_text
from kprotocol.pipeline.capture_rows import owned_rows
from kprotocol.pipeline.jobs import _derive_partition, plan_offsets, write_split
from kprotocol.pipeline.rebalances import derive
from kprotocol.pipeline.report import write_report
from kprotocol.pipeline.tables import PartWriter, write_part

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "kafka" / "data"
CAPTURE = ROOT / "fixtures" / "captures" / "clients.pcapng"


def _tables(out: Path) -> None:
    """The pipeline's tables for the real broker's data directory and a capture, written by the code the
    Spark tasks run (no Spark session: the jobs' equality with these paths is tested elsewhere)."""
    splits = plan_offsets([str(DATA)])
    for number, split in enumerate(splits):
        write_split(str(out), number, split)
    write_part(str(out), "rebalances", 0, _derive_partition(str(out), list(range(len(splits)))))
    shutil.rmtree(out / "_group_records")  # as the job does when it ends (else the tables read as partial)
    writer = PartWriter(str(out), "exchanges", 0, prefix="capture")
    problems, _ = owned_rows(str(CAPTURE), (0, 1), frozenset({60127}), writer.add)
    writer.close()
    write_part(str(out), "problems", 0, problems, prefix="capture")


def _section(page: str, group: str, title: str) -> str:
    """The HTML of one heading's section of one group."""
    body = re.split(rf"<h2[^>]*>{re.escape(group)}</h2>", page, maxsplit=1)[1].split("<h2", 1)[0]
    return body.split(f"<h3>{title}</h3>", 1)[1].split("<h3>", 1)[0]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("tables")
    _tables(out)
    target = out / "report.html"
    write_report(str(out), target)
    return out, target.read_text()


def test_members_that_left_and_groups_that_became_empty(report: tuple[Path, str]) -> None:
    _, page = report
    # Every member of these groups left at the end of the broker's run (their records were deleted):
    # no latest assignment, and the group's last step is a rebalance to no member.
    for group in ("classic-g", "consumer-g", "streams-g"):
        assert "<td>" not in _section(page, group, "Latest assignment"), group
        last = re.findall(r"<tr>(.*?)</tr>", _section(page, group, "Rebalances"))[-1]
        cells = re.findall(r"<td>(.*?)</td>", last)
        assert cells[5] == "1 left" and cells[6] == "0" and cells[3], (group, cells)


def _record(type_id: int, offset: int, key: dict, value: dict | None) -> dict:
    return {"record_type": type_id, "offset": offset, "timestamp": 1000 * offset, "partition": 0,
            "key_json": json.dumps({"type": type_id, "data": key}),
            "value_json": None if value is None else json.dumps({"version": 0, "data": value})}


def test_moved_tasks_are_counted_and_the_empty_group_closes() -> None:
    """A streams group as Kafka's coordinator writes it: B joins (one task moves from A to B), A leaves
    (its task moves to B), B leaves (the group is empty: its last rebalance ends at once)."""
    g = {"groupId": "app"}
    tasks = lambda *ps: [{"subtopologyId": "0", "partitions": list(ps)}]  # noqa: E731
    assignment = lambda *ps: {"activeTasks": tasks(*ps), "standbyTasks": [], "warmupTasks": []}  # noqa: E731
    member = {"clientId": "c", "clientHost": "/127.0.0.1", "processId": "p"}
    log = [(19, {**g, "memberId": "A"}, member), (17, g, {"epoch": 1}),
           (21, {**g, "memberId": "A"}, assignment(0, 1)), (22, {**g, "memberId": "A"}, {"memberEpoch": 1}),
           (19, {**g, "memberId": "B"}, member), (17, g, {"epoch": 2}),
           (21, {**g, "memberId": "A"}, assignment(0)), (21, {**g, "memberId": "B"}, assignment(1)),
           (22, {**g, "memberId": "A"}, {"memberEpoch": 2}), (22, {**g, "memberId": "B"}, {"memberEpoch": 2}),
           (22, {**g, "memberId": "A"}, None), (21, {**g, "memberId": "A"}, None), (19, {**g, "memberId": "A"}, None),
           (17, g, {"epoch": 3}), (21, {**g, "memberId": "B"}, assignment(0, 1)),
           (22, {**g, "memberId": "B"}, {"memberEpoch": 3}),
           (22, {**g, "memberId": "B"}, None), (21, {**g, "memberId": "B"}, None), (19, {**g, "memberId": "B"}, None),
           (17, g, {"epoch": 4})]
    rows = derive("app", [_record(t, n, k, v) for n, (t, k, v) in enumerate(log)])
    got = [(r["epoch"], r["trigger"], r["members_before"], r["members_after"], r["tasks_moved"], r["end_timestamp"])
           for r in rows]
    assert got == [(1, "1 joined", [], ["A"], 0, 3000), (2, "1 joined", ["A"], ["A", "B"], 1, 9000),
                   (3, "1 left", ["A", "B"], ["B"], 1, 15000), (4, "1 left", ["B"], [], 0, 19000)]


def test_captured_membership_requests_with_error_names(report: tuple[Path, str]) -> None:
    out, page = report
    import pyarrow.parquet as pq

    exchanges = pq.read_table(out / "exchanges").to_pylist()
    failed = [e for e in exchanges if e["group"] and e["error_codes"] and e["api_name"] in ("JoinGroup", "SyncGroup",
                                                                                            "Heartbeat")]
    assert failed, "the capture has membership requests answered with errors"
    for e in failed:
        section = _section(page, e["group"], "Captured membership requests")
        for code in e["error_codes"]:
            assert error_text(code) in section and re.search(r"[A-Z_]{6,} \(\d+\)", section)
    heartbeats = {e["group"] for e in exchanges if e["api_name"] == "StreamsGroupHeartbeat" and e["group"]}
    for group in heartbeats:
        assert "<td>StreamsGroupHeartbeat</td>" in _section(page, group, "Captured membership requests")


def test_charts_have_legends() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from kprotocol.pipeline.report import _timeline

    fig, axis = plt.subplots()
    _timeline("g", [], [], axis)
    labels = [t.get_text() for t in axis.get_legend().get_texts()]
    plt.close(fig)
    assert "member in the group" in labels and any("moved" in label for label in labels)


CHECK = """<script>
const errors = [];
window.addEventListener("error", e => errors.push(String(e.message || e.target && e.target.src || e)), true);
window.addEventListener("load", () => {
  const images = [...document.querySelectorAll("svg.chart")].map(c => {
    const box = c.getBoundingClientRect();
    return [c.querySelectorAll("text").length > 0, box.width, box.height];
  });
  document.body.setAttribute("data-check", JSON.stringify({errors, images}));
});
</script>"""


def test_the_html_renders_in_a_headless_browser(report: tuple[Path, str], tmp_path: Path) -> None:
    assert shutil.which("chromium"), "Debian's chromium is needed (apt-get install chromium; make prereqs says so)"
    _, page = report
    assert "<script" not in page  # the report is static: the check below is added to a copy only
    copy = tmp_path / "checked.html"
    copy.write_text(CHECK + page, encoding="utf-8")
    done = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                           "--window-size=1280,1000", "--dump-dom", copy.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'data-check="([^"]*)"', done.stdout)
    assert found, done.stdout[-2000:]
    check = json.loads(found[1].replace("&quot;", '"'))
    assert check["errors"] == []
    assert "class='banner'" not in page
    assert len(check["images"]) == page.count("<svg class='chart'") >= 6
    assert all(complete and width > 300 and height > 100 for complete, width, height in check["images"])


def _metadata_segment(topics: dict[str, bytes]) -> bytes:
    """A KRaft metadata log segment holding a TopicRecord per topic (frame version 1, record type 2,
    version 0, compact name, id, no tagged fields), beside a record of another type."""
    import base64

    from kprotocol.records import Record, write_batch

    values = [bytes([1, 12, 0]) + bytes(20)]  # another metadata record type: skipped
    for name, raw in topics.items():
        values.append(bytes([1, 2, 0, len(name) + 1]) + name.encode() + raw + b"\x00")
    assert all(base64.urlsafe_b64encode(raw).rstrip(b"=") for raw in topics.values())
    return write_batch([Record(offset=n, timestamp=1000 + n, key=None, value=v) for n, v in enumerate(values)],
                       base_offset=0)


def test_consumer_protocol_topics_are_named_from_the_metadata_log(report: tuple[Path, str], tmp_path: Path) -> None:
    import base64

    import pyarrow.parquet as pq

    from kprotocol.pipeline.jobs import write_topic_names
    from kprotocol.pipeline.report import _latest_assignments

    out, page = report
    topic_id = "Np06tuafSWSFtIwzfshBoQ"  # consumer-g's topic in the broker's data directory: `data`
    # Without a metadata log the ids stay, with a note saying why.
    assert f"{topic_id} stay ids here" in _section(page, "consumer-g", "Latest assignment")
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    (data / "__cluster_metadata-0").mkdir()
    raw = base64.urlsafe_b64decode(topic_id + "==")
    (data / "__cluster_metadata-0" / "00000000000000000000.log").write_bytes(_metadata_segment({"data": raw}))
    # A topic known only from a snapshot (its TopicRecord's segment since deleted), behind a zero tail.
    (data / "__cluster_metadata-0" / "00000000000000000001-0000000001.checkpoint").write_bytes(
        _metadata_segment({"other": bytes(range(16))}) + bytes(64))
    tables = tmp_path / "tables"
    shutil.copytree(out, tables)
    assert write_topic_names([str(data)], str(tables)) == 2
    assert pq.read_table(tables / "topic_names").to_pylist() == [
        {"topic_id": "AAECAwQFBgcICQoLDA0ODw", "topic": "other"}, {"topic_id": topic_id, "topic": "data"}]
    target = tmp_path / "report.html"
    write_report(str(tables), target)
    assert "stay ids here" not in target.read_text()
    # The member's assignment while it was in the group, with the topic named.
    members = [m for m in pq.read_table(tables / "group_members").to_pylist()
               if m["group"] == "consumer-g" and not m["left"]]
    rows = _latest_assignments(members, [], {topic_id: "data"})
    assert [row[4] for row in rows] == ["data-0 data-1"]


def test_exchanges_name_their_error_codes(report: tuple[Path, str]) -> None:
    import pyarrow.parquet as pq

    from kprotocol.errors import error_name

    out, _ = report
    rows = pq.read_table(out / "exchanges").to_pylist()
    assert any(r["error_codes"] for r in rows)
    assert all(r["error_names"] == [error_name(c) for c in r["error_codes"]] for r in rows)
    assert {n for r in rows for n in r["error_names"]} >= {"MEMBER_ID_REQUIRED"}


def test_streams_assignor_errors_are_named() -> None:
    from kprotocol.pipeline.report import _latest_assignments

    member = {"member_id": "m", "left": False, "record_timestamp": 1, "record_offset": 1, "assigned_active": ["0_0"],
              "assigned_partitions": None, "process_id": "p", "client_id": "c", "generation": 3,
              "assigned_standby": [], "assigned_warmup": [], "protocol": "classic"}
    assert _latest_assignments([{**member, "error_code": 4}], [])[0][-1] == "SHUTDOWN_REQUESTED (4)"
    assert _latest_assignments([{**member, "error_code": 0}], [])[0][-1] == ""


def test_classic_moved_tasks_against_the_previous_generation_or_what_members_owned() -> None:
    from kprotocol.pipeline.rebalances import _classic_row

    def member(mid: str, process: str, owned: list[str], assigned: list[str], generation: int) -> dict:
        return {"member_id": mid, "process_id": process, "owned_active": owned, "owned_standby": [],
                "assigned_active": assigned, "assigned_standby": [], "generation": generation,
                "next_rebalance_ms": None}

    # The first generation in the log: p2 joined and got 0_1, which p1 said it owned.
    first = [member("a", "p1", ["0_0", "0_1"], ["0_0"], 7), member("b", "p2", [], ["0_1"], 7)]
    assert _classic_row("g", [], first, 1)["tasks_moved"] == 1
    # The next one: p1 left, its 0_0 went to p2.
    second = [member("b", "p2", ["0_1"], ["0_0", "0_1"], 8)]
    row = _classic_row("g", first, second, 2)
    assert (row["tasks_moved"], row["trigger"]) == (1, "1 left")


def test_a_classic_member_leaves_the_timeline_with_the_generation_that_dropped_it() -> None:
    from kprotocol.pipeline.report import _gone

    rebalances = [{"end_timestamp": 5, "members_before": [], "members_after": ["m"]},
                  {"end_timestamp": 9, "members_before": ["m"], "members_after": ["n"]},
                  {"end_timestamp": 12, "members_before": ["n", "m"], "members_after": []}]
    assert _gone("m", 5, rebalances) == 9 and _gone("m", 10, rebalances) == 12 and _gone("n", 0, rebalances) == 12
    assert _gone("x", 0, rebalances) is None


LAYOUT = """<script>
const errors = [];
window.addEventListener("error", e => errors.push(String(e.message || e)), true);
function visible(el) {  // the element's box, cut by the ancestors that clip it (an ellipsis cell)
  let r = el.getBoundingClientRect();
  let box = {left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  for (let p = el.parentElement; p; p = p.parentElement) {
    const style = getComputedStyle(p);
    if (style.overflowX !== "visible" || style.overflowY !== "visible") {
      const c = p.getBoundingClientRect();
      box = {left: Math.max(box.left, c.left), right: Math.min(box.right, c.right),
             top: Math.max(box.top, c.top), bottom: Math.min(box.bottom, c.bottom)};
    }
  }
  return box;
}
function name(el) { return el.tagName + " " + JSON.stringify((el.textContent || "").trim().slice(0, 50)); }
window.addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const outside = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    const v = visible(el);
    if (v.right > width + 0.5 || v.left < -0.5) {
      outside.push(name(el) + " " + v.left.toFixed(0) + ".." + v.right.toFixed(0));
    }
  }
  const texts = [...document.body.querySelectorAll("*")].filter(el =>
    el.tagName.toLowerCase() === "text" || [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()));
  const boxes = texts.map(el => [el, visible(el)]).filter(([, b]) => b.right - b.left > 0 && b.bottom - b.top > 0);
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const [a, p] = boxes[i], [b, q] = boxes[j];
      if (a.contains(b) || b.contains(a)) continue;
      const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (w > 2 && h > 2) overlaps.push(name(a) + " / " + name(b));
    }
  }
  document.body.setAttribute("data-layout", JSON.stringify({errors, width, outside, overlaps, texts: boxes.length,
    scroll: document.documentElement.scrollWidth}));
});
</script>"""


def _layout(page: Path, width: int, shot: Path) -> dict:
    """The page in headless chromium `width` pixels wide: what lies outside the viewport, which text boxes
    overlap; a screenshot of it."""
    copy = page.with_name(f"layout-{width}-{page.name}")
    copy.write_text(LAYOUT + page.read_text(), encoding="utf-8")
    flags = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--virtual-time-budget=10000", f"--window-size={width},3000"]
    done = subprocess.run([*flags, "--dump-dom", copy.as_uri()], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', done.stdout)
    assert found, done.stdout[-2000:]
    shot.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=180, check=True)
    return json.loads(html.unescape(found[1]))


def test_the_report_fits_1280_and_1920_pixels_without_overlapping_text(report: tuple[Path, str],
                                                                       tmp_path: Path) -> None:
    """The demo's groups and a fleet of Streams groups with 90-character client ids and hundreds of
    rebalances: nothing outside the viewport, no text box over another, at both widths; the screenshots
    go to build/report-layout/."""
    from kprotocol.pipeline.synthetic import write_fleet

    out, _ = report
    fleet = tmp_path / "fleet"
    write_fleet(str(fleet), groups=2, rebalances=300, members=12, tasks=24, name_length=90)
    write_report(str(fleet), fleet / "report.html")
    for name, page in (("demo", out / "report.html"), ("fleet", fleet / "report.html")):
        for width in (1280, 1920):
            shot = ROOT / "build" / "report-layout" / f"{name}-{width}.png"
            layout = _layout(page, width, shot)
            assert layout["width"] == width and layout["texts"] > 50, layout
            assert layout["errors"] == [] and layout["scroll"] <= width, (name, width, layout["scroll"])
            assert layout["outside"] == [], (name, width, layout["outside"][:10])
            assert layout["overlaps"] == [], (name, width, layout["overlaps"][:10])
            assert shot.stat().st_size > 10_000

"""`kprotocol report`: rebalance timelines and assignment tables from the pipeline's Parquet tables.

At the top, what makes the tables less than the truth: a banner when a job did not finish (partial
tables; the command exits 1), captures that gave no exchange with the ports to try, the copies found
in the input (kept once), the problems per file at file positions; then one row per group (rebalances,
duration percentiles, tasks moved, members now, flags). Per group: its numbers and flags (a task active
on two members, an assignor error, a rebalance never completed), rebalances per time bin and durations
per logarithmic bin, the timeline of its latest rebalances (members by client id and process as rows,
time across: a bar while in the group, a dot per assignment, red when active tasks moved to it, each
rebalance a span or a line at its end, details in tooltips), its latest, longest and most disruptive
rebalances, the latest assignment and the committed offsets; with captures decoded into the same
directory, its membership requests' latency (a logarithmic axis) and errors by name. Every empty cell
says why. Charts are inline SVG scaled to the page; past INLINE_GROUPS groups each group is a page of
its own. Everything is computed in Arrow over the tables (a year of a fleet's records: a few rows per
member and per rebalance window reach Python). A `.png` output holds one group's timeline (matplotlib).
"""

from __future__ import annotations

import hashlib
import html
import io
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kprotocol.errors import error_text
from kprotocol.pipeline.files import filesystem
from kprotocol.pipeline.charts import duration_text
from kprotocol.pipeline.tables import SCHEMAS, table_dir

Row = dict[str, Any]
# The exchanges that tell how a group's members join, sync and keep their membership.
GROUP_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "ConsumerGroupHeartbeat", "StreamsGroupHeartbeat",
              "ShareGroupHeartbeat")
# Kafka Streams' AssignmentInfo errCode (the assignor's verdict, not a Kafka protocol error code).
ASSIGNOR_ERRORS = {1: "INCOMPLETE_SOURCE_TOPIC_METADATA", 2: "VERSION_PROBING", 3: "ASSIGNMENT_ERROR",
                   4: "SHUTDOWN_REQUESTED"}
BAR, ASSIGNED, MOVED, SPAN, EDGE = "#9db4d0", "#2c3e50", "#c0392b", "#f5b041", "#d35400"


def _read(out: str, table: str) -> list[Row]:
    fsys, path = filesystem(table_dir(out, table))
    if fsys.get_file_info(path).type == 0:
        return []
    return pq.read_table(path, filesystem=fsys).to_pylist()


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _timeline(group: str, members: list[Row], rebalances: list[Row], axis: Any) -> None:
    from matplotlib.dates import ConciseDateFormatter

    rows: dict[str, list[Row]] = defaultdict(list)
    for m in members:
        if m["member_id"]:
            rows[m["member_id"]].append(m)
    names = sorted(rows, key=lambda n: min(r["record_timestamp"] for r in rows[n]))
    last = max([m["record_timestamp"] for m in members]
               + [r["end_timestamp"] for r in rebalances if r["end_timestamp"]], default=0)
    owner: dict[str, str] = {}
    for y, name in enumerate(names):
        events = sorted(rows[name], key=lambda r: (r["record_timestamp"], r["record_offset"]))
        start = events[0]["record_timestamp"]
        end = next((e["record_timestamp"] for e in events if e["left"]), None) or _gone(name, start, rebalances) or last
        axis.plot([_time(start), _time(end)], [y, y], color=BAR, linewidth=6, solid_capstyle="butt")
        for e in events:
            if e["left"] or e["assigned_active"] is None and e["assigned_partitions"] is None:
                continue
            active = e["assigned_active"] or e["assigned_partitions"] or []
            moved = [t for t in active if owner.get(t, name) != name]
            owner.update(dict.fromkeys(active, name))
            label = f"{len(active)}a/{len(e['assigned_standby'] or [])}s"
            if e["assigned_warmup"]:
                label += f"/{len(e['assigned_warmup'])}w"
            axis.plot([_time(e["record_timestamp"])], [y], "o", color=MOVED if moved else ASSIGNED, markersize=5)
            axis.annotate(label, (_time(e["record_timestamp"]), y), textcoords="offset points", xytext=(3, 5),
                          fontsize=7)
    for r in rebalances:
        end = _time(r["end_timestamp"])
        if r["start_timestamp"] is not None and end is not None:
            axis.axvspan(_time(r["start_timestamp"]), end, color=SPAN, alpha=0.25)
        at = end or _time(r["start_timestamp"])
        if at is not None:
            axis.axvline(at, color=EDGE, linewidth=0.8, linestyle="--")
            note = f"{'gen' if r['protocol'] == 'classic' else 'epoch'} {r['epoch']}"
            if r["warmup_tasks"]:
                note += f", {r['warmup_tasks']} warm-up"
            if r["probing"]:
                note += ", probing"
            axis.annotate(note, (at, len(names) - 0.5), fontsize=7, rotation=90, va="top", color=EDGE)
    stamps = [m["record_timestamp"] for m in members] + [t for r in rebalances
                                                          for t in (r["start_timestamp"], r["end_timestamp"]) if t]
    if stamps:
        pad = max((max(stamps) - min(stamps)) * 0.05, 500)
        axis.set_xlim(_time(min(stamps) - pad), _time(max(stamps) + pad))
    axis.xaxis.set_major_formatter(ConciseDateFormatter(axis.xaxis.get_major_locator()))
    info = {m["member_id"]: m for m in members if m["process_id"] or m["client_id"]}
    axis.set_yticks(range(len(names)), [_member_label(n, info.get(n), room=40)[0] for n in names], fontsize=7)
    axis.set_ylim(-1, max(len(names), 1))
    axis.set_title(f"{group}: members over time", fontsize=9)
    axis.grid(axis="x", alpha=0.3)
    _legend(axis)


def _gone(member: str, since: int, rebalances: list[Row]) -> int | None:
    """When a member left without a record of its own (a classic generation without it): the end of the
    first rebalance after `since` that it was in before and not after."""
    ends = [r["end_timestamp"] for r in rebalances if r["end_timestamp"] and r["end_timestamp"] >= since
            and member in (r["members_before"] or ()) and member not in (r["members_after"] or ())]
    return min(ends, default=None)


def _legend(axis: Any) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=BAR, linewidth=6, label="member in the group"),
               Line2D([], [], color=ASSIGNED, marker="o", linestyle="",
                      label="assignment received (active/standby/warm-up)"),
               Line2D([], [], color=MOVED, marker="o", linestyle="", label="... with active tasks moved in"),
               Patch(color=SPAN, alpha=0.25, label="rebalance (epoch bump to all members at it)"),
               Line2D([], [], color=EDGE, linestyle="--", linewidth=0.8,
                      label="rebalance completed (generation/epoch)")]
    axis.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)


def _figure(group: str, members: list[Row], rebalances: list[Row]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    height = 2.0 + 0.35 * len({m["member_id"] for m in members})
    fig, axis = plt.subplots(figsize=(13, min(height, 30)))
    _timeline(group, members, rebalances, axis)
    return _png(fig)


def _png(fig: Any) -> bytes:
    from matplotlib import pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _seconds(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, tz=timezone.utc)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _exchange_rows(exchanges: list[Row]) -> list[list[Any]]:
    """Per API: requests, latency p50/p99/max, unanswered requests, error responses by name."""
    rows = []
    for api in sorted({e["api_name"] for e in exchanges}):
        of_api = [e for e in exchanges if e["api_name"] == api]
        latencies = [e["latency_ms"] for e in of_api if e["latency_ms"] is not None]
        errors: dict[int, int] = defaultdict(int)
        for e in of_api:
            for code in e["error_codes"] or ():
                errors[code] += 1
        rows.append([api, len(of_api), _percentile(latencies, 0.5), _percentile(latencies, 0.99),
                     _percentile(latencies, 1.0), len(of_api) - len(latencies),
                     ", ".join(f"{error_text(c)} x{n}" for c, n in sorted(errors.items()))])
    return rows


def _error_rows(exchanges: list[Row]) -> list[list[Any]]:
    """Every error response, in time order: when, which API and member, the error's name and code."""
    return [[_seconds(e["request_time"]), e["api_name"], e["member_id"], e["client_id"],
             ", ".join(error_text(c) for c in e["error_codes"])]
            for e in sorted(exchanges, key=lambda e: e["request_time"] or 0) if e["error_codes"]]


def _named(partitions: list[str] | None, protocol: str, names: dict[str, str]) -> str:
    """A consumer-protocol member's partitions (`TOPICID-N`) with topic names where they are known."""
    if protocol != "consumer":
        return " ".join(partitions or [])
    shown = []
    for partition in partitions or []:
        topic, _, number = partition.rpartition("-")
        shown.append(f"{names[topic]}-{number}" if topic in names else partition)
    return " ".join(shown)


def _unnamed_ids(members: list[Row], names: dict[str, str]) -> set[str]:
    return {p.rpartition("-")[0] for m in members if m["protocol"] == "consumer"
            for p in m["assigned_partitions"] or () if p.rpartition("-")[0] not in names}


def _latest_assignments(members: list[Row], rebalances: list[Row],
                        names: dict[str, str] | None = None) -> list[list[Any]]:
    """The latest assignment of every member still in the group: not one whose records were deleted
    (it left), nor one missing from the group's latest rebalance (a classic generation without it,
    or a group that became empty)."""
    latest: dict[str, Row] = {}
    info: dict[str, Row] = {}
    for m in sorted(members, key=lambda r: (r["record_timestamp"], r["record_offset"])):
        if m["left"]:
            latest.pop(m["member_id"], None)
            continue
        if m["assigned_active"] is not None or m["assigned_partitions"] is not None:
            latest[m["member_id"]] = m
        if m["process_id"] or m["client_id"]:
            info[m["member_id"]] = m
    finished = [r for r in rebalances if r["end_timestamp"] is not None and r["members_after"] is not None]
    if finished:
        final = max(finished, key=lambda r: r["end_timestamp"])
        stay = set(final["members_after"])
        latest = {mid: m for mid, m in latest.items()
                  if mid in stay or m["record_timestamp"] > final["end_timestamp"]}
    return [[mid, (info.get(mid) or m)["process_id"], (info.get(mid) or m)["client_id"], m["generation"],
             " ".join(m["assigned_active"] or []) or _named(m["assigned_partitions"], m["protocol"], names or {}),
             " ".join(m["assigned_standby"] or []),
             " ".join(m["assigned_warmup"] or []), _assignor_error(m["error_code"])]
            for mid, m in sorted(latest.items())]


def _assignor_error(code: int | None) -> str:
    return "" if not code else f"{ASSIGNOR_ERRORS.get(code, 'UNKNOWN')} ({code})"


def _latest_offsets(offsets: list[Row]) -> list[list[Any]]:
    latest: dict[tuple[str, int], Row] = {}
    for o in sorted(offsets, key=lambda r: (r["record_timestamp"], r["record_offset"])):
        if o["deleted"]:
            latest.pop((o["topic"], o["partition"]), None)
        else:
            latest[(o["topic"], o["partition"])] = o
    return [[t, p, o["offset"], _time(o["commit_timestamp"])] for (t, p), o in sorted(latest.items())]


def _copies_section(duplicates: list[Row]) -> list[str]:
    """The copies the pipeline found in its input (and kept once), one line per file and the file it copies."""
    if not duplicates:
        return []
    kinds = {"records": "records", "exchanges": "exchanges"}
    rows = [[kinds.get(d["table"], d["table"]), d["source"], d["copy_of"], d["rows"]] for d in duplicates]
    total = ", ".join(f"{sum(d['rows'] for d in duplicates if d['table'] == t)} {t}"
                      for t in sorted({d["table"] for d in duplicates}))
    return ["<h2 id='copies'>Copies in the input</h2>",
            f"<p class='note'>The input held the same data more than once: {html.escape(total)} read again from "
            "another file were counted once (records by topic, partition and offset; exchanges by connection, "
            "correlation id and times).</p>",
            _table(["kind", "file", "copy of", "rows dropped"], rows)]


def _id_note(ids: set[str]) -> list[str]:
    if not ids:
        return []
    return [f"<p class='note'>This group's consumer-protocol records name topics by id: "
            f"{html.escape(', '.join(sorted(ids)))} stay ids here, as the data directory had no "
            "<code>__cluster_metadata</code> log naming them (give the broker's whole data directory to "
            "<code>kprotocol pipeline offsets</code>).</p>"]




class Html(str):
    """A table cell's content that is HTML already (not escaped again)."""


def _table(headers: list[str], rows: list[list[Any]], classes: list[str] | None = None,
           marked: set[int] | frozenset[int] = frozenset()) -> str:
    """An HTML table; a cell is text (escaped) or `Html`; `classes` gives each column's cell class, `marked`
    the rows shown as errors."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for k, c in enumerate(row):
            css = classes[k] if classes and k < len(classes) and classes[k] else ""
            content = c if isinstance(c, Html) else html.escape("" if c is None else str(c))
            cells.append(f"<td class='{css}'>{content}</td>" if css else f"<td>{content}</td>")
        body.append(("<tr class='error'>" if len(body) in marked else "<tr>") + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _missing(text: str, why: str) -> Html:
    """An empty cell that says why it is empty (the reason whole in a tooltip)."""
    return Html(f"<span class='na' title='{html.escape(why, quote=True)}'>{html.escape(text)}</span>")


def _named_cell(short: str, tip: str) -> Html:
    """A name cut at its end by the page's style (ellipsis), whole in a tooltip."""
    return Html(f"<span title='{html.escape(tip, quote=True)}'>{html.escape(short)}</span>")


def _stamp(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


INLINE_GROUPS = 25  # more groups: one page each, linked from the overview
WINDOW = 12  # the latest rebalances drawn on a group's timeline
LANES = 40  # members drawn on a timeline at most
LISTED = 25  # rows of a group's latest rebalances
WORST = 10  # rows of its longest rebalances, and of those that moved most tasks
MAX_ROWS = 200  # rows of a committed offsets or error responses table
MAX_POINTS = 600  # points of a latency chart (beyond: the slowest per API and time bin)
CLASSIC_START = "the log holds a classic group's completed generation only: when its rebalance started is not in it"
STYLE = """<style>
body{font-family:sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1.2em;color:#222}
svg.chart{display:block;width:100%;max-width:1100px;height:auto;margin:.8em 0 0}
table{border-collapse:collapse;font-size:12px;max-width:100%;margin:.3em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
td.name{max-width:24em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
td.list{max-width:36em;overflow-wrap:anywhere}
td.message{max-width:48em;overflow-wrap:anywhere}
.error{background:#fdecea;color:#a61b1b}
mark.error{padding:0 2px}
.na{color:#777;font-style:italic}
.banner{border:3px solid #c0392b;background:#fdecea;color:#7b1010;padding:.6em 1em;font-weight:bold;font-size:15px}
.warn{border-left:4px solid #e67e22;background:#fef5e7;padding:.4em .8em}
.flag{padding:.3em .8em;border-left:4px solid #c0392b}
ul.legend{display:flex;flex-wrap:wrap;gap:.3em 1.4em;list-style:none;padding:0;margin:.2em 0 1em;font-size:12px;
max-width:1100px}
.swatch{display:inline-block;width:14px;height:10px;margin-right:.4em;vertical-align:middle}
h2{margin-top:2em;overflow-wrap:anywhere}
p{max-width:1100px}
</style>"""


@dataclass
class Tables:
    """The pipeline's tables as Arrow, each cut by group (sorted by group once, sliced, not filtered
    per group)."""

    members: dict[str, pa.Table]  # the rows since the rebalance before the timeline's window
    reduced: dict[str, list[Row]]  # `_reduce`: the rows each group's latest assignment depends on
    rebalances: dict[str, pa.Table]  # `_ordered`: in time order, without member lists
    whole: dict[int, Row]  # the rebalances of the timelines' windows with their member lists, by `_row`
    offsets: dict[str, list[Row]]  # `_latest_offsets_by_group`
    exchanges: dict[str, pa.Table]
    topics: dict[str, str]


def _arrow(out: str, table: str, columns: list[str] | None = None, where: Any = None) -> pa.Table | None:
    import pyarrow.dataset as ds

    fsys, path = filesystem(table_dir(out, table))
    if fsys.get_file_info(path).type == 0:
        return None
    return ds.dataset(path, filesystem=fsys, format="parquet").to_table(columns=columns, filter=where)


def _by_group(table: pa.Table | None, then: tuple[tuple[str, str], ...] = ()) -> dict[str, pa.Table]:
    """A table cut by group (each slice ordered by the columns `then` names)."""
    if table is None or table.num_rows == 0:
        return {}
    codes = pc.dictionary_encode(table["group"].combine_chunks())  # integers sort faster than the names
    keys = pa.table({"_code": codes.indices, **{name: table[name] for name, _ in then}})
    ordered = table.take(pc.sort_indices(keys, sort_keys=[("_code", "ascending"), *then]))
    counts = ordered.group_by("group", use_threads=False).aggregate([("group", "count", pc.CountOptions("all"))])
    found, start = {}, 0
    for group, n in zip(counts["group"].to_pylist(), counts["group_count"].to_pylist()):
        if group is not None:
            found[group] = ordered.slice(start, n)
        start += n
    return found


# The columns the report reads (a year's group_members rows are millions: the rest stays on disk).
MEMBER_COLUMNS = ("group", "protocol", "generation", "member_id", "instance_id", "client_id", "client_host",
                  "process_id", "left", "assigned_active", "assigned_standby", "assigned_warmup", "assigned_partitions",
                  "error_code", "record_offset", "record_timestamp")
OFFSET_COLUMNS = ("group", "topic", "partition", "offset", "commit_timestamp", "deleted", "record_offset",
                  "record_timestamp")


def _load(out: str, groups: list[str] | None) -> Tables:
    import pyarrow.dataset as ds

    chosen = None if groups is None else ds.field("group").isin(groups)
    wanted = ds.field("api_name").isin(list(GROUP_APIS)) & ds.field("group").is_valid()
    exchange_columns = ["source", "api_name", "group", "member_id", "client_id", "request_time", "latency_ms",
                        "error_codes"]
    # members_before is the previous rebalance's members_after (`_log_sections` fills it in): not read
    columns = [name for name in SCHEMAS["rebalances"].names if name != "members_before"]
    whole = _arrow(out, "rebalances", columns, chosen)
    whole = whole if whole is not None else SCHEMAS["rebalances"].empty_table().select(columns)
    rebalances = _by_group(_ordered(whole), (("at", "ascending"), ("epoch", "ascending")))
    rows = [r["_row"].slice(max(0, r.num_rows - WINDOW - 1)) for r in rebalances.values()]
    needed = pa.concat_arrays([c for r in rows for c in r.chunks]) if rows else pa.array([], pa.int64())
    windows = dict(zip(needed.to_pylist(), whole.take(needed).to_pylist()))  # one take: the whole has many chunks
    members = _arrow(out, "group_members", list(MEMBER_COLUMNS), chosen)
    return Tables(members=_by_group(_since_window(members, rebalances)),
                  reduced=_reduce(members) if members is not None else {}, rebalances=rebalances, whole=windows,
                  offsets=_latest_offsets_by_group(_arrow(out, "offsets_committed", list(OFFSET_COLUMNS), chosen)),
                  exchanges=_by_group(_arrow(out, "exchanges", exchange_columns,
                                             wanted if chosen is None else wanted & chosen)),
                  topics={r["topic_id"]: r["topic"] for r in _read(out, "topic_names")})


def _since_window(members: pa.Table | None, rebalances: dict[str, pa.Table]) -> pa.Table | None:
    """The members' rows the timelines draw: those since the rebalance before each group's window (all of a
    group with no more than WINDOW rebalances)."""
    cut = {g: r["at"][r.num_rows - WINDOW - 1].as_py() for g, r in rebalances.items() if r.num_rows > WINDOW}
    if members is None or not cut:
        return members
    codes = pc.dictionary_encode(members["group"].combine_chunks())
    by_code = pa.array([cut.get(g) for g in codes.dictionary.to_pylist()], pa.int64())
    cutoff = by_code.take(codes.indices)  # each row's group's cutoff (null: none)
    return members.filter(pc.or_kleene(pc.is_null(cutoff), pc.greater_equal(members["record_timestamp"], cutoff)))


def _anchor(group: str) -> str:
    return "g-" + re.sub(r"[^A-Za-z0-9_-]", "_", group) + "-" + hashlib.sha1(group.encode()).hexdigest()[:6]


def write_report(out_dir: str, target: Path, groups: list[str] | None = None) -> list[str]:
    """Write the report for every group (or `groups`); returns the groups drawn. Past INLINE_GROUPS
    groups, each group's section is a page of its own beside the report (`<name>-groups/`), linked
    from the overview."""
    tables = _load(out_dir, groups)
    names = sorted(g for g in {*tables.members, *tables.reduced, *tables.exchanges, *tables.rebalances}
                   if groups is None or g in groups)
    if target.suffix.lower() == ".png":
        import pyarrow.dataset as ds

        drawn = [g for g in names if g in tables.reduced]
        if len(drawn) != 1:
            raise ValueError(f"a PNG holds one group's timeline; choose one with --group ({len(drawn)} found)")
        chosen = ds.field("group") == drawn[0]
        members = _arrow(out_dir, "group_members", list(MEMBER_COLUMNS), chosen)
        rebalances = _arrow(out_dir, "rebalances", where=chosen)
        target.write_bytes(_figure(drawn[0], members.to_pylist(), rebalances.to_pylist() if rebalances else []))
        return names
    sections: dict[str, list[str]] = {}
    summaries: list[dict[str, Any]] = []
    for g in names:
        sections[g], summary = _group_section(g, tables)
        summaries.append(summary)
    head = ["<!doctype html><meta charset='utf-8'><meta name='viewport' content='width=device-width'>",
            "<title>kprotocol rebalance report</title>", STYLE]
    separate = len(names) > INLINE_GROUPS
    folder = target.with_name(target.stem + "-groups")
    if separate:
        folder.mkdir(parents=True, exist_ok=True)
        for g in names:
            (folder / f"{_anchor(g)}.html").write_text(
                "\n".join([*head, f"<p><a href='../{html.escape(target.name)}'>all groups</a></p>", *sections[g]]),
                encoding="utf-8")
    link = (lambda g: f"{folder.name}/{_anchor(g)}.html") if separate else (lambda g: f"#{_anchor(g)}")
    parts = [*head, "<h1>Rebalance report</h1>", *_warnings(out_dir), *_copies_section(_read(out_dir, "duplicates")),
             *_problems_section(out_dir), *_overview(summaries, link)]
    if not separate:
        for g in names:
            parts += sections[g]
    target.write_text("\n".join(parts), encoding="utf-8")
    return names


def _warnings(out: str) -> list[str]:
    """Loud: tables a job did not finish. Then: captures that gave nothing, with the ports to try."""
    from kprotocol.pipeline.manifest import partial, read

    parts = [f"<p class='banner'>WARNING: partial tables. {html.escape(reason)}.</p>" for reason in partial(out)]
    captures = (read(out, "captures") or {}).get("captures", [])
    silent = [c for c in captures if not c["exchanges"]]
    if silent:
        parts.append("<div class='warn'><p>Captures that gave no exchange (nothing of them is in this report):</p>"
                     "<ul>" + "".join(f"<li><code>{html.escape(c['source'])}</code>: {html.escape(c['hint'] or '')}"
                                      "</li>" for c in silent) + "</ul></div>")
    return parts


def _problems_section(out: str) -> list[str]:
    """What did not decode, per file and kind, with the first place (a byte position in the file)."""
    problems = _arrow(out, "problems")
    if problems is None or problems.num_rows == 0:
        return []
    first = problems.group_by(["source", "kind"], use_threads=False).aggregate(
        [("kind", "count"), ("position", "first"), ("offset", "first"), ("message", "first")])
    rows = [[_named_cell(_short_path(r["source"]), r["source"]), r["kind"], r["kind_count"],
             r["position_first"] if r["position_first"] is not None else _missing("—", "no byte position"),
             r["offset_first"] if r["offset_first"] is not None else _missing("—", "not one record"),
             r["message_first"]]
            for r in first.sort_by([("source", "ascending"), ("kind", "ascending")]).to_pylist()]
    return ["<h2 id='problems'>Problems in the input</h2>",
            f"<p>{problems.num_rows} place(s) did not decode (the problems table has each one); positions are "
            "bytes from the start of the file, offsets the record's offset in its partition.</p>",
            _table(["file", "kind", "count", "first at byte", "first record offset", "first message"], rows,
                   ["name", "", "", "", "", "message"])]


def _short_path(path: str) -> str:
    parts = path.rstrip("/").split("/")
    return "/".join(parts[-2:])


def _overview(summaries: list[dict[str, Any]], link: Any) -> list[str]:
    """One row per group, most rebalances first, linking to its section."""
    rows = []
    for s in sorted(summaries, key=lambda s: (-s["rebalances"], s["group"])):
        group = html.escape(s["group"], quote=True)
        name = Html(f"<a href='{html.escape(link(s['group']), quote=True)}' title='{group}'>{group}</a>")
        flags = Html("<span class='error'>" + html.escape("; ".join(s["flags"])) + "</span>") if s["flags"] else \
            _missing("none", "no task active twice, no Streams assignor error, every rebalance completed")
        rows.append([name, s["protocol"] or _missing("—", "no record of the group in the coordinator's log"),
                     s["rebalances"], s["p50"] if s["p50"] is not None else _missing("—", s["why"]),
                     s["p99"] if s["p99"] is not None else _missing("—", s["why"]),
                     s["max"] if s["max"] is not None else _missing("—", s["why"]),
                     s["moved"], s["members"], s["requests"], flags])
    return ["<h2 id='groups'>Groups</h2>",
            _table(["group", "protocol", "rebalances", "p50 duration", "p99 duration", "longest", "tasks moved",
                    "members now", "captured requests", "flags"], rows, ["name"] + [""] * 8 + ["message"])]


def _group_section(g: str, t: Tables) -> tuple[list[str], dict[str, Any]]:
    """A group's section: what the coordinator's log tells, then what the captures saw; and its overview row."""
    summary: dict[str, Any] = {"group": g, "protocol": None, "rebalances": 0, "p50": None, "p99": None, "max": None,
                               "why": "no rebalance in the data", "moved": 0, "members": 0, "requests": 0,
                               "flags": []}
    parts = [f"<h2 id='{_anchor(g)}'>{html.escape(g)}</h2>"]
    members, rebalances = t.members.get(g), t.rebalances.get(g)
    if members is not None or rebalances is not None or g in t.reduced:
        parts += _log_sections(g, members, rebalances, t.whole, t.reduced.get(g, []), t.offsets.get(g, []), t.topics,
                               summary)
    if g in t.exchanges:
        parts += _capture_sections(g, t.exchanges[g], summary)
    return parts, summary


def _ordered(rebalances: pa.Table) -> pa.Table:
    """Rebalances with `at`, their time in order (the end, or the start of one never completed), without
    their member lists (`members`: how many after it; `_row`: its row in `rebalances`)."""
    at = pc.coalesce(rebalances["end_timestamp"], rebalances["start_timestamp"])
    light = rebalances.drop_columns([c for c in ("members_before", "members_after") if c in rebalances.schema.names])
    light = light.append_column("at", at)
    light = light.append_column("members", pc.list_value_length(rebalances["members_after"]))
    light = light.append_column("_row", pa.array(range(rebalances.num_rows), pa.int64()))
    return light


def _whole(whole: dict[int, Row], ordered: pa.Table, start: int, stop: int) -> list[Row]:
    """Rows [start, stop) of `ordered` with their member lists (rows of the windows, `Tables.whole`)."""
    chosen = ordered.slice(max(0, start), max(0, stop - max(0, start)))
    return [{**whole[row], "at": at} for row, at in zip(chosen["_row"].to_pylist(), chosen["at"].to_pylist())]


def _log_sections(g: str, members: pa.Table | None, ordered: pa.Table | None, whole: dict[int, Row],
                  reduced: list[Row],
                  offsets: list[Row], topics: dict[str, str], summary: dict[str, Any]) -> list[str]:
    """The coordinator's log of a group: its numbers, charts of all its rebalances, the timeline of the
    latest, the latest and the worst rebalances, the latest assignment, the committed offsets."""
    ordered = ordered if ordered is not None else _ordered(SCHEMAS["rebalances"].empty_table())
    n = ordered.num_rows
    durations = ordered["duration_ms"].drop_null()
    protocols = sorted(set(ordered["protocol"].to_pylist()) | {r["protocol"] for r in reduced} - {None})
    summary.update(protocol=", ".join(protocols), rebalances=n, moved=pc.sum(ordered["tasks_moved"]).as_py() or 0)
    if len(durations):
        p50, p99 = pc.quantile(durations, q=[0.5, 0.99], interpolation="nearest").to_pylist()
        summary.update(p50=duration_text(p50), p99=duration_text(p99), max=duration_text(pc.max(durations).as_py()))
    elif n:
        summary["why"] = "no rebalance with a known start: " + CLASSIC_START if "classic" in protocols else \
            "no rebalance completed within the data"
    unfinished = n - pc.count(ordered["end_timestamp"]).as_py()
    if unfinished:
        summary["flags"].append(f"{unfinished} rebalance(s) never completed in the data")
    window = _whole(whole, ordered, n - WINDOW, n)
    before = _whole(whole, ordered, n - WINDOW - 1, n - WINDOW) if n > WINDOW else []
    for previous, row in zip([before[0] if before else None, *window], window):
        row["members_before"] = (previous or {}).get("members_after") or []
    latest = _latest_assignments(reduced, window, topics)
    doubled = _doubly_active(latest)
    summary["members"] = len(latest)
    if doubled:
        summary["flags"].append(f"{len(doubled)} task(s) active on two members")
    errors = [row[7] for row in latest if row[7]]
    if errors:
        summary["flags"].append("Streams assignor error " + ", ".join(sorted(set(errors))))
    parts = [_numbers(summary, n, ordered, unfinished)]
    if n >= 10:
        parts.append(_per_time(g, ordered["at"].drop_null().to_pylist()))
    if len(durations) >= 10:
        parts.append(_per_duration(g, durations.to_pylist()))
    if members is not None:
        parts += _timeline_section(g, members, window, before, reduced)
    parts += ["<h3>Rebalances</h3>", *_rebalance_tables(ordered, window if n <= WINDOW else None)]
    parts += ["<h3>Latest assignment</h3>", *_assignment_section(latest, doubled, window, reduced, topics)]
    parts += ["<h3>Committed offsets</h3>", *_offsets_section(offsets)]
    return parts


def _numbers(summary: dict[str, Any], n: int, ordered: pa.Table, unfinished: int) -> str:
    if not n:
        return "<p>No rebalance of this group in the data.</p>"
    first, last = pc.min(ordered["at"]).as_py(), pc.max(ordered["at"]).as_py()
    text = f"{n:,} rebalance(s) from {_stamp(first)} to {_stamp(last)} UTC ({summary['protocol']})"
    if summary["p50"] is not None:
        text += f"; duration p50 {summary['p50']}, p99 {summary['p99']}, longest {summary['max']}"
    else:
        text += f"; durations unknown: {summary['why']}"
    text += f"; {summary['moved']:,} active task(s) moved."
    flags = "".join(f"<p class='flag error'>{html.escape(f)}.</p>" for f in summary["flags"])
    return f"<p>{html.escape(text)}</p>{flags}"


def _per_time(g: str, times: list[int]) -> str:
    """Rebalances counted per time bin (a few dozen bins over the whole span)."""
    from kprotocol.pipeline.charts import TIME_STEPS, bars, duration_text as span_text

    low, high = min(times), max(times)
    step = next((s for s in TIME_STEPS if (high - low) / s <= 60), TIME_STEPS[-1])
    start = low - low % step
    counts = [0] * (int((high - start) // step) + 1)
    for t in times:
        counts[int((t - start) // step)] += 1
    edges = [start + k * step for k in range(len(counts) + 1)]
    tips = [f"{c} rebalance(s) from {_stamp(edges[k])}" for k, c in enumerate(counts)]
    return bars(f"{g}: rebalances per {span_text(step)}", edges, counts, log_x=False, tips=tips)


def _per_duration(g: str, durations: list[int]) -> str:
    """How long rebalances took: counts per quarter of a decade, on a logarithmic axis from 1 ms."""
    from kprotocol.pipeline.charts import bars, duration_text

    top = max(max(durations), 1)
    bins = max(1, math.ceil(math.log10(top) * 4 + 1e-9)) if top > 1 else 1
    edges = [10 ** (k / 4) for k in range(bins + 1)]
    edges[0] = 1
    counts = [0] * bins
    for d in durations:
        counts[min(bins - 1, max(0, int(math.log10(max(d, 1)) * 4)))] += 1
    tips = [f"{c} rebalance(s) of {duration_text(round(edges[k], 1))} to {duration_text(round(edges[k + 1], 1))}"
            + (" (or less)" if k == 0 else "") for k, c in enumerate(counts)]
    return bars(f"{g}: rebalance durations (count per duration, logarithmic)", edges, counts, log_x=True, tips=tips)


def _reduce(members: pa.Table) -> dict[str, list[Row]]:
    """Per group, the rows of its members that its latest assignment depends on, in log order: each
    member's last row that left, last assignment and last row naming its client or process (a year of
    records is a few rows per member); computed for every group at once."""
    light = pa.table({  # the columns that choose the rows, sorted; the rows themselves taken at the end
        "group": members["group"], "member_id": members["member_id"], "left": members["left"],
        "assigned": pc.or_(pc.is_valid(members["assigned_active"]), pc.is_valid(members["assigned_partitions"])),
        "named": pc.or_(pc.is_valid(members["process_id"]), pc.is_valid(members["client_id"])),
        "ts": members["record_timestamp"], "offset": members["record_offset"],
        "_row": pa.array(range(members.num_rows), pa.int64())}).sort_by([("ts", "ascending"), ("offset", "ascending")])
    light = light.append_column("_pos", pa.array(range(light.num_rows), pa.int64()))
    keep: set[int] = set()
    for mask in ("left", "assigned", "named"):
        chosen = light.filter(light[mask])
        if chosen.num_rows:
            keep.update(chosen.group_by(["group", "member_id"]).aggregate([("_pos", "max")])["_pos_max"].to_pylist())
    found: dict[str, list[Row]] = defaultdict(list)
    for row in members.take(light["_row"].take(sorted(keep))).to_pylist():
        found[row["group"]].append(row)
    return found


def _doubly_active(latest: list[list[Any]]) -> dict[str, list[str]]:
    """Active tasks (or partitions) of the latest assignment that more than one member holds."""
    owners: dict[str, list[str]] = defaultdict(list)
    for row in latest:
        for task in str(row[4] or "").split():
            owners[task].append(row[0])
    return {task: who for task, who in sorted(owners.items()) if len(who) > 1}


def _member_label(member_id: str | None, info: Row | None, room: int = 44) -> tuple[str, str]:
    """(label, tooltip): a member by its client id and process (a Streams process id's first 8 characters,
    the process id taken out of a client id that holds it, as Kafka Streams' do), its member id when it
    names neither; the label at most `room` characters, the client id cut at its end, never the process;
    the tooltip names it whole."""
    info = info or {}
    client, process = info.get("client_id"), info.get("process_id")
    name = client or member_id or "(unknown member)"
    suffix = ""
    if process:
        name = name.replace(f"-{process}", "").replace(process, "") or name
        suffix = f" · {process[:8]}"
    room = max(8, room - len(suffix))
    label = (name if len(name) <= room else name[: room - 1] + "…") + suffix
    tip = "\n".join(f"{title}: {value}" for title, value in (
        ("member id", member_id), ("client id", client), ("process", process), ("host", info.get("client_host")),
        ("instance id", info.get("instance_id"))) if value)
    return label, tip or label


def _timeline_section(g: str, members: pa.Table, window: list[Row], before: list[Row], reduced: list[Row]) -> list[str]:
    """The timeline of the latest WINDOW rebalances (of every one when there are no more): the members'
    records since the rebalance before them."""
    from kprotocol.pipeline.charts import ASSIGNED, BAR, EDGE, MOVED, SPAN, Lane, Span, swatches, timeline

    cutoff = before[0]["at"] if before else None
    rows = members if cutoff is None else members.filter(pc.greater_equal(members["record_timestamp"], cutoff))
    rows_list = rows.sort_by([("record_timestamp", "ascending"), ("record_offset", "ascending")]).to_pylist()
    info = {r["member_id"]: r for r in reduced if r["process_id"] or r["client_id"]}
    present = set(before[0]["members_after"] or ()) if before else set()
    stamps = [r["record_timestamp"] for r in rows_list] + [t for r in window for t in (r["start_timestamp"],
                                                                                        r["end_timestamp"]) if t]
    if not stamps:
        return []
    low, high = min(stamps), max(stamps)
    events: dict[str, list[tuple[float, bool, str]]] = {m: [] for m in sorted(present)}
    first: dict[str, float] = dict.fromkeys(present, low)
    left: dict[str, float] = {}
    owner: dict[str, str] = {}
    for r in rows_list:
        mid = r["member_id"]
        if not mid:
            continue
        events.setdefault(mid, [])
        first.setdefault(mid, r["record_timestamp"])
        if r["left"]:
            left.setdefault(mid, r["record_timestamp"])
            continue
        if r["assigned_active"] is None and r["assigned_partitions"] is None:
            continue
        active = r["assigned_active"] or r["assigned_partitions"] or []
        moved = [t for t in active if owner.get(t, mid) != mid]
        owner.update(dict.fromkeys(active, mid))
        tip = (f"{_stamp(r['record_timestamp'])}: generation/epoch {r['generation']}: {len(active)} active, "
               f"{len(r['assigned_standby'] or [])} standby, {len(r['assigned_warmup'] or [])} warm-up"
               + (f"; moved in: {' '.join(moved)}" if moved else ""))
        events[mid].append((r["record_timestamp"], bool(moved), tip))
    names = sorted(events, key=lambda m: (first[m], m))
    hidden = max(0, len(names) - LANES)
    lanes = []
    for mid in names[hidden:]:
        end = left.get(mid) or _gone(mid, first[mid], window) or high
        label, tip = _member_label(mid, info.get(mid), room=32)
        lanes.append(Lane(label, tip, first[mid], end, events[mid]))
    spans = []
    for r in window:
        word = "gen" if r["protocol"] == "classic" else "epoch"
        tip = (f"{word} {r['epoch']}: {r['trigger']}; ended {_stamp(r['end_timestamp']) or 'never (in the data)'}; "
               f"{r['tasks_moved']} task(s) moved" + (f", {r['warmup_tasks']} warm-up" if r["warmup_tasks"] else "")
               + (", probing" if r["probing"] else ""))
        spans.append(Span(r["start_timestamp"], r["end_timestamp"], f"{word} {r['epoch']}", tip))
    note = f"The latest {len(window)} rebalances. " if before else ""
    if hidden:
        note += f"{hidden} member(s) that joined earlier are not drawn. "
    legend = swatches([(f"background:{BAR}", "member in the group"),
                       (f"background:{ASSIGNED};border-radius:50%", "assignment received (tooltip: tasks)"),
                       (f"background:{MOVED};border-radius:50%", "... with active tasks moved in"),
                       (f"background:{SPAN};opacity:.5", "rebalance (from its start to its end)"),
                       (f"border-top:2px dashed {EDGE};height:0", "rebalance completed (generation/epoch)")])
    return ["<h3>Timeline</h3>", f"<p>{html.escape(note)}Hover a member, a dot or a rebalance for details.</p>"
            if note else "", timeline(f"{g}: members over time", lanes, spans, low, high), legend]


REBALANCE_HEADERS = ["protocol", "epoch", "start", "end", "duration ms", "trigger", "members", "tasks moved",
                     "warm-ups", "probing"]


def _rebalance_row(r: Row) -> list[Any]:
    classic = r["protocol"] == "classic"
    start = _stamp(r["start_timestamp"]) if r["start_timestamp"] is not None else _missing(
        "not logged", CLASSIC_START if classic else "the log does not tell when it started")
    end = _stamp(r["end_timestamp"]) if r["end_timestamp"] is not None else _missing(
        "not completed", "the members had not all reached this generation/epoch when the data ends")
    duration = r["duration_ms"] if r["duration_ms"] is not None else _missing(
        "unknown", "its start is not in the log" if r["start_timestamp"] is None else "it never completed")
    count = r["members"] if "members" in r else None if r["members_after"] is None else len(r["members_after"])
    members = count if count is not None else _missing("unknown", "not completed")
    return [r["protocol"], r["epoch"], start, end, duration, r["trigger"], members, r["tasks_moved"],
            r["warmup_tasks"], "yes" if r["probing"] else "no"]


def _rebalance_tables(ordered: pa.Table, _: Any) -> list[str]:
    """The latest LISTED rebalances; past that, also the WORST longest and those that moved most tasks."""
    n = ordered.num_rows
    if not n:
        return ["<p class='na'>No rebalance of this group in the data.</p>"]
    parts = []
    if n > LISTED:
        parts.append(f"<p>The latest {LISTED} of {n:,} (the longest and those that moved most tasks follow).</p>")
    parts.append(_table(REBALANCE_HEADERS, [_rebalance_row(r) for r in ordered.slice(n - min(n, LISTED)).to_pylist()]))
    if n > LISTED:
        longest = ordered.filter(pc.is_valid(ordered["duration_ms"])).sort_by([("duration_ms", "descending")])
        parts += [f"<h4>The {WORST} longest</h4>",
                  _table(REBALANCE_HEADERS, [_rebalance_row(r) for r in longest.slice(0, WORST).to_pylist()])]
        moved = ordered.filter(pc.greater(ordered["tasks_moved"], 0)).sort_by([("tasks_moved", "descending")])
        if moved.num_rows:
            parts += [f"<h4>The {WORST} that moved most tasks</h4>",
                      _table(REBALANCE_HEADERS, [_rebalance_row(r) for r in moved.slice(0, WORST).to_pylist()])]
    return parts


def _tasks_cell(text: str, doubled: dict[str, list[str]], member: str, why: str) -> Any:
    if not text:
        return _missing("none", why)
    shown = []
    for task in text.split():
        if task in doubled:
            others = ", ".join(m for m in doubled[task] if m != member)
            shown.append(f"<mark class='error' title='{html.escape('also active on ' + others, quote=True)}'>"
                         f"{html.escape(task)}</mark>")
        else:
            shown.append(html.escape(task))
    return Html(" ".join(shown))


def _assignment_section(latest: list[list[Any]], doubled: dict[str, list[str]], window: list[Row],
                        reduced: list[Row], topics: dict[str, str]) -> list[str]:
    notes = _id_note(_unnamed_ids(reduced, topics))
    if not latest:
        last = window[-1] if window else None
        why = "No member is in the group at the end of the data"
        if last and last["members_after"] == []:
            why += f": its last rebalance ({_stamp(last['at'])}) left it without members"
        return [f"<p class='na'>{html.escape(why)}.</p>", *notes]
    info = {r["member_id"]: r for r in reduced if r["process_id"] or r["client_id"]}
    labels = {row[0]: _member_label(row[0], info.get(row[0]))[0] for row in latest}
    flags = [f"<p class='flag error'>Task {html.escape(task)} is active on {len(who)} members "
             f"({html.escape(', '.join(labels.get(m, m) for m in who))}): a task is active on one member only.</p>"
             for task, who in doubled.items()]
    rows = []
    for mid, process, client, generation, active, standby, warmup, error in latest:
        label, tip = _member_label(mid, {**(info.get(mid) or {}), "client_id": client, "process_id": process})
        streams = bool(process)
        rows.append([_named_cell(label, tip), _named_cell(mid, mid), generation,
                     _tasks_cell(active, doubled, mid, "no active task assigned"),
                     standby or _missing("none" if streams else "n/a", "no standby task assigned" if streams
                                         else "standby tasks are Kafka Streams' (this member is not)"),
                     warmup or _missing("none" if streams else "n/a", "no warm-up task assigned" if streams
                                        else "warm-up tasks are Kafka Streams' (this member is not)"),
                     error or _missing("none", "the Streams assignor reported no error")])
    marked = {k for k, row in enumerate(latest) if any(t in doubled for t in str(row[4]).split())}
    table = _table(["member (client id · process)", "member id", "generation/epoch", "active", "standby",
                    "warm-up", "Streams assignor error"], rows, ["name", "name", "", "list", "list", "list", ""],
                   marked)
    return [*flags, table, *notes]


def _latest_offsets_by_group(offsets: pa.Table | None) -> dict[str, list[Row]]:
    """Per group, the latest committed offset of each partition (deletions applied), for every group at once."""
    if offsets is None or offsets.num_rows == 0:
        return {}
    ordered = offsets.sort_by([("record_timestamp", "ascending"), ("record_offset", "ascending")])
    last = ordered.group_by(["group", "topic", "partition"], use_threads=False).aggregate(
        [("offset", "last"), ("commit_timestamp", "last"), ("deleted", "last")])
    found: dict[str, list[Row]] = defaultdict(list)
    for row in last.sort_by([("group", "ascending"), ("topic", "ascending"), ("partition", "ascending")]).to_pylist():
        found[row["group"]].append(row)
    return found


def _offsets_section(offsets: list[Row]) -> list[str]:
    if not offsets:
        return ["<p class='na'>No offset committed by this group in the data.</p>"]
    live = [r for r in offsets if not r["deleted_last"]]
    if not live:
        return ["<p class='na'>Every offset this group committed was deleted (the group expired or was deleted).</p>"]
    rows = [[r["topic"], r["partition"], r["offset_last"], _stamp(r["commit_timestamp_last"])] for r in live[:MAX_ROWS]]
    more = [f"<p>The first {MAX_ROWS} of {len(live):,} partitions.</p>"] if len(live) > MAX_ROWS else []
    return [_table(["topic", "partition", "offset", "committed at"], rows), *more]


def _capture_sections(g: str, exchanges: pa.Table, summary: dict[str, Any]) -> list[str]:
    """A group's captured membership requests: latency over time (at most MAX_POINTS marks), per API the
    requests, latency percentiles, unanswered ones and errors by name, then the error responses."""
    from kprotocol.pipeline.charts import latency

    summary["requests"] = exchanges.num_rows
    ordered = exchanges.sort_by([("request_time", "ascending")])
    rows = []
    for api in sorted(set(ordered["api_name"].to_pylist())):
        of_api = ordered.filter(pc.equal(ordered["api_name"], api))
        timed = of_api["latency_ms"].drop_null()
        quantiles = pc.quantile(timed, q=[0.5, 0.99], interpolation="nearest").to_pylist() if len(timed) else [None] * 2
        codes = pc.list_flatten(of_api["error_codes"]).to_pylist()
        errors = ", ".join(f"{error_text(c)} x{codes.count(c)}" for c in sorted(set(codes)))
        rows.append([api, of_api.num_rows, *(round(q, 3) if q is not None else _missing("—", "no response captured")
                                               for q in quantiles),
                     round(pc.max(timed).as_py(), 3) if len(timed) else _missing("—", "no response captured"),
                     of_api.num_rows - len(timed), errors or _missing("none", "no error response")])
    failed = ordered.filter(pc.greater(pc.list_value_length(ordered["error_codes"]), 0))
    error_rows = [[_stamp(round(e["request_time"] * 1000)), e["api_name"],
                   _named_cell(e["member_id"], e["member_id"]) if e["member_id"] else _missing("none", "not sent"),
                   e["client_id"], ", ".join(error_text(c) for c in e["error_codes"])]
                  for e in failed.slice(0, MAX_ROWS).to_pylist()]
    parts = ["<h3>Captured membership requests</h3>", _latency_chart(g, ordered, failed, latency),
             _table(["API", "requests", "p50 ms", "p99 ms", "max ms", "unanswered", "errors"], rows)]
    if error_rows:
        more = [f"<p>The first {MAX_ROWS} of {failed.num_rows:,}.</p>"] if failed.num_rows > MAX_ROWS else []
        parts += ["<h4>Error responses</h4>", *more,
                  _table(["request time", "API", "member", "client", "error"], error_rows,
                         ["", "", "name", "name", ""])]
    return parts


def _latency_chart(g: str, ordered: pa.Table, failed: pa.Table, draw: Any) -> str:
    timed = ordered.filter(pc.is_valid(ordered["latency_ms"]))
    if timed.num_rows > MAX_POINTS:  # the slowest request of each API in each of 150 time bins
        low, high = pc.min(timed["request_time"]).as_py(), pc.max(timed["request_time"]).as_py()
        step = max((high - low) / 150, 1e-3)
        bins = pc.floor(pc.divide(pc.subtract(timed["request_time"], low), step))
        timed = timed.append_column("_bin", bins).group_by(["api_name", "_bin"]).aggregate(
            [("latency_ms", "max"), ("request_time", "min")]).rename_columns(
            ["api_name", "_bin", "latency_ms", "request_time"])
        timed = timed.append_column("error_codes", pa.nulls(timed.num_rows, pa.list_(pa.int32())))
        timed = pa.concat_tables([timed.select(["api_name", "latency_ms", "request_time", "error_codes"]),
                                  failed.filter(pc.is_valid(failed["latency_ms"])).slice(0, MAX_POINTS // 3)
                                  .select(["api_name", "latency_ms", "request_time", "error_codes"])])
    series: dict[str, list[tuple[float, float, str | None]]] = defaultdict(list)
    for e in timed.to_pylist():
        error = ", ".join(error_text(c) for c in e["error_codes"]) if e["error_codes"] else None
        series[e["api_name"]].append((e["request_time"] * 1000, max(e["latency_ms"], 0.01), error))
    if not series:
        return "<p class='na'>No response captured: no latency to draw.</p>"
    times = [t for points in series.values() for t, _, _ in points]
    title = f"{g}: membership requests captured (latency per request; crosses: error responses)"
    return draw(title, dict(series), min(times), max(times))


def report_problems(out_dir: str) -> list[str]:
    """What makes a report untrustworthy, for the command's exit status: partial tables."""
    from kprotocol.pipeline.manifest import partial

    return partial(out_dir)

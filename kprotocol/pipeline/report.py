"""`kprotocol report`: rebalance timelines and assignment tables from the pipeline's Parquet tables.

Per group: a timeline with members as rows and time across (a bar while a member is in the
group, a dot at each assignment it received, labelled with its active/standby/warm-up counts,
red when active tasks moved to it), every rebalance as a shaded span (or a line at its end when
the start is unknown) marked with its generation or epoch, and a legend; then the latest assignment
of the members still in the group and the latest committed offset per partition. When captures were
decoded into the same directory, each group also gets its JoinGroup/SyncGroup/heartbeat exchanges:
latency over time per API with error responses marked, and a table of latencies and errors by name.
HTML embeds the PNGs; a `.png` output holds the timelines alone.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from kprotocol.errors import error_text
from kprotocol.pipeline.files import filesystem
from kprotocol.pipeline.tables import table_dir

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
    axis.set_yticks(range(len(names)), [n if len(n) <= 40 else n[:18] + "…" + n[-18:] for n in names], fontsize=7)
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


def _exchange_figure(group: str, exchanges: list[Row]) -> bytes:
    """Latency of the group's membership exchanges over time, one series per API; error responses
    marked and named."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.dates import ConciseDateFormatter

    fig, axis = plt.subplots(figsize=(13, 3.2))
    for api in sorted({e["api_name"] for e in exchanges}):
        timed = [e for e in exchanges if e["api_name"] == api and e["latency_ms"] is not None]
        axis.plot([_seconds(e["request_time"]) for e in timed], [max(e["latency_ms"], 0.01) for e in timed], "o",
                  markersize=4, label=f"{api} ({len(timed)})")
    failed = [e for e in exchanges if e["error_codes"] and e["latency_ms"] is not None]
    if failed:
        axis.plot([_seconds(e["request_time"]) for e in failed], [max(e["latency_ms"], 0.01) for e in failed], "x",
                  color=MOVED, markersize=8, label="error response")
        for e in failed:
            axis.annotate(" ".join(error_text(c).split(" (")[0] for c in e["error_codes"]),
                          (_seconds(e["request_time"]), max(e["latency_ms"], 0.01)), textcoords="offset points",
                          xytext=(4, 4), fontsize=6, color=MOVED)
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    latencies = [max(e["latency_ms"], 0.01) for e in exchanges if e["latency_ms"] is not None]
    if latencies and max(latencies) > 20 * min(latencies):  # spread over decades: a log scale, plain numbers
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(ScalarFormatter())
        axis.yaxis.set_minor_formatter(NullFormatter())
    else:
        axis.set_ylim(bottom=0)
    axis.set_ylabel("latency (ms)", fontsize=8)
    axis.xaxis.set_major_formatter(ConciseDateFormatter(axis.xaxis.get_major_locator()))
    axis.set_title(f"{group}: membership requests captured (latency per request)", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return _png(fig)


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


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('' if c is None else str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


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


def write_report(out_dir: str, target: Path, groups: list[str] | None = None) -> list[str]:
    """Write the report for every group (or `groups`); returns the groups drawn."""
    members, rebalances, offsets = (_read(out_dir, t) for t in ("group_members", "rebalances", "offsets_committed"))
    topics = {r["topic_id"]: r["topic"] for r in _read(out_dir, "topic_names")}
    exchanges = [e for e in _read(out_dir, "exchanges") if e["group"] and e["api_name"] in GROUP_APIS]
    by_group: dict[str, list[Row]] = defaultdict(list)
    for m in members:
        by_group[m["group"]].append(m)
    captured: dict[str, list[Row]] = defaultdict(list)
    for e in exchanges:
        captured[e["group"]].append(e)
    names = sorted(g for g in {*by_group, *captured} if groups is None or g in groups)
    pictures = {g: _figure(g, by_group[g], [r for r in rebalances if r["group"] == g]) for g in names if by_group[g]}
    if target.suffix.lower() == ".png":
        if len(pictures) != 1:
            raise ValueError(f"a PNG holds one group's timeline; choose one with --group ({len(pictures)} found)")
        target.write_bytes(next(iter(pictures.values())))
        return names
    parts = ["<!doctype html><meta charset='utf-8'><title>kprotocol rebalance report</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px}h2{margin-top:2em}</style>",
             "<h1>Rebalance report</h1>", *_copies_section(_read(out_dir, "duplicates"))]
    for g in names:
        parts.append(f"<h2>{html.escape(g)}</h2>")
        if g in pictures:
            parts += _log_sections(g, pictures[g], by_group[g], [r for r in rebalances if r["group"] == g],
                                   [o for o in offsets if o["group"] == g], topics)
        if captured[g]:
            image = base64.b64encode(_exchange_figure(g, captured[g])).decode()
            parts += ["<h3>Captured membership requests</h3>", _image(image, f"{g}: captured request latencies"),
                      _table(["API", "requests", "p50 ms", "p99 ms", "max ms", "unanswered", "errors"],
                             _exchange_rows(captured[g]))]
            failed = _error_rows(captured[g])
            if failed:
                parts += ["<h4>Error responses</h4>", _table(["request time", "API", "member", "client", "error"],
                                                             failed)]
    target.write_text("\n".join(parts), encoding="utf-8")
    return names


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


def _image(data: str, alt: str) -> str:
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def _log_sections(g: str, picture: bytes, members: list[Row], group_rebalances: list[Row],
                  offsets: list[Row], names: dict[str, str]) -> list[str]:
    """What the coordinator's log tells of a group: its timeline, rebalances, latest assignment, offsets."""
    group_rebalances = sorted(group_rebalances, key=lambda r: (r["end_timestamp"] or r["start_timestamp"] or 0))
    image = base64.b64encode(picture).decode()
    return [_image(image, f"{g}: members over time"), "<h3>Rebalances</h3>",
            _table(["protocol", "epoch", "start", "end", "duration ms", "trigger", "members", "tasks moved",
                    "warm-ups", "probing"],
                   [[r["protocol"], r["epoch"], _time(r["start_timestamp"]), _time(r["end_timestamp"]),
                     r["duration_ms"], r["trigger"], len(r["members_after"] or []), r["tasks_moved"],
                     r["warmup_tasks"], r["probing"]] for r in group_rebalances]),
            "<h3>Latest assignment</h3>",
            _table(["member", "process", "client", "generation/epoch", "active", "standby", "warm-up",
                    "Streams assignor error"],
                   _latest_assignments(members, group_rebalances, names)),
            *_id_note(_unnamed_ids(members, names)),
            "<h3>Committed offsets</h3>",
            _table(["topic", "partition", "offset", "committed at"], _latest_offsets(offsets))]

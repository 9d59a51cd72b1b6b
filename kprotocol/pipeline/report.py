"""`kprotocol report`: rebalance timelines and assignment tables from the pipeline's Parquet tables.

Per group: a timeline with members as rows and time across (a bar while a member is in the
group, a dot at each assignment it received, labelled with its active/standby/warm-up counts,
red when active tasks moved to it), every rebalance as a shaded span (or a line at its end when
the start is unknown) marked with its generation or epoch; then the latest assignment per member
and the latest committed offset per partition. HTML embeds the PNGs; a `.png` output holds the
timelines alone.
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

from kprotocol.pipeline.files import filesystem
from kprotocol.pipeline.tables import table_dir

Row = dict[str, Any]


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
    last = max((m["record_timestamp"] for m in members), default=0)
    owner: dict[str, str] = {}
    for y, name in enumerate(names):
        events = sorted(rows[name], key=lambda r: (r["record_timestamp"], r["record_offset"]))
        start = events[0]["record_timestamp"]
        end = next((e["record_timestamp"] for e in events if e["left"]), last)
        axis.plot([_time(start), _time(end)], [y, y], color="#9db4d0", linewidth=6, solid_capstyle="butt")
        for e in events:
            if e["left"] or e["assigned_active"] is None and e["assigned_partitions"] is None:
                continue
            active = e["assigned_active"] or e["assigned_partitions"] or []
            moved = [t for t in active if owner.get(t, name) != name]
            owner.update(dict.fromkeys(active, name))
            label = f"{len(active)}a/{len(e['assigned_standby'] or [])}s"
            if e["assigned_warmup"]:
                label += f"/{len(e['assigned_warmup'])}w"
            axis.plot([_time(e["record_timestamp"])], [y], "o", color="#c0392b" if moved else "#2c3e50", markersize=5)
            axis.annotate(label, (_time(e["record_timestamp"]), y), textcoords="offset points", xytext=(3, 5),
                          fontsize=7)
    for r in rebalances:
        end = _time(r["end_timestamp"])
        if r["start_timestamp"] is not None and end is not None:
            axis.axvspan(_time(r["start_timestamp"]), end, color="#f5b041", alpha=0.25)
        at = end or _time(r["start_timestamp"])
        if at is not None:
            axis.axvline(at, color="#d35400", linewidth=0.8, linestyle="--")
            note = f"{'gen' if r['protocol'] == 'classic' else 'epoch'} {r['epoch']}"
            if r["warmup_tasks"]:
                note += f", {r['warmup_tasks']} warm-up"
            if r["probing"]:
                note += ", probing"
            axis.annotate(note, (at, len(names) - 0.5), fontsize=7, rotation=90, va="top", color="#d35400")
    stamps = [m["record_timestamp"] for m in members] + [t for r in rebalances
                                                          for t in (r["start_timestamp"], r["end_timestamp"]) if t]
    if stamps:
        pad = max((max(stamps) - min(stamps)) * 0.05, 500)
        axis.set_xlim(_time(min(stamps) - pad), _time(max(stamps) + pad))
    axis.xaxis.set_major_formatter(ConciseDateFormatter(axis.xaxis.get_major_locator()))
    axis.set_yticks(range(len(names)), [n if len(n) <= 40 else n[:18] + "…" + n[-18:] for n in names], fontsize=7)
    axis.set_ylim(-1, max(len(names), 1))
    axis.set_title(f"{group}: members over time (dots: assignments a/s/w; red: active tasks moved in)", fontsize=9)
    axis.grid(axis="x", alpha=0.3)


def _figure(group: str, members: list[Row], rebalances: list[Row]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    height = 1.5 + 0.35 * len({m["member_id"] for m in members})
    fig, axis = plt.subplots(figsize=(11, min(height, 30)))
    _timeline(group, members, rebalances, axis)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('' if c is None else str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _latest_assignments(members: list[Row]) -> list[list[Any]]:
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
    return [[mid, (info.get(mid) or m)["process_id"], (info.get(mid) or m)["client_id"], m["generation"],
             " ".join(m["assigned_active"] or m["assigned_partitions"] or []), " ".join(m["assigned_standby"] or []),
             " ".join(m["assigned_warmup"] or [])] for mid, m in sorted(latest.items())]


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
    by_group: dict[str, list[Row]] = defaultdict(list)
    for m in members:
        by_group[m["group"]].append(m)
    names = sorted(g for g in by_group if groups is None or g in groups)
    pictures = {g: _figure(g, by_group[g], [r for r in rebalances if r["group"] == g]) for g in names}
    if target.suffix.lower() == ".png":
        if len(pictures) != 1:
            raise ValueError(f"a PNG holds one group's timeline; choose one with --group ({len(pictures)} found)")
        target.write_bytes(next(iter(pictures.values())))
        return names
    parts = ["<!doctype html><meta charset='utf-8'><title>kprotocol rebalance report</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px}h2{margin-top:2em}</style>",
             "<h1>Rebalance report</h1>"]
    for g in names:
        group_rebalances = sorted((r for r in rebalances if r["group"] == g),
                                  key=lambda r: (r["end_timestamp"] or r["start_timestamp"] or 0))
        image = base64.b64encode(pictures[g]).decode()
        parts += [f"<h2>{html.escape(g)}</h2>", f"<img src='data:image/png;base64,{image}'>", "<h3>Rebalances</h3>",
                  _table(["protocol", "epoch", "start", "end", "duration ms", "trigger", "members", "tasks moved",
                          "warm-ups", "probing"],
                         [[r["protocol"], r["epoch"], _time(r["start_timestamp"]), _time(r["end_timestamp"]),
                           r["duration_ms"], r["trigger"], len(r["members_after"] or []), r["tasks_moved"],
                           r["warmup_tasks"], r["probing"]] for r in group_rebalances]),
                  "<h3>Latest assignment</h3>",
                  _table(["member", "process", "client", "generation/epoch", "active", "standby", "warm-up"],
                         _latest_assignments(by_group[g])),
                  "<h3>Committed offsets</h3>",
                  _table(["topic", "partition", "offset", "committed at"],
                         _latest_offsets([o for o in offsets if o["group"] == g]))]
    target.write_text("\n".join(parts), encoding="utf-8")
    return names

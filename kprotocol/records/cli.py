"""`kprotocol offsets decode|state PATH...`: coordinator topic segments as JSON.

`decode` prints one JSON line per record (control markers included), `state` the groups'
rebuilt state. Both accept segment files and directories of segments, show a progress bar on
stderr for large inputs, list every problem at the end on stderr, and exit 1 if there was one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from kprotocol.coordinator import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE, decode_record
from kprotocol.coordinator.state import GroupStateBuilder
from kprotocol.errors import DecodeError
from kprotocol.records.control import decode_control
from kprotocol.records.model import RecordBatch
from kprotocol.records.segment import SegmentProblem, read_logs, segment_files
from kprotocol.tools.jsontext import dumps

PROGRESS_THRESHOLD = 8 * 1024 * 1024


def register(subparsers: argparse._SubParsersAction) -> None:
    offsets = subparsers.add_parser("offsets", help="decode __consumer_offsets (and other coordinator) segments")
    actions = offsets.add_subparsers(dest="action", required=True)
    decode = actions.add_parser("decode", help="one JSON line per record")
    decode.add_argument("--topic", default=CONSUMER_OFFSETS,
                        choices=[CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE])
    state = actions.add_parser("state", help="the latest state of every group, as JSON")
    for parser in (decode, state):
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="segment file or directory")
        parser.add_argument("--group", help="only this group")
        parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                            help="progress bar on stderr (default: for inputs over 8 MiB)")
    decode.set_defaults(func=lambda args: run_decode(args, sys.stdout, sys.stderr))
    state.set_defaults(func=lambda args: run_state(args, sys.stdout, sys.stderr))


def _batches(
    args: argparse.Namespace, problems: list[SegmentProblem], err: TextIO
) -> Iterator[tuple[Path, RecordBatch]]:
    total = sum(f.stat().st_size for p in args.paths for f in segment_files(p))
    show = total >= PROGRESS_THRESHOLD if args.progress is None else args.progress
    with tqdm(total=total, unit="B", unit_scale=True, disable=not show, file=err) as bar:
        for file, entry in read_logs(args.paths):
            if isinstance(entry, SegmentProblem):
                problems.append(entry)
                bar.update(entry.length)
            else:
                bar.update(entry.size)
                yield file, entry


def _group_of(decoded: dict[str, Any]) -> str | None:
    data = decoded["key"].get("data") or {}
    return data.get("group", data.get("groupId"))


def _record_problem(decoded: dict[str, Any]) -> str | None:
    for part in (decoded["key"], decoded["value"]):
        if part and ("error" in part or part.get("unknown")):
            return part.get("error") or "unknown record type or version"
    return None


def run_decode(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    problems: list[SegmentProblem] = []
    record_problems: list[str] = []
    for file, batch in _batches(args, problems, err):
        for record in batch.records:
            line: dict[str, Any] = {"segment": str(file), "offset": record.offset, "timestamp": record.timestamp}
            if batch.is_transactional:
                line["producerId"] = batch.producer_id
            if batch.is_control:
                if args.group:
                    continue
                try:
                    line["control"] = decode_control(record)
                except DecodeError as exc:
                    record_problems.append(f"{file}: control record at offset {record.offset}: {exc}")
                    line["control"] = {"error": str(exc)}
            elif record.key is None:
                record_problems.append(f"{file}: record at offset {record.offset} has no key")
                continue
            else:
                decoded = decode_record(record.key, record.value, topic=args.topic)
                if args.group and _group_of(decoded) != args.group:
                    continue
                problem = _record_problem(decoded)
                if problem:
                    record_problems.append(f"{file}: record at offset {record.offset}: {problem}")
                line.update(decoded)
            out.write(dumps(line) + "\n")
    return _summarize(problems, record_problems, err)


def run_state(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    problems: list[SegmentProblem] = []
    builder = GroupStateBuilder()
    for _, batch in _batches(args, problems, err):
        builder.apply_batch(batch)
    state = builder.to_dict()
    if args.group:
        state["groups"] = {g: v for g, v in state["groups"].items() if g == args.group}
        state["pendingTransactionalOffsets"] = [
            p for p in state["pendingTransactionalOffsets"] if p["group"] == args.group]
    state["segmentProblems"] = [p.to_dict() for p in problems]
    out.write(dumps(state, getattr(args, "indent", 2)) + "\n")
    return _summarize(problems, state["problems"], err)


def _summarize(problems: list[SegmentProblem], record_problems: list[str], err: TextIO) -> int:
    if not problems and not record_problems:
        return 0
    err.write(f"{len(problems)} segment problem(s), {len(record_problems)} record problem(s):\n")
    for problem in problems:
        err.write(f"  {problem.source} @{problem.position}: {problem.kind}, {problem.length} bytes skipped: "
                  f"{problem.message}\n")
    for message in record_problems:
        err.write(f"  {message}\n")
    return 1

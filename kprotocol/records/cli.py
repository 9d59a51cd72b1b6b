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

from kprotocol.coordinator import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE, decode_record, type_names
from kprotocol.coordinator.state import GroupStateBuilder
from kprotocol.errors import DecodeError
from kprotocol.records.control import decode_control
from kprotocol.records.model import RecordBatch
from kprotocol.records.segment import SegmentProblem, read_logs, segment_files
from kprotocol.tools.inputs import UsageError
from kprotocol.tools.tables import render
from kprotocol.tools.jsontext import dumps

PROGRESS_THRESHOLD = 8 * 1024 * 1024


def register(subparsers: argparse._SubParsersAction) -> None:
    offsets = subparsers.add_parser("offsets", help="decode __consumer_offsets (and other coordinator) segments")
    actions = offsets.add_subparsers(dest="action", required=True)
    decode = actions.add_parser("decode", help="one JSON line per record")
    decode.add_argument("--topic", default=CONSUMER_OFFSETS,
                        choices=[CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE])
    decode.add_argument("--type", action="append", metavar="NAME|NUMBER",
                        help="only this record type, e.g. GroupMetadata or 2 (repeatable)")
    decode.add_argument("--max-records", type=int, metavar="N", help="stop after N records")
    decode.add_argument("--pretty", action="store_true", help="indented JSON")
    state = actions.add_parser("state", help="the latest state of every group, as JSON (or a table)")
    state.add_argument("--format", choices=["json", "table"], default="json")
    state.add_argument("--pretty", action="store_true", help="indented JSON")
    for parser in (decode, state):
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                            help="segment file, partition directory, or a Kafka data directory (its TOPIC-N "
                                 "partitions are found)")
        parser.add_argument("--group", help="only this group")
        parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                            help="progress bar on stderr (default: on a terminal, for inputs over 8 MiB)")
    decode.set_defaults(func=lambda args: run_decode(args, sys.stdout, sys.stderr))
    state.set_defaults(func=lambda args: run_state(args, sys.stdout, sys.stderr))


def _batches(
    args: argparse.Namespace, problems: list[SegmentProblem], err: TextIO
) -> Iterator[tuple[Path, RecordBatch]]:
    topic = getattr(args, "topic", CONSUMER_OFFSETS)
    files = [f for p in args.paths for f in segment_files(p, topic)]
    if not files:
        raise UsageError(f"no {topic} segments under {', '.join(map(str, args.paths))}")
    total = sum(f.stat().st_size for f in files)
    terminal = hasattr(err, "isatty") and err.isatty()
    show = terminal and total >= PROGRESS_THRESHOLD if args.progress is None else args.progress
    with tqdm(total=total, unit="B", unit_scale=True, disable=not show, file=err) as bar:
        for file, entry in read_logs(files):
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


def _wanted_types(args: argparse.Namespace, names: dict[int, str]) -> set[int] | None:
    if not getattr(args, "type", None):
        return None
    by_name = {name.lower(): number for number, name in names.items()}
    wanted = set()
    for given in args.type:
        number = int(given) if given.lstrip("-").isdigit() else by_name.get(given.lower())
        if number is None or number not in names:
            raise UsageError(f"unknown record type {given!r} (known: {', '.join(f'{n} {t}' for t, n in sorted(names.items()))})")
        wanted.add(number)
    return wanted


def batch_fields(batch: RecordBatch) -> dict[str, Any]:
    """The batch a record sits in, as kafka-dump-log shows it."""
    return {"baseOffset": batch.base_offset, "lastOffset": batch.last_offset, "position": batch.byte_offset,
            "createTime": batch.max_timestamp, "size": batch.size, "compression": batch.compression.label,
            "crc": batch.crc, "isValid": True, "producerId": batch.producer_id, "producerEpoch": batch.producer_epoch,
            "partitionLeaderEpoch": batch.partition_leader_epoch, "isTransactional": batch.is_transactional,
            "isControl": batch.is_control}


def run_decode(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    problems: list[SegmentProblem] = []
    record_problems: list[str] = []
    names = type_names(args.topic)
    wanted = _wanted_types(args, names)
    limit = getattr(args, "max_records", None)
    indent = 2 if getattr(args, "pretty", False) else None
    written = 0
    for file, batch in _batches(args, problems, err):
        if limit is not None and written >= limit:
            break
        for record in batch.records:
            if limit is not None and written >= limit:
                break
            line: dict[str, Any] = {"segment": str(file), "offset": record.offset, "timestamp": record.timestamp,
                                    "batch": batch_fields(batch)}
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
                record_type = decoded["key"].get("type")
                if wanted is not None and record_type not in wanted:
                    continue
                line["recordType"] = names.get(record_type)
                problem = _record_problem(decoded)
                if problem:
                    record_problems.append(f"{file}: record at offset {record.offset}: {problem}")
                line.update(decoded)
            if batch.is_control and wanted is not None:
                continue
            out.write(dumps(line, indent) + "\n")
            written += 1
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
    if getattr(args, "format", "json") == "table":
        out.write(_state_table(state))
    else:
        out.write(dumps(state, 2 if getattr(args, "pretty", False) else None) + "\n")
    return _summarize(problems, state["problems"], err)


def _state_table(state: dict[str, Any]) -> str:
    """One row per group: its protocol, epoch or generation, members and committed offsets."""
    rows = []
    for group, doc in sorted(state["groups"].items()):
        kind = doc["type"]
        body = doc.get(kind) if isinstance(doc.get(kind), dict) else {}
        metadata = body.get("metadata") or {}
        epoch = metadata.get("epoch", metadata.get("generation"))
        members = body.get("members") or metadata.get("members") or {}
        offsets = doc.get("offsets") or {}
        partitions = sum(len(p) for p in offsets.values())
        rows.append((group, kind, epoch, len(members), len(offsets), partitions))
    return render(["group", "protocol", "epoch/generation", "members", "topics", "committed partitions"], rows,
                  numeric_from=2)


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

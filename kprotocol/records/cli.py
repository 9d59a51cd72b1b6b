"""`kprotocol offsets decode|state PATH...`: coordinator topic segments as JSON.

`decode` prints one compact JSON line per record (control markers included; `__consumer_offsets`
through the compiled path of kprotocol.coordinator.lines), `state` the groups'
rebuilt state. Both accept segment files and directories of segments, show a progress bar on
stderr for large inputs, list every problem at the end on stderr, and exit 1 if there was one.
"""

from __future__ import annotations

import argparse
import mmap
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from kprotocol.coordinator import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE, decode_record, lines, type_names
from kprotocol.coordinator.lines import compact, record_problem
from kprotocol.coordinator.state import GroupStateBuilder
from kprotocol.errors import DecodeError
from kprotocol.records.control import decode_control
from kprotocol.records.model import RecordBatch
from kprotocol.records.segment import SegmentProblem, read_logs, read_segment_bytes, segment_files
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


def _other_topic(path: Path) -> str | None:
    """The topic of a partition directory of a topic other than the coordinator topics (or of a segment
    in one), as Kafka names them: TOPIC-N holding 20-digit `.log` segments."""
    directory = path if path.is_dir() else path.parent
    name, _, number = directory.name.rpartition("-")
    if not name or not number.isdigit() or name in (CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE):
        return None
    logs = [path] if not path.is_dir() else list(path.glob("*.log"))
    return name if any(len(p.stem) == 20 and p.stem.isdigit() for p in logs) else None


def _segment_files(args: argparse.Namespace) -> list[Path]:
    topic = getattr(args, "topic", CONSUMER_OFFSETS)
    for path in args.paths:
        other = _other_topic(path)
        if other is not None:
            raise UsageError(f"{path}: a partition of topic {other!r}, not of a coordinator topic "
                             f"({CONSUMER_OFFSETS}, {TRANSACTION_STATE}, {SHARE_GROUP_STATE})")
    files = [f for p in args.paths for f in segment_files(p, topic)]
    if not files:
        raise UsageError(f"no {topic} segments under {', '.join(map(str, args.paths))}")
    return files


def _progress(args: argparse.Namespace, err: TextIO, total: int) -> tqdm:
    terminal = hasattr(err, "isatty") and err.isatty()
    show = terminal and total >= PROGRESS_THRESHOLD if args.progress is None else args.progress
    return tqdm(total=total, unit="B", unit_scale=True, disable=not show, file=err)


def _batches(
    args: argparse.Namespace, problems: list[SegmentProblem], err: TextIO
) -> Iterator[tuple[Path, RecordBatch]]:
    files = _segment_files(args)
    with _progress(args, err, sum(f.stat().st_size for f in files)) as bar:
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
    pretty = getattr(args, "pretty", False)
    if pretty:
        write = lambda doc: out.write(dumps(doc, 2) + "\n")  # noqa: E731
    else:
        sink = _LineSink(out)
        write = lambda doc: sink.write(compact(doc) + b"\n")  # noqa: E731
    if lines.ENABLED and not pretty and args.topic == CONSUMER_OFFSETS and not args.group and wanted is None:
        _decode_compiled(args, names, sink, write, problems, record_problems, limit, err)
    else:
        written = 0
        for file, batch in _batches(args, problems, err):
            written += _write_batch(file, batch, args, names, wanted, record_problems, write,
                                    None if limit is None else limit - written)
            if limit is not None and written >= limit:
                break
    if not pretty:
        sink.close()
    return _summarize(problems, record_problems, err)


def _write_batch(file: Path, batch: RecordBatch, args: argparse.Namespace, names: dict[int, str],
                 wanted: set[int] | None, record_problems: list[str], write: Any, limit: int | None) -> int:
    """Write the lines of a batch's records by the reference decoder; how many were written."""
    written = 0
    for record in batch.records:
        if limit is not None and written >= limit:
            break
        line: dict[str, Any] = {"segment": str(file), "offset": record.offset, "timestamp": record.timestamp,
                                "batch": batch_fields(batch)}
        if batch.is_transactional:
            line["producerId"] = batch.producer_id
        if batch.is_control:
            if args.group or wanted is not None:
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
            problem = record_problem(decoded)
            if problem:
                record_problems.append(f"{file}: record at offset {record.offset}: {problem}")
            line.update(decoded)
        write(line)
        written += 1
    return written


class _LineSink:
    """JSON lines as UTF-8 bytes, to the binary buffer under `out` when it has one."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.binary = getattr(out, "buffer", None)
        if self.binary is not None:
            out.flush()

    def write(self, data: bytes) -> None:
        if self.binary is not None:
            self.binary.write(data)
        else:
            self.out.write(data.decode())

    def close(self) -> None:
        if self.binary is not None:
            self.binary.flush()


def _decode_compiled(args: argparse.Namespace, names: dict[int, str], sink: _LineSink, write: Any,
                     problems: list[SegmentProblem], record_problems: list[str], limit: int | None,
                     err: TextIO) -> None:
    """`offsets decode` of __consumer_offsets through the compiled path; a batch it stops at is read by the
    Python reader (decoded by the reference decoder, or reported as a problem)."""
    files = _segment_files(args)
    compiled = lines.Lines(record_problems)
    written = 0
    with _progress(args, err, sum(f.stat().st_size for f in files)) as bar:
        for file in files:
            size = file.stat().st_size
            if not size:
                continue
            with file.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                head, pos = compiled.head(str(file)), 0
                while pos < size and (limit is None or written < limit):
                    chunk, at, count, stopped = compiled.decoder.lines(
                        data, pos, size, head, -1 if limit is None else limit - written)
                    sink.write(chunk)
                    written += count
                    if stopped:
                        entry = next(read_segment_bytes(data, str(file), start=at), None)
                        if entry is None:  # an all-zero tail
                            at = size
                        elif isinstance(entry, SegmentProblem):
                            problems.append(entry)
                            at = entry.position + entry.length
                        else:
                            written += _write_batch(file, entry, args, names, None, record_problems, write,
                                                    None if limit is None else limit - written)
                            at = entry.byte_offset + entry.size
                    bar.update(at - pos)
                    pos = at


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

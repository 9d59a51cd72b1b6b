"""`kprotocol offsets decode|state PATH...`: coordinator topic segments as JSON.

`decode` prints one compact JSON line per record (control markers included; `__consumer_offsets`
through the compiled path of kprotocol.coordinator_topics.lines), `state` the groups'
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

from kprotocol.coordinator_topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE, decode_record, lines, type_names
from kprotocol.coordinator_topics.lines import compact, record_problem
from kprotocol.coordinator_topics.state import GroupStateBuilder
from kprotocol.errors import DecodeError
from kprotocol.records.control import decode_control
from kprotocol.records.model import RecordBatch
from kprotocol.records.segment import SegmentProblem, read_logs, read_segment_bytes, segment_files
from kprotocol.tools.inputs import UsageError, count
from kprotocol.tools.tables import render
from kprotocol.tools.jsontext import dumps

PROGRESS_THRESHOLD = 8 * 1024 * 1024
COORDINATOR_TOPICS = (CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE)
CAPTURE_MAGIC = {b"\xd4\xc3\xb2\xa1": "pcap", b"\xa1\xb2\xc3\xd4": "pcap", b"\x4d\x3c\xb2\xa1": "pcap",
                 b"\xa1\xb2\x3c\x4d": "pcap", b"\x0a\x0d\x0d\x0a": "pcapng"}


def register(subparsers: argparse._SubParsersAction) -> None:
    offsets = subparsers.add_parser("offsets", help="decode __consumer_offsets (and other coordinator) segments")
    actions = offsets.add_subparsers(dest="action", required=True)
    decode = actions.add_parser("decode", help="one JSON line per record")
    decode.add_argument("--topic", choices=COORDINATOR_TOPICS,
                        help="the coordinator topic whose records the segments hold (default: the topic of each "
                             "TOPIC-N partition directory, else __consumer_offsets; a data directory: every "
                             "coordinator topic)")
    decode.add_argument("--type", action="append", metavar="NAME|NUMBER",
                        help="only this record type, e.g. GroupMetadata or 2 (repeatable)")
    decode.add_argument("-c", "--count", "--max-records", dest="max_records", type=count, metavar="N",
                        help="stop after N records (0: none)")
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


def coordinator_topic_of(file: Path, given: str | None) -> str:
    """The coordinator topic whose record types `file` holds: that of its TOPIC-N partition directory
    (as the pipeline reads it), else `given`, else __consumer_offsets. A --topic contradicting the
    directory is a UsageError."""
    name, _, number = file.parent.name.rpartition("-")
    if number.isdigit() and name in COORDINATOR_TOPICS:
        if given is not None and given != name:
            raise UsageError(f"{file}: a segment of {name}, not of --topic {given}")
        return name
    return given or CONSUMER_OFFSETS


def _check_segment(file: Path) -> None:
    """A file that cannot be a log segment (a capture, text...) is one line, exit 2, rather than
    megabytes of garbage records: its first batch header must have a sane length and magic byte
    (an all-zero start is left to the reader, which reports it as it reports preallocated tails)."""
    with file.open("rb") as handle:
        head = handle.read(17)
    if not head or not any(head):
        return
    kind = CAPTURE_MAGIC.get(head[:4])
    if kind is not None:
        raise UsageError(f"{file}: a {kind} capture, not a log segment (kprotocol capture decode reads it)")
    length = int.from_bytes(head[8:12], "big", signed=True) if len(head) >= 12 else -1
    if len(head) < 17 or length < 14 or head[16] > 2:
        raise UsageError(f"{file}: not a log segment (no record batch header at its start)")


def _segment_files(args: argparse.Namespace) -> list[tuple[Path, str]]:
    """(segment file, its coordinator topic) of every path given."""
    given = getattr(args, "topic", None)
    for path in args.paths:
        other = _other_topic(path)
        if other is not None:
            raise UsageError(f"{path}: a partition of topic {other!r}, not of a coordinator topic "
                             f"({CONSUMER_OFFSETS}, {TRANSACTION_STATE}, {SHARE_GROUP_STATE})")
    files = [(f, coordinator_topic_of(f, given)) for p in args.paths for f in segment_files(p, given)
             if given is not None or not f.parent.name.rpartition("-")[2].isdigit()
             or f.parent.name.rpartition("-")[0] in COORDINATOR_TOPICS]
    if not files:
        raise UsageError(f"no {given or 'coordinator topic'} segments under {', '.join(map(str, args.paths))}")
    for file, _ in files:
        _check_segment(file)
    return files


def _progress(args: argparse.Namespace, err: TextIO, total: int) -> tqdm:
    terminal = hasattr(err, "isatty") and err.isatty()
    show = terminal and total >= PROGRESS_THRESHOLD if args.progress is None else args.progress
    return tqdm(total=total, unit="B", unit_scale=True, disable=not show, file=err)


def _batches(
    args: argparse.Namespace, problems: list[SegmentProblem], err: TextIO, topic: str | None = None
) -> Iterator[tuple[Path, RecordBatch]]:
    """The batches of the segments given (of `topic` only, when given)."""
    files = [f for f, t in _segment_files(args) if topic is None or t == topic]
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


def _wanted_types(args: argparse.Namespace, names: dict[int, str], strict: bool = True) -> set[int] | None:
    """The record types --type names, as numbers of `names`; a name unknown there is a UsageError when
    `strict` (one topic read), else left out (another topic read has it)."""
    if not getattr(args, "type", None):
        return None
    by_name = {name.lower(): number for number, name in names.items()}
    wanted = set()
    for given in args.type:
        number = int(given) if given.lstrip("-").isdigit() else by_name.get(given.lower())
        if number is None or number not in names:
            if not strict:
                continue
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
    limit = getattr(args, "max_records", None)
    pretty = getattr(args, "pretty", False)
    if pretty:
        write = lambda doc: out.write(dumps(doc, 2) + "\n")  # noqa: E731
    else:
        sink = _LineSink(out)
        write = lambda doc: sink.write(compact(doc) + b"\n")  # noqa: E731
    files = _segment_files(args)
    topics = list(dict.fromkeys(t for _, t in files))
    if getattr(args, "type", None) and len(topics) > 1:  # every name must be known to one of the topics read
        known = {n.lower() for t in topics for n in type_names(t).values()}
        for given in args.type:
            if not given.lstrip("-").isdigit() and given.lower() not in known:
                _wanted_types(args, type_names(topics[0]))  # raises, naming the known types
    written = 0
    for topic in topics:
        if limit is not None and written >= limit:
            break
        wanted = _wanted_types(args, type_names(topic), strict=len(topics) == 1)
        if wanted is not None and not wanted:
            continue
        if lines.ENABLED and not pretty and topic == CONSUMER_OFFSETS and not args.group and wanted is None:
            written += _decode_compiled(args, [f for f, t in files if t == topic], sink, write, problems,
                                        record_problems, None if limit is None else limit - written, err)
            continue
        for file, batch in _batches(args, problems, err, topic):
            written += _write_batch(file, batch, args, topic, wanted, record_problems, write,
                                    None if limit is None else limit - written)
            if limit is not None and written >= limit:
                break
    if not pretty:
        sink.close()
    return _summarize(problems, record_problems, err)


def _write_batch(file: Path, batch: RecordBatch, args: argparse.Namespace, topic: str,
                 wanted: set[int] | None, record_problems: list[str], write: Any, limit: int | None) -> int:
    """Write the lines of a batch's records (of coordinator topic `topic`) by the reference decoder; how
    many were written."""
    names = type_names(topic)
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
            decoded = decode_record(record.key, record.value, topic=topic)
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


def _decode_compiled(args: argparse.Namespace, files: list[Path], sink: _LineSink, write: Any,
                     problems: list[SegmentProblem], record_problems: list[str], limit: int | None,
                     err: TextIO) -> int:
    """`offsets decode` of __consumer_offsets segments through the compiled path; a batch it stops at is read
    by the Python reader (decoded by the reference decoder, or reported as a problem). How many lines."""
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
                            written += _write_batch(file, entry, args, CONSUMER_OFFSETS, None, record_problems, write,
                                                    None if limit is None else limit - written)
                            at = entry.byte_offset + entry.size
                    bar.update(at - pos)
                    pos = at
    return written


def run_state(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    problems: list[SegmentProblem] = []
    builder = GroupStateBuilder()
    for _, batch in _batches(args, problems, err, CONSUMER_OFFSETS):
        builder.apply_batch(batch)
    state = builder.to_dict()
    if args.group and args.group not in state["groups"]:
        raise UsageError(f"no group {args.group!r} in these segments "
                         f"({len(state['groups'])} groups: {', '.join(sorted(state['groups'])[:5])}"
                         f"{', ...' if len(state['groups']) > 5 else ''})")
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

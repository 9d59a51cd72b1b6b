"""`kprotocol capture decode|summary FILE...`: Kafka exchanges out of pcap/pcapng captures.

`decode` writes one JSON line per exchange (ordered by connection, then request order);
`summary` prints a table per connection and API. Both report orphan responses and problems
(gaps, unframed bytes, damaged packets) on stderr and exit 1 when there was any; a capture with no
connection on the given ports gets a line naming the ports its Kafka requests go to.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson

from kprotocol.capture.decode import DEFAULT_PORTS, CaptureDecode, decode_capture
from kprotocol.capture.exchanges import Exchange, error_codes
from kprotocol.capture.files import CaptureError
from kprotocol.capture.parallel import Outcome, decode_blocks
from kprotocol.capture.segments import TcpSegment
from kprotocol.capture.walk import MAX_SHARES, Walk
from kprotocol.errors import error_name
from kprotocol.framing import decode_request
from kprotocol.registry import api_classes
from kprotocol.tools.gcmode import long_run_gc
from kprotocol.tools.inputs import count
from kprotocol.tools.jsontext import dumps


PARALLEL_FROM = 16 << 20


def parse_ports(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(p) for p in text.split(",") if p)
    except ValueError:
        raise argparse.ArgumentTypeError(f"ports must be numbers separated by commas, not {text!r}") from None
    if not ports or not all(0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"ports must be in 1..65535: {text!r}")
    return ports


def _positive(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_SHARES:
        raise argparse.ArgumentTypeError(f"a number of processes (1 to {MAX_SHARES}), not {text!r}")
    return int(text)


def _api(text: str) -> int:
    if text.isdigit():
        return int(text)
    names = {}
    for key in range(0, 200):
        try:
            names[api_classes(key)[0].__name__.removesuffix("Request").lower()] = key
        except KeyError:
            continue
    key = names.get(text.lower().removesuffix("request").removesuffix("response"))
    if key is None:
        raise argparse.ArgumentTypeError(f"unknown API {text!r} (a name such as Produce or JoinGroup, or a key)")
    return key


def register(subparsers: argparse._SubParsersAction) -> None:
    capture = subparsers.add_parser("capture", help="decode Kafka traffic in pcap/pcapng captures")
    actions = capture.add_subparsers(dest="action", required=True)
    decode = actions.add_parser("decode", help="one JSON line per request/response exchange")
    summary = actions.add_parser("summary", help="a table per connection and API")
    for parser in (decode, summary):
        parser.add_argument("files", nargs="+", type=Path, metavar="FILE",
                            help="a pcap or pcapng file, or - for standard input")
        parser.add_argument("--ports", type=parse_ports, default=DEFAULT_PORTS,
                            help="broker ports carrying Kafka, comma-separated (default 9092)")
        parser.add_argument("--detect", action="store_true",
                            help="also decode connections on other ports that start with a valid "
                                 "ApiVersions or Metadata exchange")
    decode.add_argument("--api", type=_api, action="append", metavar="NAME|KEY", help="only this API (repeatable)")
    decode.add_argument("--group", help="only exchanges about this group")
    decode.add_argument("-c", "--count", "--max-records", dest="count", type=count, metavar="N",
                        help="stop after N exchanges (0: none)")
    decode.add_argument("--pretty", action="store_true", help="indented JSON")
    decode.add_argument("--show-credentials", action="store_true",
                        help="print SASL logins' passwords, proofs and tokens (redacted by default)")
    decode.add_argument("-j", "--jobs", type=_positive, metavar="N",
                        help="processes decoding one capture, each its share of the connections (default: every core, "
                             "up to 4, for captures of 16 MB and more; the output is the same)")
    summary.add_argument("--format", choices=["table", "json"], default="table")
    summary.add_argument("--pretty", action="store_true", help="indented JSON (with --format json)")
    decode.set_defaults(func=lambda args: run_decode(args, sys.stdout, sys.stderr))
    summary.set_defaults(func=lambda args: run_summary(args, sys.stdout, sys.stderr))


def _check_files(files: list[Path]) -> None:
    for file in files:
        if file.is_dir():
            raise IsADirectoryError(f"{file} is a directory, not a capture file")
        if not file.exists():
            raise FileNotFoundError(f"{file}: no such file")


def kafka_request_ports(file: Path) -> Counter[int]:
    """Destination port -> TCP segments that hold one whole Kafka request (a size prefix covering the
    payload, a request header and body that decode): where Kafka runs in a capture. A port that sent
    as many such segments as it received is a client's, left out (a response may read as a request)."""
    ports: Counter[int] = Counter()
    sent: Counter[int] = Counter()
    with open(file, "rb", buffering=1 << 20) as stream:
        try:
            for item in Walk(stream, []):
                if isinstance(item, TcpSegment) and len(item.payload) >= 12 \
                        and int.from_bytes(item.payload[:4], "big") + 4 == len(item.payload):
                    try:
                        decode_request(item.payload)
                    except ValueError:
                        continue
                    ports[item.dport] += 1
                    sent[item.sport] += 1
        except CaptureError:
            pass
    return Counter({port: n for port, n in ports.items() if n > sent[port]})


def _hint(file: Path, args: argparse.Namespace, capture: CaptureDecode | Outcome, err: TextIO) -> None:
    """Packets, but nothing on the ports given: say so, with the ports that carry Kafka requests (tshark's
    "decode as")."""
    if capture.connections or not capture.packets:
        return
    given = f"port{'s' * (len(args.ports) > 1)} {','.join(map(str, args.ports))}"
    found = [port for port, _ in kafka_request_ports(file).most_common() if port not in args.ports]
    if found:
        seen = ", ".join(map(str, found[:8])) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
        err.write(f"kprotocol: {file}: no Kafka connection on {given}; Kafka requests go to "
                  f"port{'s' * (len(found) > 1)} {seen}: try --ports {','.join(map(str, found[:8]))}\n")
    else:
        err.write(f"kprotocol: {file}: no Kafka connection on {given}, and no Kafka request on any other port\n")


def _report(file: Path, capture: CaptureDecode | Outcome, err: TextIO) -> int:
    for orphan in capture.orphans:
        err.write(f"{file}: orphan response: {dumps(orphan.to_json())}\n")
    for problem in capture.problems:
        err.write(f"{file}: problem: {dumps(problem.to_json())}\n")
    return 1 if capture.problems or capture.orphans else 0


def _line_bytes(doc: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # a lone surrogate from a Java string: the escaping writer
        return (dumps(doc) + "\n").encode()


def _line(doc: dict[str, Any], pretty: bool) -> str:
    return dumps(doc, indent=2) + "\n" if pretty else _line_bytes(doc).decode()


def _jobs(args: argparse.Namespace, file: Path) -> int:
    """Processes for one file: `--jobs`, else every core (up to 4) for captures of 16 MB and more."""
    if args.detect or args.pretty:
        return 1
    if args.jobs is not None:
        return args.jobs
    return min(os.cpu_count() or 1, 4) if file.stat().st_size >= PARALLEL_FROM else 1


STDIN = Path("-")


@contextlib.contextmanager
def _stdin_spooled(args: argparse.Namespace) -> Iterator[None]:
    """`-` among the files: standard input, copied to a private temporary file first (a capture is read
    by position: its blocks, and by -j processes), removed afterwards."""
    if STDIN not in args.files:
        yield
        return
    if args.files.count(STDIN) > 1:
        from kprotocol.tools.inputs import UsageError

        raise UsageError("standard input (-) can be given once")
    with tempfile.NamedTemporaryFile(prefix="kprotocol-stdin-", suffix=".pcap") as spool:
        shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
        spool.flush()
        given = args.files
        args.files = [Path(spool.name) if f == STDIN else f for f in given]
        try:
            yield
        finally:
            args.files = given


def run_decode(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with long_run_gc(), _stdin_spooled(args):  # forked -j processes inherit the collector's mode
        return _decode(args, out, err)


def _decode(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _check_files(args.files)
    apis = set(args.api or ())

    def wanted(exchange: Exchange) -> bool:
        return (not apis or exchange.api_key in apis) and (args.group is None or args.group in exchange.group_ids())

    show = getattr(args, "show_credentials", False)

    def line(exchange: Exchange) -> str | None:
        return _line(exchange.to_json(credentials=show), args.pretty) if wanted(exchange) else None

    def line_bytes(exchange: Exchange) -> bytes | None:
        return _line_bytes(exchange.to_json(credentials=show)) if wanted(exchange) else None

    written, status = 0, 0
    for file in args.files:
        jobs = _jobs(args, file)
        if jobs > 1:
            outcome = Outcome()
            out.flush()
            blocks = decode_blocks(file, args.ports, jobs, line_bytes, outcome)
            sink = _fileno(out) if args.count is None else None
            for span in blocks:
                if sink is not None:
                    span.send(sink)
                    continue
                block = span.read()
                if args.count is not None and written + block.count(b"\n") >= args.count:
                    cut = -1
                    for _ in range(args.count - written):
                        cut = block.index(b"\n", cut + 1)
                    _write_bytes(out, block[:cut + 1])
                    blocks.close()
                    return status
                _write_bytes(out, block)
                written += block.count(b"\n") if args.count is not None else 0
            _hint(file, args, outcome, err)
            status |= _report(file, outcome, err)
            continue
        capture = decode_capture(file, args.ports, detect=args.detect)
        for exchange in capture:
            if args.count is not None and written >= args.count:
                return status
            if (text := line(exchange)) is None:
                continue
            out.write(text)
            written += 1
            if args.count is not None and written >= args.count:
                return status
        _hint(file, args, capture, err)
        status |= _report(file, capture, err)
    return status


def _fileno(out: TextIO) -> int | None:
    """The file descriptor behind `out` (flushed), for writing to it directly; None if it has none."""
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # e.g. an io.StringIO
        return None
    out.flush()
    return fd


def _write_bytes(out: TextIO, data: bytes) -> None:
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        buffer.write(data)
    else:
        out.write(data.decode())


@dataclass
class _Row:
    count: int = 0
    versions: set[int] = field(default_factory=set)
    errors: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    latencies: list[float] = field(default_factory=list)
    request_bytes: int = 0
    response_bytes: int = 0
    no_response: int = 0


def _add(row: _Row, exchange: Exchange) -> None:
    row.count += 1
    row.versions.add(exchange.api_version)
    row.request_bytes += exchange.request_frame.size + 4
    if exchange.response_frame is not None:
        row.response_bytes += exchange.response_frame.size + 4
        row.latencies.append(exchange.response_frame.time - exchange.request_frame.time)
    else:
        row.no_response += 1
    if exchange.response is not None:
        error_codes(exchange.response, row.errors)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary_json(file: Path, rows: dict[tuple[str, str], _Row], capture: CaptureDecode) -> dict[str, Any]:
    return {"file": str(file), "packets": capture.packets, "connections": capture.connections,
            "orphans": len(capture.orphans), "problems": len(capture.problems),
            "rows": [{"conn": conn, "api": api, "count": r.count, "versions": sorted(r.versions),
                      "errorCodes": {str(k): v for k, v in sorted(r.errors.items())},
                      "errorNames": {str(k): error_name(k) for k in sorted(r.errors)},
                      "latencyMs": {name: None if (v := _percentile(r.latencies, q)) is None else round(v * 1000, 3)
                                    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))},
                      "noResponse": r.no_response, "requestBytes": r.request_bytes,
                      "responseBytes": r.response_bytes}
                     for (conn, api), r in rows.items()]}


def _table(doc: dict[str, Any]) -> str:
    header = ["conn", "api", "count", "versions", "errors", "p50 ms", "p99 ms", "max ms", "no resp", "req B", "resp B"]
    lines = [header]
    for row in doc["rows"]:
        lat = row["latencyMs"]
        lines.append([row["conn"], row["api"], str(row["count"]), ",".join(map(str, row["versions"])),
                      " ".join(f"{row['errorNames'][k]}({k})x{v}" for k, v in row["errorCodes"].items()) or "-",
                      *("-" if lat[k] is None else f"{lat[k]:.3f}" for k in ("p50", "p99", "max")),
                      str(row["noResponse"]), str(row["requestBytes"]), str(row["responseBytes"])])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = "\n".join("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
                     for line in lines)
    return (f"{doc['file']}: {doc['packets']} packets, {doc['connections']} Kafka connections, "
            f"{doc['orphans']} orphan responses, {doc['problems']} problems\n{text}\n")


def run_summary(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    with long_run_gc(), _stdin_spooled(args):
        return _summary(args, out, err)


def _summary(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _check_files(args.files)
    status = 0
    for file in args.files:
        capture = decode_capture(file, args.ports, detect=args.detect)
        rows: dict[tuple[str, str], _Row] = defaultdict(_Row)
        for exchange in capture:
            _add(rows[(exchange.conn, exchange.api_name or str(exchange.api_key))], exchange)
        doc = _summary_json(file, rows, capture)
        out.write(dumps(doc, 2 if args.pretty else None) + "\n" if args.format == "json" else _table(doc))
        _hint(file, args, capture, err)
        status |= _report(file, capture, err)
    return status

"""`kprotocol frames decode CLIENT SERVER`: the exchanges of one Kafka connection's two byte streams.

The streams are framed and paired as captures are (`kprotocol.capture.exchanges`): a bad or lost
size prefix is skipped by resynchronising on the next frame that decodes, responses are paired
with their requests by correlation id, and each exchange is printed as soon as it is complete.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from kprotocol.capture.exchanges import Connection, Exchange, Orphan, StreamProblem
from kprotocol.tools.jsontext import dumps

CHUNK = 1 << 20
CAPTURE_ONLY = ("requestFrames", "responseFrames", "requestTime", "responseTime")


def _document(exchange: Exchange, credentials: bool = False) -> dict[str, Any]:
    doc = {k: v for k, v in exchange.to_json(credentials=credentials).items()
           if k not in CAPTURE_ONLY and k != "conn"}
    doc["requestOffset"] = exchange.request_frame.offset
    if exchange.response_frame is not None:
        doc["responseOffset"] = exchange.response_frame.offset
    return doc


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while data := stream.read(CHUNK):
            yield data


def decode_streams(client: Iterable[bytes], server: Iterable[bytes],
                   credentials: bool = False) -> Iterator[dict[str, Any]]:
    """One JSON document per exchange (and per problem), in request order, as they complete; each
    stream is given as the chunks of its bytes, the client's first. SASL credentials are redacted
    unless `credentials`."""
    connection = Connection(("client", 0), ("server", 0), 0, synced=True)
    for from_client, chunks in ((True, client), (False, server)):
        offset = 0
        for data in chunks:
            yield from (_document(e, credentials) for e in connection.stream_bytes(from_client, offset, data))
            offset += len(data)
    yield from (_document(e, credentials) for e in connection.finish())
    for orphan in connection.orphans:
        yield {"error": f"response with correlation id {orphan.correlation_id} has no request",
               "responseOffset": orphan.frame.offset, "responseSize": orphan.frame.size, **_repeats(orphan)}
    for problem in connection.problems:
        yield {"error": f"{problem.direction} stream: {problem.length} bytes {problem.reason}",
               f"{problem.direction}Offset": problem.offset, **_repeats(problem)}


def _repeats(item: Orphan | StreamProblem) -> dict[str, int]:
    """How many problems of this kind one line stands for, and where the last one was (when more than one)."""
    return {"count": item.count, "lastOffset": item.last_offset} if item.count > 1 else {}


def run(client: Path, server: Path, out: IO[str], pretty: bool = False, credentials: bool = False) -> int:
    bad = 0
    for doc in decode_streams(_chunks(client), _chunks(server), credentials):
        bad += "error" in doc or "requestError" in doc or "responseError" in doc
        out.write(dumps(doc, 2 if pretty else None) + "\n")
    if bad:
        print(f"kprotocol: {bad} frame(s) or stretches could not be decoded (see the lines with an error)",
              file=sys.stderr)
    return 1 if bad else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    frames = subparsers.add_parser("frames", help="decode Kafka request/response byte streams")
    actions = frames.add_subparsers(dest="action", required=True)
    decode = actions.add_parser("decode", help="one connection's client and server byte streams -> exchanges")
    decode.add_argument("client", type=Path, help="bytes the client sent (size-prefixed requests)")
    decode.add_argument("server", type=Path, help="bytes the broker sent (size-prefixed responses)")
    decode.add_argument("--pretty", action="store_true", help="indented JSON")
    decode.add_argument("--show-credentials", action="store_true",
                        help="print SASL logins' passwords, proofs and tokens (redacted by default)")
    decode.set_defaults(func=lambda args: run(args.client, args.server, sys.stdout, args.pretty,
                                              args.show_credentials))

"""`kprotocol frames decode CLIENT SERVER`: decode the two byte streams of one Kafka connection."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, Any, Iterator

from kprotocol.conversation import Conversation
from kprotocol.tools.jsontext import dumps


def decode_streams(client: bytes, server: bytes) -> Iterator[dict[str, Any]]:
    """JSON documents for every request, then every response, of one connection."""
    conv = Conversation()
    events = conv.client_bytes(client) + conv.server_bytes(server)
    yield from (event.to_json() for event in events)
    for direction, reader in (("request", conv.client), ("response", conv.server)):
        if reader.pending:
            yield {"direction": direction, "offset": reader.offset, "error": f"{reader.pending} bytes of an incomplete frame at the end"}


def run(client: Path, server: Path, out: IO[str]) -> int:
    bad = 0
    for doc in decode_streams(client.read_bytes(), server.read_bytes()):
        bad += "error" in doc
        out.write(dumps(doc) + "\n")
    if bad:
        print(f"{bad} frame(s) could not be decoded", file=sys.stderr)
    return 1 if bad else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    frames = subparsers.add_parser("frames", help="decode Kafka request/response byte streams")
    actions = frames.add_subparsers(dest="action", required=True)
    decode = actions.add_parser("decode", help="decode one connection's client and server byte streams")
    decode.add_argument("client", type=Path, help="bytes the client sent (size-prefixed requests)")
    decode.add_argument("server", type=Path, help="bytes the broker sent (size-prefixed responses)")
    decode.set_defaults(func=lambda args: run(args.client, args.server, sys.stdout))




"""`kprotocol message decode|encode`: one message body between hex and Kafka's JSON shape."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kprotocol.errors import DecodeError, EncodeError
from kprotocol.registry import message_class
from kprotocol.tools.jsontext import dumps


def read_arg(value: str) -> str:
    """A literal argument, `@path` for a file's contents, or `-` for standard input."""
    if value == "-":
        return sys.stdin.read()
    if value.startswith("@"):
        return Path(value[1:]).read_text(encoding="utf-8")
    return value


def decode(args: argparse.Namespace) -> int:
    cls = message_class(args.name)
    try:
        data = bytes.fromhex("".join(read_arg(args.hex).split()))
        doc = cls.decode(data, args.version).to_json(args.version)
    except (DecodeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(dumps(doc, 2 if args.pretty else None))
    return 0


def encode(args: argparse.Namespace) -> int:
    cls = message_class(args.name)
    try:
        print(cls.from_json(json.loads(read_arg(args.json)), args.version).encode(args.version).hex())
    except (EncodeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    message = subparsers.add_parser("message", help="decode or encode one message body")
    actions = message.add_subparsers(dest="action", required=True)
    dec = actions.add_parser("decode", help="hex body -> JSON")
    dec.add_argument("name", help="spec name, e.g. JoinGroupRequest")
    dec.add_argument("version", type=int)
    dec.add_argument("hex", help="hex bytes, @file or - for stdin")
    dec.add_argument("--pretty", action="store_true")
    dec.set_defaults(func=decode)
    enc = actions.add_parser("encode", help="JSON -> hex body")
    enc.add_argument("name")
    enc.add_argument("version", type=int)
    enc.add_argument("json", help="JSON text, @file or - for stdin")
    enc.set_defaults(func=encode)

"""`kprotocol streams-userdata decode HEX|@file`: decode a Kafka Streams SubscriptionInfo/AssignmentInfo."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kprotocol.errors import DecodeError
from kprotocol.streams.assignment import AssignmentInfo
from kprotocol.streams.model import LATEST_SUPPORTED_VERSION
from kprotocol.streams.subscription import SubscriptionInfo
from kprotocol.tools.inputs import read_payload
from kprotocol.tools.jsontext import dumps

KINDS: dict[str, type[SubscriptionInfo] | type[AssignmentInfo]] = {
    "subscription": SubscriptionInfo,
    "assignment": AssignmentInfo,
}


def describe(info: SubscriptionInfo | AssignmentInfo, detected: bool) -> dict[str, Any]:
    layout = info.layout_version
    return {
        "kind": type(info).__name__,
        "detected": detected,
        "version": info.version,
        "layoutVersion": layout if layout is not None else "probe-header",
        "fields": info.to_fields(),
    }


MAX_PLAUSIBLE_VERSION = 1000  # a probing member's future version; random bytes land below it 1 time in 4 million


def unknown_version(data: bytes, kinds: list[str]) -> str | None:
    """Why bytes are not userdata at all: both kinds begin with the version they were written in, and
    any 8 bytes read as a version-probing header of some future version, so that version must be near
    the ones Kafka Streams has (the supported version after it may be anything: Kafka's own edge cases
    send Integer.MAX_VALUE). Checked before any field is read, instead of a bound read from garbage."""
    if len(data) < 4:
        return None
    used = int.from_bytes(data[:4], "big", signed=True)
    if 1 <= used <= MAX_PLAUSIBLE_VERSION:
        return None
    names = " or ".join(KINDS[name].__name__ for name in kinds)
    return f"the version read ({used}) is not a known {names} version (1..{LATEST_SUPPORTED_VERSION})"


def decode(data: bytes, kind: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    """The JSON document of the first kind that decodes plausibly, and why the others did not."""
    kinds = [kind] if kind else list(KINDS)
    if (reason := unknown_version(data, kinds)) is not None:
        return None, [reason]
    errors = []
    for name in kinds:
        try:
            return describe(KINDS[name].decode(data), kind is None), errors
        except DecodeError as exc:
            errors.append(f"{KINDS[name].__name__}: {exc}")
    return None, errors


def run(args: argparse.Namespace) -> int:
    doc, errors = decode(read_payload(args.data), args.kind)
    if doc is None:
        print("kprotocol: not Kafka Streams userdata: " + "; ".join(errors), file=sys.stderr)
        return 1
    print(dumps(doc, 2 if args.pretty else None))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("streams-userdata", help="decode Kafka Streams rebalance userdata")
    actions = parser.add_subparsers(dest="action", required=True)
    decode_parser = actions.add_parser("decode", help="decode a SubscriptionInfo or AssignmentInfo")
    decode_parser.add_argument("data", metavar="PAYLOAD", help="hex or base64 bytes, @file (raw, hex or base64) or - for stdin")
    decode_parser.add_argument(
        "--kind", choices=sorted(KINDS), help="what the bytes are (default: try subscription, then assignment)"
    )
    decode_parser.add_argument("--pretty", action="store_true", help="indented JSON")
    decode_parser.set_defaults(func=run)

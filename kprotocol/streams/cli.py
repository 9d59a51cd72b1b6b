"""`kprotocol streams-userdata decode HEX|@file`: decode a Kafka Streams SubscriptionInfo/AssignmentInfo."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kprotocol.errors import DecodeError
from kprotocol.streams.assignment import AssignmentInfo
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


def implausible(info: SubscriptionInfo | AssignmentInfo) -> str | None:
    """Why decoded bytes are not believable userdata: any 8 bytes read as a version-probing header of
    some future version, so the used version must be near the ones Kafka Streams has (the supported
    version may be anything: Kafka's own edge cases send Integer.MAX_VALUE)."""
    if not 1 <= info.version <= MAX_PLAUSIBLE_VERSION:
        return f"version {info.version} is not a plausible Kafka Streams version (1-{MAX_PLAUSIBLE_VERSION})"
    return None


def decode(data: bytes, kind: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    """The JSON document of the first kind that decodes plausibly, and why the others did not."""
    errors = []
    for name in [kind] if kind else list(KINDS):
        try:
            info = KINDS[name].decode(data)
        except DecodeError as exc:
            errors.append(f"{KINDS[name].__name__}: {exc}")
            continue
        reason = implausible(info)
        if reason is None:
            return describe(info, kind is None), errors
        errors.append(f"{KINDS[name].__name__}: {reason}")
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

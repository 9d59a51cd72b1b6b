"""`kprotocol message decode|encode|list`: one message body between bytes and Kafka's JSON shape,
and the list of every message kprotocol knows."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kprotocol.errors import DecodeError, EncodeError
from kprotocol.registry import message_class, spec_names
from kprotocol.tools.inputs import UsageError, checked_version, message_type, read_payload, read_text
from kprotocol.tools.jsontext import dumps


def decode(args: argparse.Namespace) -> int:
    cls = message_type(args.name)
    version = checked_version(cls, args.version)
    data = read_payload(args.hex)
    try:
        doc = cls.decode(data, version).to_json(version)
    except DecodeError as exc:
        print(f"kprotocol: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(dumps(doc, 2 if args.pretty else None))
    return 0


def encode(args: argparse.Namespace) -> int:
    cls = message_type(args.name)
    version = checked_version(cls, args.version)
    try:
        doc = json.loads(read_text(args.json))
    except json.JSONDecodeError as exc:
        raise UsageError(f"not JSON: {exc}") from None
    try:
        print(cls.from_json(with_defaults(cls, doc, version), version).encode(version).hex())
    except (EncodeError, ValueError) as exc:
        print(f"kprotocol: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def with_defaults(cls: type, doc: Any, version: int) -> Any:
    """`doc` with every field it leaves out at the spec's default (nested structs and struct arrays too);
    what it gives is kept as given, for the codec to judge."""
    from kprotocol.runtime.json_codec import struct_to_json

    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    defaults = struct_to_json(cls(), version)
    for f in cls._spec:
        if not f.present(version) or f.tagged_at(version) and f.json_name not in doc:
            continue
        if f.json_name not in doc:
            out[f.json_name] = defaults.get(f.json_name)
        elif f.type == "struct" and isinstance(doc[f.json_name], dict):
            out[f.json_name] = with_defaults(f.struct, doc[f.json_name], version)
        elif f.type == "array" and f.element == "struct" and isinstance(doc[f.json_name], list):
            out[f.json_name] = [with_defaults(f.struct, x, version) for x in doc[f.json_name]]
    return out


def list_messages(args: argparse.Namespace) -> int:
    rows = []
    for name in spec_names():
        cls = message_class(name)
        rows.append({"name": name, "type": cls.spec_type, "apiKey": cls.api_key,
                     "validVersions": list(cls.valid_versions),
                     "flexibleVersions": list(cls.flexible_versions) if cls.flexible_versions else None})
    if args.format == "table":
        print(f"{'name':<48} {'type':<18} {'key':>4} {'versions':>9} {'flexible':>9}")
        for r in rows:
            flexible = "-" if r["flexibleVersions"] is None else f"{r['flexibleVersions'][0]}+"
            key = "-" if r["apiKey"] is None else str(r["apiKey"])
            print(f"{r['name']:<48} {r['type']:<18} {key:>4} {'{}-{}'.format(*r['validVersions']):>9} {flexible:>9}")
    else:
        for r in rows:
            print(dumps(r))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    message = subparsers.add_parser("message", help="decode or encode one message body")
    actions = message.add_subparsers(dest="action", required=True)
    dec = actions.add_parser("decode", help="hex body -> JSON")
    dec.add_argument("name", help="spec name, e.g. JoinGroupRequest")
    dec.add_argument("version", type=int)
    dec.add_argument("hex", metavar="PAYLOAD", help="hex or base64 bytes, @file or - for stdin")
    dec.add_argument("--pretty", action="store_true")
    dec.set_defaults(func=decode)
    enc = actions.add_parser("encode", help="JSON -> hex body")
    enc.add_argument("name")
    enc.add_argument("version", type=int)
    enc.add_argument("json", help="JSON text, @file or - for stdin; fields left out take the spec's defaults")
    enc.set_defaults(func=encode)
    listing = actions.add_parser("list", help="every message: name, type, api key, versions")
    listing.add_argument("--format", choices=["json", "table"], default="json")
    listing.set_defaults(func=list_messages)

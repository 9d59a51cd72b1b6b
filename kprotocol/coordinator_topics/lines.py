"""`__consumer_offsets` segments to compact JSON lines through the compiled path (`_offsets.c`).

The compiled Decoder writes each record exactly as the reference path would (`decode_record` plus
the line fields of `kprotocol offsets decode`, serialised by orjson), from JSON plans built here from
the generated classes' field schemas. What it does not take goes back to Python: a record to
`decode_record` (through `Lines.tail`), a batch to the segment reader (`Decoder.lines` stops there).
`Decoder.columns` writes the pipeline's records and offsets_committed tables the same way, into
Arrow column buffers (`Columns`; kprotocol.pipeline.offsets_rows).

    lines = Lines(record_problems)
    chunk, pos, written, stopped = lines.decoder.lines(mapped, 0, len(mapped), lines.head(path), -1)
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

import orjson

from kprotocol.coordinator_topics.decode import (
    EARLIER_LAYOUTS,
    GROUP_METADATA,
    LEGACY_OFFSET_COMMIT,
    OFFSET_COMMIT,
    decode_record,
)
from kprotocol.coordinator_topics.record_types import CONSUMER_OFFSETS, record_types, type_names
from kprotocol.records.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from kprotocol.records.reader import DEFAULT_MAX_RECORDS
from kprotocol.registry import message_class
from kprotocol.runtime.struct import INHERIT, Field, Struct

try:
    if os.environ.get("KPROTOCOL_PURE_PYTHON"):
        raise ImportError("disabled by KPROTOCOL_PURE_PYTHON")
    from kprotocol.coordinator_topics import _offsets
except ImportError:  # the extension was not built (or is turned off): callers use the Python path
    _offsets = None  # type: ignore[assignment]

ENABLED = _offsets is not None
KINDS = {"bool": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "uint16": 5, "uint32": 6, "uuid": 7,
         "string": 8, "bytes": 9, "struct": 10}
D_INT, D_BYTES, D_NULL, D_EMPTY, D_OTHER = range(5)
# Top-level values the compiled path remembers per record (slots of `Capture` in _offsets.c).
KEY_CAPTURES = {"group": 0, "groupId": 0, "topic": 1, "partition": 2}
COMMIT_CAPTURES = {"offset": 3, "leaderEpoch": 4, "metadata": 5, "commitTimestamp": 6, "expireTimestamp": 7}
GROUP_CAPTURES = {"protocolType": 8, "protocol": 9}
# Classic members' consumer-protocol payloads, decoded beside their base64 (`decoded<Field>`), with their
# Kafka Streams userdata (protocol "stream"): in C, or by `_nested` when anything is unusual.
HOOKS = {"subscription": 1, "assignment": 2}
NESTED_CAPTURES = {"userData": 10}  # CAP_USER_DATA: the Streams userdata inside a payload


class Unsupported(Exception):
    """A struct the compiled path does not take (its records go to the Python path)."""


def compact(doc: Any) -> bytes:
    """`doc` as compact JSON: orjson, or the standard library for a lone surrogate (from a Java string)."""
    try:
        return orjson.dumps(doc)
    except TypeError:
        return json.dumps(doc, separators=(",", ":")).encode()


def _default(f: Field) -> tuple[int, Any]:
    """How the compiled path compares a tagged field with its default."""
    value = f.default
    if f.type == "array":
        return (D_EMPTY, None) if value == () else (D_NULL, None) if value is None else (D_OTHER, None)
    if value is None:
        return D_NULL, None
    if f.type == "struct":
        return D_OTHER, None
    if f.type == "uuid":
        return D_BYTES, value.bytes
    if f.type == "string":
        return D_BYTES, value.encode()
    if f.type == "bytes":
        return D_BYTES, bytes(value)
    if f.type in KINDS:
        return D_INT, int(value)
    return D_OTHER, None


def plan(cls: type[Struct], version: int, flexible: bool, captures: dict[str, int] | None = None,
         hooks: dict[str, int] | None = None) -> Any:
    """The compiled JSON plan of `cls` at `version` (Kafka's JSON shape, as `to_json` writes it): regular fields
    in spec order, then tagged ones; a tagged field the spec puts before a regular one is "early" (the
    compiled path takes it only at its default, which `to_json` leaves out)."""
    regular, tagged_fields = [], []
    for f in cls._spec:
        if not f.present(version):
            continue
        if f.flexible is not INHERIT:
            raise Unsupported(f"{cls.__name__}.{f.json_name} has its own flexible versions")
        tagged = f.tagged_at(version)
        if tagged and not flexible:
            raise Unsupported(f"{cls.__name__}.{f.json_name} is tagged in a version that is not flexible")
        kind = f.element if f.type == "array" else f.type
        if kind not in KINDS:
            raise Unsupported(f"{cls.__name__}.{f.json_name} is {kind}")
        sub = plan(f.struct, version, flexible, None, hooks) if kind == "struct" else None
        dkind, default = _default(f) if tagged else (D_OTHER, None)
        capture = (captures or {}).get(f.json_name, -1) if f.type not in ("array", "struct") else -1
        hook = (hooks or {}).get(f.json_name, 0) if f.type == "bytes" else 0
        hook_key = b"," + orjson.dumps("decoded" + f.json_name[:1].upper() + f.json_name[1:]) + b":" if hook else b""
        field = [orjson.dumps(f.json_name) + b":", KINDS[kind], f.type == "array", f.nullable_at(version),
                 f.tag if tagged else -1, dkind, default, sub, capture, hook, hook_key, False]
        if tagged:
            tagged_fields.append(field)
        else:
            for early in tagged_fields:
                early[-1] = True
            regular.append(field)
    return _offsets.Plan(flexible, tuple(map(tuple, regular + tagged_fields)))


def _flexible(cls: Any, version: int) -> bool:
    low_high = cls.flexible_versions
    return low_high is not None and low_high[0] <= version <= low_high[1]


@cache
def record_plans() -> dict[int, tuple[Any, ...]]:
    """Record type -> (key plan, {value version: plan}, the line's JSON up to the key, the type's name) for
    every type of `__consumer_offsets` the compiled path takes; plus ({version: plan}, `,"layout":"..."`)
    of the layout Kafka changed in place (EARLIER_LAYOUTS) where it has one."""
    types = record_types(CONSUMER_OFFSETS)
    names = type_names(CONSUMER_OFFSETS)
    out = {}
    for type_id, record_type in types.items():
        captures = COMMIT_CAPTURES if type_id in (LEGACY_OFFSET_COMMIT, OFFSET_COMMIT) else \
            GROUP_CAPTURES if type_id == GROUP_METADATA else None
        hooks = HOOKS if type_id == GROUP_METADATA else None
        try:
            key = plan(record_type.key, record_type.key_version, _flexible(record_type.key, record_type.key_version),
                       KEY_CAPTURES)
            values = {}
            classes = [record_type.value]
            if type_id == LEGACY_OFFSET_COMMIT:  # old brokers pair type-0 keys with any commit value version
                classes.append(types[OFFSET_COMMIT].value)
            for cls in classes:
                low, high = cls.valid_versions
                for version in range(low, high + 1):
                    if version not in values:
                        values[version] = plan(cls, version, _flexible(cls, version), captures, hooks)
        except Unsupported:
            continue
        out[type_id] = (key, values, b'"recordType":' + orjson.dumps(names[type_id]) + b',"key":', names[type_id],
                        *_earlier_plans(record_type.value, values, captures, hooks))
    return out


def _earlier_plans(cls: Any, values: dict[int, Any], captures: dict[str, int] | None,
                   hooks: dict[str, int] | None) -> tuple[Any, ...]:
    """({version: plan}, `,"layout":"<spec>"`) of the layout before an in-place change of `cls`, or ()."""
    name = EARLIER_LAYOUTS.get(cls.__name__)
    if name is None:
        return ()
    earlier = message_class(name)
    low, high = earlier.valid_versions
    try:
        plans = {v: plan(earlier, v, _flexible(earlier, v), captures, hooks) for v in range(low, high + 1) if v in values}
    except Unsupported:
        return ()
    return plans, b',"layout":' + orjson.dumps(name)


@cache
def nested_plans() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Plans of the consumer-protocol subscription and assignment, versions 0 to the latest (none when
    the compiled path does not take them: the Python hook decodes every payload then)."""
    out = []
    for name in ("ConsumerProtocolSubscription", "ConsumerProtocolAssignment"):
        cls = message_class(name)
        try:
            out.append(tuple(plan(cls, v, _flexible(cls, v), NESTED_CAPTURES) for v in range(cls.valid_versions[1] + 1)))
        except Unsupported:
            out.append(())
    return out[0], out[1]


def _nested(which: int, protocol: str, payload: bytes) -> bytes | None:
    """`decoded<Field>` of a classic member's payload, as `decode_record` attaches it."""
    from kprotocol.group_payloads import attach  # with the Streams userdata decoders: only when needed
    from kprotocol.streams.nested import CONSUMER_PROTOCOL_TYPE, decode_member_assignment, decode_member_metadata

    field, decoder = ("subscription", decode_member_metadata) if which == 1 else ("assignment", decode_member_assignment)
    holder: dict[str, Any] = {}
    attach(holder, field, payload, decoder, (CONSUMER_PROTOCOL_TYPE, protocol))
    return compact(next(iter(holder.values()))) if holder else None


def _decompress(codec: int, payload: bytes) -> bytes:
    return decompress(codec, payload, DEFAULT_MAX_DECOMPRESSED)


def record_problem(decoded: dict[str, Any]) -> str | None:
    """What is wrong with a decoded record (an error, an unknown type or version), if anything."""
    for part in (decoded["key"], decoded["value"]):
        if part and ("error" in part or part.get("unknown")):
            return part.get("error") or "unknown record type or version"
    return None


def decoder(fallback: Any, member_types: frozenset[int] = frozenset(), max_records: int = DEFAULT_MAX_RECORDS) -> Any:
    """A compiled Decoder whose records the plans do not take go to `fallback` (see _offsets.c), and
    whose `rows` hand records of `member_types` to their `derive`."""
    types = {t: (*plans[:4], t in member_types, *plans[4:]) for t, plans in record_plans().items()}
    return _offsets.Decoder(types, nested_plans(), _nested, _decompress, fallback, max_records)


def columns(names: list[str] | tuple[str, ...], kinds: tuple[int, ...], max_chunk: int = (1 << 31) - 1) -> Any:
    """A column builder (see kprotocol.pipeline.tables.column_kinds and from_columns) whose string
    columns are cut into chunks of at most `max_chunk` bytes of data."""
    return _offsets.Columns(tuple(names), kinds, max_chunk)


class Lines:
    """JSON lines of `__consumer_offsets` segments; problems of the records the Python path decodes are
    added to `record_problems` as `kprotocol offsets decode` reports them."""

    def __init__(self, record_problems: list[str], max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.record_problems = record_problems
        self.names = type_names(CONSUMER_OFFSETS)
        self.source = ""
        self.decoder = decoder(self.tail, max_records=max_records)

    def head(self, source: str) -> bytes:
        """Start of every line of segment `source` (problems name it from now on)."""
        self.source = source
        return b'{"segment":' + compact(source) + b',"offset":'

    def tail(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes | None:
        """From `"recordType"` to the end of a record's line, by the reference decoder; None to leave the
        record out (it has no key)."""
        if key is None:
            self.record_problems.append(f"{self.source}: record at offset {offset} has no key")
            return None
        decoded = decode_record(key, value, topic=CONSUMER_OFFSETS)
        problem = record_problem(decoded)
        if problem:
            self.record_problems.append(f"{self.source}: record at offset {offset}: {problem}")
        return compact({"recordType": self.names.get(decoded["key"].get("type")), **decoded})[1:-1]

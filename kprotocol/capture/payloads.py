"""JoinGroup/SyncGroup payloads of captured exchanges decoded through the compiled consumer-protocol and
Kafka Streams userdata decoder of `kprotocol offsets decode` (kprotocol/coordinator_topics/_offsets.c).

`annotate` adds the same `decoded<Field>` keys as kprotocol.group_payloads.annotate (the reference); a
payload the compiled path does not take (an unusual or undecodable one, another protocol type) or a
build without the extension goes to the reference.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import orjson

from kprotocol import group_payloads
from kprotocol.coordinator_topics import lines
from kprotocol.group_payloads import Protocol
from kprotocol.runtime.struct import Message
from kprotocol.streams.nested import CONSUMER_PROTOCOL_TYPE, decode_member_assignment, decode_member_metadata

SUBSCRIPTION, ASSIGNMENT = 1, 2  # the compiled decoder's names of the two payloads
_DECODERS = {SUBSCRIPTION: decode_member_metadata, ASSIGNMENT: decode_member_assignment}


@cache
def _compiled() -> Any:
    return lines.decoder(_no_records)


def _no_records(*record: Any) -> None:
    raise AssertionError("the payload decoder reads no records")


def attach(entry: dict[str, Any], field: str, payload: bytes | None, which: int, protocol: Protocol) -> None:
    """group_payloads.attach of a subscription (`which` 1) or assignment (2) payload, in C when it can."""
    protocol_type, protocol_name = protocol
    if payload and protocol_type == CONSUMER_PROTOCOL_TYPE and protocol_name is not None and lines.ENABLED:
        decoded = _compiled().payload(which, protocol_name, bytes(payload))
        if decoded is not None:
            entry["decoded" + field[0].upper() + field[1:]] = orjson.loads(decoded)
            return
    group_payloads.attach(entry, field, payload, _DECODERS[which], protocol)


def annotate(doc: dict[str, Any], message: Message, protocol: Protocol) -> dict[str, Any]:
    """group_payloads.annotate through the compiled path: decoded payloads of a JoinGroup or SyncGroup
    request or response added to its JSON `doc`."""
    name = type(message).__name__
    if name == "JoinGroupRequest":
        for entry, proto in zip(doc.get("protocols", []), message.protocols):  # type: ignore[attr-defined]
            attach(entry, "metadata", proto.metadata, SUBSCRIPTION, (message.protocol_type, proto.name))  # type: ignore[attr-defined]
    elif name == "JoinGroupResponse":
        for entry, member in zip(doc.get("members", []), message.members):  # type: ignore[attr-defined]
            attach(entry, "metadata", member.metadata, SUBSCRIPTION, protocol)
    elif name == "SyncGroupRequest":
        for entry, item in zip(doc.get("assignments", []), message.assignments):  # type: ignore[attr-defined]
            attach(entry, "assignment", item.assignment, ASSIGNMENT, protocol)
    elif name == "SyncGroupResponse":
        attach(doc, "assignment", message.assignment, ASSIGNMENT, protocol)  # type: ignore[attr-defined]
    return doc

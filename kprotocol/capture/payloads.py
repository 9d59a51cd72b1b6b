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
_WHICH = {decode_member_metadata: SUBSCRIPTION, decode_member_assignment: ASSIGNMENT}


@cache
def _compiled() -> Any:
    return lines.decoder(_no_records)


def _no_records(*record: Any) -> None:
    raise AssertionError("the payload decoder reads no records")


def attach(entry: dict[str, Any], field: str, payload: bytes | None, decoder: Any, protocol: Protocol) -> None:
    """group_payloads.attach in C when it can (a subscription or an assignment of the consumer protocol)."""
    protocol_type, protocol_name = protocol
    if payload and protocol_type == CONSUMER_PROTOCOL_TYPE and protocol_name is not None and lines.ENABLED:
        decoded = _compiled().payload(_WHICH[decoder], protocol_name, bytes(payload))
        if decoded is not None:
            entry["decoded" + field[0].upper() + field[1:]] = orjson.loads(decoded)
            return
    group_payloads.attach(entry, field, payload, decoder, protocol)


def annotate(doc: dict[str, Any], message: Message, protocol: Protocol) -> dict[str, Any]:
    """group_payloads.annotate through the compiled path."""
    return group_payloads.annotate(doc, message, protocol, attach)

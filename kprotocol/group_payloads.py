"""Decode the opaque payloads of classic group RPCs in place: JoinGroup member metadata and SyncGroup
assignments become consumer-protocol messages, with Kafka Streams userdata decoded inside.

The JSON keeps Kafka's shape (payloads stay base64) and adds a sibling key per payload, named
`decoded<Field>` (`decodedMetadata`, `decodedAssignment`, `decodedSubscription`): either
`{"version": V, "data": {...}}` with the consumer-protocol JSON (its `userData` plus
`streamsUserData`), or `{"error": "..."}` when the payload does not decode. `__consumer_offsets`
decoding (kprotocol.coordinator_topics) uses the same keys.
"""

from __future__ import annotations

from typing import Any

from kprotocol.errors import DecodeError
from kprotocol.runtime.struct import Message
from kprotocol.streams.nested import decode_member_assignment, decode_member_metadata

Protocol = tuple[str | None, str | None]  # (protocol type, protocol name)


def attach(entry: dict[str, Any], field: str, payload: bytes | None, decoder: Any, protocol: Protocol) -> None:
    """Add `decoded<Field>` to `entry` for a consumer-protocol payload of a group using `protocol`."""
    protocol_type, protocol_name = protocol
    if not payload or protocol_type is None or protocol_name is None:
        return
    target = "decoded" + field[0].upper() + field[1:]
    try:
        nested = decoder(protocol_type, protocol_name, payload)
    except DecodeError as exc:
        entry[target] = {"error": f"{type(exc).__name__}: {exc}"}
        return
    if nested is not None:
        entry[target] = {"version": nested.version, "data": nested.to_json()}


def protocol_of(message: Message, known: Protocol) -> Protocol:
    """The (type, name) a JoinGroup/SyncGroup message states, completed from what is already known."""
    protocol_type = getattr(message, "protocol_type", None) or known[0]
    protocol_name = getattr(message, "protocol_name", None) or known[1]
    return protocol_type, protocol_name


def annotate(doc: dict[str, Any], message: Message, protocol: Protocol, attach: Any = attach) -> dict[str, Any]:
    """Add decoded payloads to the JSON `doc` of a JoinGroup or SyncGroup request or response (each through
    `attach`, with the same arguments as this module's)."""
    name = type(message).__name__
    if name == "JoinGroupRequest":
        for entry, proto in zip(doc.get("protocols", []), message.protocols):  # type: ignore[attr-defined]
            attach(entry, "metadata", proto.metadata, decode_member_metadata, (message.protocol_type, proto.name))  # type: ignore[attr-defined]
    elif name == "JoinGroupResponse":
        for entry, member in zip(doc.get("members", []), message.members):  # type: ignore[attr-defined]
            attach(entry, "metadata", member.metadata, decode_member_metadata, protocol)
    elif name == "SyncGroupRequest":
        for entry, item in zip(doc.get("assignments", []), message.assignments):  # type: ignore[attr-defined]
            attach(entry, "assignment", item.assignment, decode_member_assignment, protocol)
    elif name == "SyncGroupResponse":
        attach(doc, "assignment", message.assignment, decode_member_assignment, protocol)  # type: ignore[attr-defined]
    return doc

"""Decode coordinator records into the shape of `kafka-dump-log --offsets-decoder`:

    {"key": {"type": N, "data": {...}}, "value": {"version": V, "data": {...}} | None}

A key is int16 record type + body, a value int16 version + body; a null value is a tombstone.
Nothing is dropped: an unknown type or version keeps its body as `hex` with `"unknown": true`,
and a body that fails to decode keeps its `hex` next to an `error`.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from kprotocol.coordinator_topics.record_types import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE, record_types
from kprotocol.errors import DecodeError
from kprotocol.registry import message_class
from kprotocol.runtime.struct import Message

_PREFIX = struct.Struct(">h")
# Records whose layout Kafka changed in place (same version) when streams and share groups left early access:
# values that the current layout cannot read are read with the earlier one, marked with `layout`.
EARLIER_LAYOUTS = {
    "StreamsGroupMetadataValue": "StreamsGroupMetadataValueBefore44",
    "ShareSnapshotValue": "ShareSnapshotValueBefore44",
    "ShareUpdateValue": "ShareUpdateValueBefore44",
    "ShareGroupStatePartitionMetadataValue": "ShareGroupStatePartitionMetadataValueBefore44",
}
LEGACY_OFFSET_COMMIT, OFFSET_COMMIT, GROUP_METADATA, CONSUMER_GROUP_MEMBER_METADATA = 0, 1, 2, 5


def decode_record(key: bytes, value: bytes | None, *, topic: str = CONSUMER_OFFSETS) -> dict[str, Any]:
    """One record of `__consumer_offsets` (or of `topic`, another coordinator topic)."""
    types = record_types(topic)
    if len(key) < 2:
        return {"key": {"type": None, "error": "key is shorter than its 2-byte type", "hex": key.hex()},
                "value": _raw_value(value)}
    (type_id,) = _PREFIX.unpack_from(key)
    record_type = types.get(type_id)
    if record_type is None:
        return {"key": {"type": type_id, "unknown": True, "hex": key[2:].hex()}, "value": _raw_value(value)}
    out_key: dict[str, Any] = {"type": type_id}
    out_key.update(_body(record_type.key, key[2:], record_type.key_version))
    if value is None:
        return {"key": out_key, "value": None}
    if len(value) < 2:
        return {"key": out_key, "value": {"version": None, "error": "value is shorter than its 2-byte version",
                                          "hex": value.hex()}}
    (version,) = _PREFIX.unpack_from(value)
    value_class = record_type.value
    if topic == CONSUMER_OFFSETS and type_id == LEGACY_OFFSET_COMMIT and not _supports(value_class, version):
        value_class = types[OFFSET_COMMIT].value  # old brokers pair type-0 keys with any commit value version
    out_value: dict[str, Any] = {"version": version}
    if not _supports(value_class, version):
        out_value.update(unknown=True, hex=value[2:].hex())
    else:
        out_value.update(_body(value_class, value[2:], version))
        earlier = EARLIER_LAYOUTS.get(value_class.__name__) if "error" in out_value else None
        if earlier is not None and _supports(message_class(earlier), version):
            retry = _body(message_class(earlier), value[2:], version)
            if "data" in retry:  # written by a release before the layout changed in place
                out_value = {"version": version, **retry, "layout": earlier}
        if "data" in out_value and topic == CONSUMER_OFFSETS:
            _decode_nested(type_id, out_value["data"])
    return {"key": out_key, "value": out_value}


def decode_transaction_record(key: bytes, value: bytes | None) -> dict[str, Any]:
    """One record of `__transaction_state`."""
    return decode_record(key, value, topic=TRANSACTION_STATE)


def decode_share_state_record(key: bytes, value: bytes | None) -> dict[str, Any]:
    """One record of `__share_group_state`."""
    return decode_record(key, value, topic=SHARE_GROUP_STATE)


def _supports(cls: type[Message], version: int) -> bool:
    low, high = cls.valid_versions
    return low <= version <= high


def _raw_value(value: bytes | None) -> dict[str, Any] | None:
    if value is None:
        return None
    version = _PREFIX.unpack_from(value)[0] if len(value) >= 2 else None
    return {"version": version, "unknown": True, "hex": value[2:].hex() if version is not None else value.hex()}


def _body(cls: type[Message], body: bytes, version: int) -> dict[str, Any]:
    try:
        return {"data": cls.decode(body, version).to_json(version)}
    except DecodeError as exc:
        return {"error": str(exc), "hex": body.hex()}


def _decode_nested(type_id: int, data: dict[str, Any]) -> None:
    """Decode classic consumer-protocol bytes (and Streams userdata) in place, next to their base64."""
    if type_id not in (GROUP_METADATA, CONSUMER_GROUP_MEMBER_METADATA):
        return
    # Imported here: the Streams userdata decoders (and their parsing library) take a tenth of a second
    # to import, which a run whose records hold no such payloads (or a compiled run) need not pay.
    from kprotocol.streams.nested import CONSUMER_PROTOCOL_TYPE, decode_member_assignment, decode_member_metadata

    if type_id == GROUP_METADATA and data.get("protocolType") == CONSUMER_PROTOCOL_TYPE:
        protocol = data.get("protocol") or ""
        for member in data.get("members", []):
            _attach(member, "subscription", decode_member_metadata, protocol)
            _attach(member, "assignment", decode_member_assignment, protocol)
    elif type_id == CONSUMER_GROUP_MEMBER_METADATA:
        classic = data.get("classicMemberMetadata") or {}
        for supported in classic.get("supportedProtocols", []):
            _attach(supported, "metadata", decode_member_metadata, supported.get("name") or "")


def _attach(holder: dict[str, Any], field: str, decoder, protocol: str) -> None:
    """Add `decoded<Field>` beside the base64 payload `holder[field]` (see kprotocol.group_payloads)."""
    from kprotocol.group_payloads import attach
    from kprotocol.streams.nested import CONSUMER_PROTOCOL_TYPE

    encoded = holder.get(field)
    if encoded:
        attach(holder, field, base64.b64decode(encoded), decoder, (CONSUMER_PROTOCOL_TYPE, protocol))

"""Kafka Streams userdata decoded in place, inside classic-group member metadata and assignments.

A JoinGroup member's metadata is a ConsumerProtocolSubscription and a SyncGroup assignment a
ConsumerProtocolAssignment when the group's protocol type is "consumer"; when the protocol (assignor)
name is "stream", their `userData` is a Streams SubscriptionInfo / AssignmentInfo.

    nested = decode_member_metadata("consumer", "stream", metadata)
    nested.message, nested.streams_userdata, nested.error, nested.to_json()
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kprotocol.errors import DecodeError, TruncatedError, UnsupportedVersionError
from kprotocol.registry import message_class
from kprotocol.streams.assignment import AssignmentInfo
from kprotocol.streams.subscription import SubscriptionInfo

CONSUMER_PROTOCOL_TYPE = "consumer"
STREAMS_PROTOCOL_NAME = "stream"
_VERSION = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class NestedMessage:
    """A consumer-protocol message, and its Streams userdata when the protocol is Kafka Streams'.

    `version` is the consumer-protocol version as written (the message is decoded at
    min(version, latest known)); `error` says why the Streams userdata did not decode.
    """

    message: Any
    version: int
    streams_userdata: SubscriptionInfo | AssignmentInfo | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Kafka's JSON shape of the message (`userData` stays base64) plus `streamsUserData` or
        `streamsUserDataError`."""
        doc = self.message.to_json(_decoded_version(type(self.message), self.version))
        if self.streams_userdata is not None and self.error is None:
            doc["streamsUserData"] = self.streams_userdata.to_fields()
        if self.error is not None:
            doc["streamsUserDataError"] = self.error
        return doc


def decode_member_metadata(protocol_type: str, protocol_name: str, data: bytes) -> NestedMessage | None:
    """A JoinGroup member's metadata: ConsumerProtocolSubscription (+ SubscriptionInfo for "stream").

    None when the protocol type is not "consumer". Undecodable consumer-protocol bytes raise DecodeError;
    undecodable Streams userdata is reported in `error`.
    """
    return _decode(protocol_type, protocol_name, data, "ConsumerProtocolSubscription", SubscriptionInfo)


def decode_member_assignment(protocol_type: str, protocol_name: str, data: bytes) -> NestedMessage | None:
    """A SyncGroup assignment: ConsumerProtocolAssignment (+ AssignmentInfo for "stream"); as above."""
    return _decode(protocol_type, protocol_name, data, "ConsumerProtocolAssignment", AssignmentInfo)


def _decoded_version(cls: Any, version: int) -> int:
    return min(version, cls.valid_versions[1])


def _decode(
    protocol_type: str,
    protocol_name: str,
    data: bytes,
    spec: str,
    userdata_cls: type[SubscriptionInfo] | type[AssignmentInfo],
) -> NestedMessage | None:
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    cls = message_class(spec)
    data = bytes(data)
    if len(data) < 2:
        raise TruncatedError(f"{spec} needs a 2-byte version, got {len(data)} byte(s)", 0, "version")
    version = _VERSION.unpack_from(data)[0]
    if version < 0:
        raise UnsupportedVersionError(f"unsupported {spec} version {version}", 0, "version")
    try:
        message = cls.decode(data[2:], _decoded_version(cls, version))
    except DecodeError as exc:
        exc.offset = None if exc.offset is None else exc.offset + 2
        raise
    if protocol_name != STREAMS_PROTOCOL_NAME:
        return NestedMessage(message, version)
    if message.user_data is None:
        return NestedMessage(message, version, error="no userData")
    try:
        info = userdata_cls.decode(message.user_data)
    except DecodeError as exc:
        return NestedMessage(message, version, error=_describe(userdata_cls, exc))
    try:
        info.to_fields()  # Kafka's getters reject some decodable data (a repeated client tag key)
    except DecodeError as exc:
        return NestedMessage(message, version, info, _describe(userdata_cls, exc))
    return NestedMessage(message, version, info)


def _describe(cls: type, exc: DecodeError) -> str:
    return f"{cls.__name__}: {type(exc).__name__}: {exc}"

"""Classic consumer-protocol subscriptions and assignments (int16 version + body), with Kafka
Streams userdata decoded in place.

The Kafka-shape JSON is kept (`userData` stays base64); for the `stream` protocol a
`streamsUserData` key adds the decoded SubscriptionInfo/AssignmentInfo fields, or
`streamsUserDataError` says why they did not decode. Versions newer than the spec knows are
read with the newest known layout, as Kafka's consumer does (new fields are appended).
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from kprotocol.errors import DecodeError, TruncatedError
from kprotocol.registry import message_class
from kprotocol.streams import AssignmentInfo, SubscriptionInfo

CONSUMER_PROTOCOL_TYPE = "consumer"
STREAMS_PROTOCOL = "stream"


def decode_subscription(data: bytes, protocol: str | None) -> dict[str, Any]:
    """`{"version": V, "data": {...}}` of a ConsumerProtocolSubscription."""
    return _decode("ConsumerProtocolSubscription", data, protocol, SubscriptionInfo)


def decode_assignment(data: bytes, protocol: str | None) -> dict[str, Any]:
    """`{"version": V, "data": {...}}` of a ConsumerProtocolAssignment."""
    return _decode("ConsumerProtocolAssignment", data, protocol, AssignmentInfo)


def _decode(spec: str, data: bytes, protocol: str | None, userdata_type: type) -> dict[str, Any]:
    if len(data) < 2:
        raise TruncatedError(f"{spec} needs a 2-byte version", 0)
    (version,) = struct.unpack_from(">h", data)
    cls = message_class(spec)
    low, high = cls.valid_versions
    if version < low:
        raise DecodeError(f"{spec} version {version} is below {low}", 0)
    layout = min(version, high)
    if layout == version:
        msg = cls.decode(data[2:], layout)
    else:
        msg, _ = cls.decode_prefix(data[2:], layout, 0)
    body = msg.to_json(layout)
    if protocol == STREAMS_PROTOCOL and body.get("userData") is not None:
        try:
            body["streamsUserData"] = userdata_type.decode(base64.b64decode(body["userData"])).to_fields()
        except DecodeError as exc:
            body["streamsUserDataError"] = str(exc)
    return {"version": version, "data": body}

"""kprotocol: Apache Kafka's wire protocol, byte-exact, with first-class Kafka Streams support.

    import kprotocol
    cls = kprotocol.message_class("JoinGroupRequest")
    msg = cls.decode(data, version)
    msg.encode(version), msg.to_json(version), cls.from_json(doc, version)
"""

from __future__ import annotations

from kprotocol.errors import DecodeError, EncodeError
from kprotocol.framing import decode_request, decode_response, encode_request, encode_response
from kprotocol.registry import message_class, spec_names

__all__ = [
    "DecodeError",
    "EncodeError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "message_class",
    "spec_names",
]

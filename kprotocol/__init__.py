"""kprotocol: Apache Kafka's wire protocol, byte-exact, with first-class Kafka Streams support.

    import kprotocol
    cls = kprotocol.message_class("JoinGroupRequest")
    msg = cls.decode(data, version)
    msg.encode(version), msg.to_json(version), cls.from_json(doc, version)
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from kprotocol.errors import DecodeError, EncodeError
from kprotocol.framing import decode_request, decode_response, encode_request, encode_response
from kprotocol.registry import message_class, spec_names

try:
    __version__ = version("kprotocol")
except PackageNotFoundError:  # run from a checkout without installing
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    "DecodeError",
    "EncodeError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "message_class",
    "spec_names",
]

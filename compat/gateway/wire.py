"""The few bytes the gateway reads of a request frame it forwards, and whether a response will follow.

Forwarded frames are never decoded: the api key, version and correlation id sit at fixed places
of every request header, and only Produce needs a look into its body (acks=0 has no response).
"""

from __future__ import annotations

import struct

from kprotocol.errors import DecodeError
from kprotocol.runtime.primitives import read_compact_string, read_string, read_uvarint

HEADER_PREFIX = struct.Struct(">ihhi")  # size, api key, api version, correlation id
PRODUCE = 0
PRODUCE_FIRST_FLEXIBLE = 9


def request_prefix(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a size-prefixed request frame."""
    if len(frame) < HEADER_PREFIX.size:
        raise DecodeError("request frame is shorter than its header", 0, "RequestHeader")
    _, api_key, api_version, correlation_id = HEADER_PREFIX.unpack_from(frame)
    return api_key, api_version, correlation_id


def expects_response(frame: bytes) -> bool:
    """False only for a Produce request with acks=0, which the broker never answers."""
    api_key, api_version, _ = request_prefix(frame)
    if api_key != PRODUCE:
        return True
    try:
        flexible = api_version >= PRODUCE_FIRST_FLEXIBLE
        _, pos = read_string(frame, 12)  # client id: a classic nullable string in every header version
        if flexible:
            tags, pos = read_uvarint(frame, pos)
            for _ in range(tags):
                _, pos = read_uvarint(frame, pos)
                size, pos = read_uvarint(frame, pos)
                pos += size
        if api_version >= 3:
            _, pos = (read_compact_string if flexible else read_string)(frame, pos)  # transactional id
        (acks,) = struct.unpack_from(">h", frame, pos)
    except (struct.error, DecodeError):
        return True  # let the broker judge a malformed Produce
    return acks != 0

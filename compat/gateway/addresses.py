"""Broker addresses rewritten in large responses without decoding them whole.

A FindCoordinator answer to a million keys is tens of megabytes; decoding it into messages and encoding
it again holds the interpreter for seconds in compiled loops. Here its entries are copied in chunks, each
address replaced, the event loop served between chunks; a Metadata answer has its brokers rewritten and
everything after them (the topics) copied as is. `None` means "not this shape": the caller decodes.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

from kprotocol.runtime.primitives import read_uvarint, uvarint

METADATA, FIND_COORDINATOR = 3, 10
CHUNK = 2_000  # entries between two turns of the event loop
I16, I32 = struct.Struct(">h"), struct.Struct(">i")
Listener = Callable[[int], tuple[str, int] | None]  # node id -> the gateway's listener for it
Missing = list[tuple[int, str, int]]  # brokers without a listener yet: (node id, host, port) upstream


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def _compact_string(buf: bytes, pos: int) -> int:
    """The position after a compact (nullable) string."""
    length, pos = read_uvarint(buf, pos)
    return pos + max(length - 1, 0)


def _string(buf: bytes, pos: int) -> int:
    (length,) = I16.unpack_from(buf, pos)
    return pos + 2 + max(length, 0)


def _encode_host(host: str, flexible: bool) -> bytes:
    raw = host.encode()
    return (uvarint(len(raw) + 1) if flexible else I16.pack(len(raw))) + raw


def _address(frame: bytes, host_at: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        length, pos = read_uvarint(frame, host_at)
        length -= 1
    else:
        (length,) = I16.unpack_from(frame, host_at)
        pos = host_at + 2
    (port,) = I32.unpack_from(frame, pos + length)
    return bytes(frame[pos:pos + length]).decode(), port


async def find_coordinator(frame: bytes, version: int, listener: Listener, missing: Missing) -> bytes | None:
    """A FindCoordinator v4+ answer (a list of coordinators) with each coordinator's address replaced;
    None (and `missing` filled) when a coordinator has no listener yet."""
    if version < 4:
        return None
    buf = memoryview(frame)
    out = bytearray()
    try:
        pos = _skip_tags(frame, 8)  # size, correlation id, then the header's tagged fields
        pos += 4  # throttle_time_ms
        count, pos = read_uvarint(frame, pos)
        out += buf[4:pos]
        for n in range(max(count - 1, 0)):
            if n and n % CHUNK == 0:
                await asyncio.sleep(0)
            start = pos
            pos = _compact_string(frame, pos)  # key
            (node_id,) = I32.unpack_from(frame, pos)
            host_at = pos + 4
            after_host = _compact_string(frame, host_at)
            port_at = after_host
            (error_code,) = I16.unpack_from(frame, port_at + 4)
            pos = _compact_string(frame, port_at + 6)  # error message
            pos = _skip_tags(frame, pos)
            address = listener(node_id) if error_code == 0 and node_id >= 0 else None
            if address is None and error_code == 0 and node_id >= 0:
                missing.append((node_id, *_address(frame, host_at, True)))
            if address is None:
                out += buf[start:pos]
            else:
                out += buf[start:host_at]
                out += _encode_host(address[0], True)
                out += I32.pack(address[1])
                out += buf[port_at + 4:pos]
        out += buf[pos:]
    except (struct.error, ValueError, IndexError):
        return None
    return None if missing else I32.pack(len(out)) + bytes(out)


def metadata(frame: bytes, version: int, listener: Listener, missing: Missing) -> bytes | None:
    """A Metadata answer with its brokers' addresses replaced; the topics after them are copied as they are."""
    flexible = version >= 9
    try:
        pos = _skip_tags(frame, 8) if flexible else 8
        if version >= 3:
            pos += 4  # throttle_time_ms
        if flexible:
            count, pos = read_uvarint(frame, pos)
            count -= 1
        else:
            (count,) = I32.unpack_from(frame, pos)
            pos += 4
        out = bytearray(frame[4:pos])
        for _ in range(max(count, 0)):
            (node_id,) = I32.unpack_from(frame, pos)
            after_host = (_compact_string if flexible else _string)(frame, pos + 4)
            rest = after_host + 4
            if version >= 1:
                rest = (_compact_string if flexible else _string)(frame, rest)  # rack
            if flexible:
                rest = _skip_tags(frame, rest)
            address = listener(node_id)
            if address is None:
                missing.append((node_id, *_address(frame, pos + 4, flexible)))
                address = ("", 0)
            out += frame[pos:pos + 4] + _encode_host(address[0], flexible) + I32.pack(address[1])
            out += frame[after_host + 4:rest]
            pos = rest
        out += frame[pos:]
    except (struct.error, ValueError, IndexError):
        return None
    return None if missing else I32.pack(len(out)) + bytes(out)

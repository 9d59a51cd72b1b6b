"""Requests read as Kafka's broker reads them, for routing: what the canonical decoder refuses but the
broker accepts (bytes after the message, varints that are not minimally encoded) must not slip past the
gateway to the broker. The canonical decode is tried first; only a request it refuses is read again here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kprotocol.errors import DecodeError, InvalidValueError, TruncatedError
from kprotocol.framing import decode_request as canonical, request_header_version
from kprotocol.registry import api_classes, message_class
from kprotocol.runtime import primitives
from kprotocol.runtime.struct import Message

_strict_unsigned = primitives._read_unsigned
_swapping = threading.Lock()


def _lenient_unsigned(buf: bytes, pos: int, max_shift: int, bits: int, what: str) -> tuple[int, int]:
    """Kafka's ByteUtils: a varint may carry redundant zero groups; more than its width is still an error."""
    result = shift = 0
    start, n = pos, len(buf)
    while True:
        if pos >= n:
            raise TruncatedError(f"{what} runs past the end of the input", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >> bits:
                raise InvalidValueError(f"{what} does not fit in {bits} bits", start)
            return result, pos
        shift += 7
        if shift > max_shift:
            raise InvalidValueError(f"{what} is longer than {max_shift // 7 + 1} bytes", start)


@contextmanager
def _lenient_varints() -> Iterator[None]:
    primitives._read_unsigned = _lenient_unsigned
    try:
        yield
    finally:
        primitives._read_unsigned = _strict_unsigned


def _pure(cls: type[Message], buf: bytes, version: int, offset: int) -> tuple[Message, int]:
    table = cls.__dict__.get("_py_decoders") or cls._decoders
    try:
        return table[version](buf, offset)
    except (KeyError, TypeError):
        raise DecodeError(f"{cls.__name__} has no version {version}", offset, cls.__name__) from None


def decode_request(frame: bytes, compiled: bool = True) -> tuple[Message, Message]:
    """(header, request) of a size-prefixed request frame, accepting what Kafka's broker accepts. With
    `compiled=False` only the Python decoders run (for a worker thread: they let the event loop in)."""
    if compiled:
        try:
            return canonical(frame)
        except DecodeError:
            pass
    frame = bytes(frame)
    if len(frame) < 8:
        raise TruncatedError("request frame is shorter than its header", 0, "RequestHeader")
    buf = frame[4:4 + int.from_bytes(frame[:4], "big")]
    api_key, api_version = int.from_bytes(buf[0:2], "big", signed=True), int.from_bytes(buf[2:4], "big", signed=True)
    try:
        request_cls, _ = api_classes(api_key)
        header_version = request_header_version(api_key, api_version)
    except (KeyError, ValueError):
        raise DecodeError(f"unknown api key {api_key} or version {api_version}", 4, "RequestHeader") from None

    def read() -> tuple[Message, Message]:
        header, start = _pure(message_class("RequestHeader"), buf, header_version, 0)
        return header, _pure(request_cls, buf, api_version, start)[0]  # bytes after the message are ignored
    if not compiled:
        try:
            return read()
        except DecodeError:
            pass
    with _swapping, _lenient_varints():  # one lenient decode at a time (the varint reader is shared)
        return read()


async def find_coordinator_request(frame: bytes, chunk: int = 5_000) -> tuple[Message, Message] | None:
    """A large FindCoordinator v4+ request read key by key, the event loop served every `chunk` keys (a
    million keys decoded in one call would hold the interpreter for a tenth of a second or more); None
    when it is not that shape (the caller decodes it the usual way)."""
    import asyncio

    from kprotocol.runtime.primitives import read_uvarint

    buf = bytes(frame[4:])
    api_version = int.from_bytes(buf[2:4], "big", signed=True)
    if int.from_bytes(buf[0:2], "big") != 10 or api_version < 4:
        return None
    try:
        request_cls, _ = api_classes(10)
        header, pos = message_class("RequestHeader").decode_prefix(buf, request_header_version(10, api_version), 0)
        key_type = buf[pos]
        count, pos = read_uvarint(buf, pos + 1)
        keys = []
        for n in range(max(count - 1, 0)):
            if n and n % chunk == 0:
                await asyncio.sleep(0)
            length, pos = read_uvarint(buf, pos)
            keys.append(buf[pos:pos + length - 1].decode())
            pos += length - 1
        return header, request_cls(key_type=key_type, coordinator_keys=keys)
    except (DecodeError, IndexError, UnicodeDecodeError, ValueError):
        return None

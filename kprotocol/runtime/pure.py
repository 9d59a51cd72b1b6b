"""The generated Python codecs, bypassing the compiled fast path (for differential tests and debugging)."""

from __future__ import annotations

from typing import Any

from kprotocol.errors import TrailingBytesError
from kprotocol.runtime.struct import Message


def decode(cls: type[Message], data: bytes, version: int) -> Any:
    table = cls.__dict__.get("_py_decoders", cls._decoders)
    msg, pos = table[version](data, 0)
    if pos != len(data):
        raise TrailingBytesError(f"{len(data) - pos} bytes left after the message", pos, cls.__name__)
    return msg


def encode(msg: Message, version: int) -> bytes:
    table = type(msg).__dict__.get("_py_encoders", type(msg)._encoders)
    out: list[bytes] = []
    table[version](msg, out.append)
    return b"".join(out)

"""`construct` building blocks for the Streams userdata layouts.

Custom constructs check every length and count against the bytes that remain (so a hostile count never
allocates) and raise `kprotocol` decode errors carrying the byte offset and the construct path.
"""

from __future__ import annotations

import io
import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from construct import Construct, Subconstruct, stream_write

from kprotocol.errors import EncodeError, InvalidLengthError, InvalidValueError, TruncatedError
from kprotocol.streams.errors import StringTooLongError
from kprotocol.streams.strings import decode_mutf8, decode_utf16, encode_mutf8, encode_utf16

_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")


class Input(io.BytesIO):
    """A read stream that knows its size, so counts can be checked against the remaining bytes."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.size = len(data)


def field_path(path: str) -> str:
    """construct's "(parsing) -> a -> [3] -> b" as "a[3].b"."""
    out = ""
    for part in path.split(" -> ")[1:]:
        out += part if part.startswith("[") or not out else "." + part
    return out


def _read(stream: Input, length: int, path: str, what: str) -> bytes:
    offset = stream.tell()
    if length > stream.size - offset:
        raise TruncatedError(
            f"{what} of {length} byte(s) but only {stream.size - offset} remain", offset, field_path(path)
        )
    return stream.read(length)


def _int(fmt: struct.Struct, stream: Input, path: str) -> int:
    return fmt.unpack(_read(stream, fmt.size, path, "need an int"))[0]


class Counted(Subconstruct):
    """`array<T>`: an int32 count then the elements. Negative counts, and counts whose elements cannot
    fit in the remaining bytes (`min_size` each), are refused before anything is read."""

    def __init__(self, subcon: Construct, min_size: int) -> None:
        super().__init__(subcon)
        self.min_size = min_size

    def _parse(self, stream: Input, context: Any, path: str) -> list:
        offset = stream.tell()
        count = _int(_I32, stream, path)
        if count < 0:
            raise InvalidLengthError(f"negative count {count}", offset, field_path(path))
        if count * self.min_size > stream.size - offset - 4:
            raise InvalidLengthError(
                f"count {count} cannot fit in the {stream.size - offset - 4} remaining byte(s)",
                offset,
                field_path(path),
            )
        sub = self.subcon._parsereport
        return [sub(stream, context, f"{path} -> [{i}]") for i in range(count)]

    def _build(self, obj: Iterable, stream: io.BytesIO, context: Any, path: str) -> Iterable:
        items = list(obj)
        stream_write(stream, _I32.pack(len(items)), 4, path)
        build = self.subcon._build
        for i, item in enumerate(items):
            build(item, stream, context, f"{path} -> [{i}]")
        return obj


class Record(Construct):
    """Named fields read in order into a value object: `make(*values)`; built from `unmake(obj)`."""

    def __init__(self, make: Callable[..., Any], unmake: Callable[[Any], Iterable], *subcons: Construct) -> None:
        super().__init__()
        self.make, self.unmake, self.subcons = make, unmake, subcons

    def _parse(self, stream: Input, context: Any, path: str) -> Any:
        return self.make(*[sc._parsereport(stream, context, f"{path} -> {sc.name}") for sc in self.subcons])

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        for sc, value in zip(self.subcons, self.unmake(obj), strict=True):
            sc._build(value, stream, context, f"{path} -> {sc.name}")
        return obj


def record(make: Callable[..., Any], *subcons: Construct) -> Record:
    """A Record of a tuple type whose items are the fields in wire order."""
    return Record(make, tuple, *subcons)


class Uuid(Construct):
    """16 bytes: most then least significant 64 bits."""

    def _parse(self, stream: Input, context: Any, path: str) -> uuid.UUID:
        return uuid.UUID(bytes=_read(stream, 16, path, "need a uuid"))

    def _build(self, obj: uuid.UUID, stream: io.BytesIO, context: Any, path: str) -> uuid.UUID:
        stream_write(stream, obj.bytes, 16, path)
        return obj


class Utf8Bytes32(Construct):
    """`bytes32` holding UTF-8 text (invalid bytes become U+FFFD); optionally empty <-> None."""

    def __init__(self, empty_is_none: bool = False) -> None:
        super().__init__()
        self.empty_is_none = empty_is_none

    def _parse(self, stream: Input, context: Any, path: str) -> str | None:
        offset = stream.tell()
        length = _int(_I32, stream, path)
        if length < 0:
            raise InvalidLengthError(f"negative byte length {length}", offset, field_path(path))
        text = _read(stream, length, path, "need bytes").decode("utf-8", "replace")
        return None if self.empty_is_none and not text else text

    def _build(self, obj: str | None, stream: io.BytesIO, context: Any, path: str) -> str | None:
        data = (obj or "").encode("utf-8", "replace")
        stream_write(stream, _I32.pack(len(data)) + data, 4 + len(data), path)
        return obj


class NullableStr16(Construct):
    """`nstr16`: int16 length (negative = null) then UTF-8."""

    def _parse(self, stream: Input, context: Any, path: str) -> str | None:
        length = _int(_I16, stream, path)
        if length < 0:
            return None
        return _read(stream, length, path, "need a string").decode("utf-8", "replace")

    def _build(self, obj: str | None, stream: io.BytesIO, context: Any, path: str) -> str | None:
        if obj is None:
            stream_write(stream, b"\xff\xff", 2, path)
        else:
            data = obj.encode("utf-8", "replace")
            if len(data) > 0x7FFF:
                raise StringTooLongError(f"string of {len(data)} bytes exceeds 32767", field_path(path))
            stream_write(stream, _I16.pack(len(data)) + data, 2 + len(data), path)
        return obj


class MUtf8(Construct):
    """Java `writeUTF`: uint16 byte count then modified UTF-8."""

    def _parse(self, stream: Input, context: Any, path: str) -> str:
        length = _int(_U16, stream, path)
        offset = stream.tell()
        try:
            return decode_mutf8(_read(stream, length, path, "need a string"))
        except ValueError as exc:
            raise InvalidValueError(str(exc), offset, field_path(path)) from None

    def _build(self, obj: str, stream: io.BytesIO, context: Any, path: str) -> str:
        data = encode_mutf8(obj)
        if len(data) > 0xFFFF:
            raise StringTooLongError(
                f"modified UTF-8 string of {len(data)} bytes exceeds 65535", field_path(path)
            )
        stream_write(stream, _U16.pack(len(data)) + data, 2 + len(data), path)
        return obj


class Utf16Name(Construct):
    """Named-topology suffix: int32 char count (<= 0: none) then UTF-16BE chars."""

    def _parse(self, stream: Input, context: Any, path: str) -> str | None:
        count = _int(_I32, stream, path)
        if count <= 0:
            return None
        return decode_utf16(_read(stream, 2 * count, path, "need chars"))

    def _build(self, obj: str | None, stream: io.BytesIO, context: Any, path: str) -> str | None:
        data = encode_utf16(obj or "")
        stream_write(stream, _I32.pack(len(data) // 2) + data, 4 + len(data), path)
        return obj


class Int(Construct):
    """A big-endian integer of a `struct` format (">b", ">h", ">i", ">q")."""

    def __init__(self, fmt: str) -> None:
        super().__init__()
        self.fmt = struct.Struct(fmt)

    def _parse(self, stream: Input, context: Any, path: str) -> int:
        return _int(self.fmt, stream, path)

    def _build(self, obj: int, stream: io.BytesIO, context: Any, path: str) -> int:
        try:
            data = self.fmt.pack(obj)
        except struct.error as exc:
            raise EncodeError(f"{obj!r} does not fit: {exc}", field_path(path)) from None
        stream_write(stream, data, self.fmt.size, path)
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        return self.fmt.size


I8, I32, I64 = Int(">b"), Int(">i"), Int(">q")


def values(*items: Any) -> tuple:
    """`make` for a Record decoding to a plain tuple."""
    return items

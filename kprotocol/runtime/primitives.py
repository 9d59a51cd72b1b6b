"""Wire primitives: readers take `(buf, pos)` and return `(value, new_pos)`; writers append to a list.

Readers assume `buf` is `bytes`. They check every length against the remaining input before
slicing or allocating, so a hostile prefix fails fast with a `DecodeError` instead of
allocating memory the input cannot justify. Varints must be minimal, booleans 0 or 1: the
decoders accept exactly what a canonical encoder writes, so `encode(decode(b)) == b` always.
"""

from __future__ import annotations

import struct
from typing import Callable
from uuid import UUID

from kprotocol.errors import InvalidLengthError, InvalidValueError, TruncatedError

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")

ZERO_UUID = UUID(int=0)
MAX_STRING = 0x7FFF

# Single-byte unsigned varints, precomputed: the overwhelmingly common case for compact lengths.
_SMALL_UVARINTS = tuple(bytes((i,)) for i in range(128))


# ---------------------------------------------------------------- varints

def _read_unsigned(buf: bytes, pos: int, max_shift: int, bits: int, what: str) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    n = len(buf)
    while True:
        if pos >= n:
            raise TruncatedError(f"{what} runs past the end of the input", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if b == 0 and shift:
                raise InvalidValueError(f"{what} is not minimally encoded", start)
            if result >> bits:
                raise InvalidValueError(f"{what} does not fit in {bits} bits", start)
            return result, pos
        shift += 7
        if shift > max_shift:
            raise InvalidValueError(f"{what} is longer than {max_shift // 7 + 1} bytes", start)


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (32 bits), as Kafka's ByteUtils reads it."""
    return _read_unsigned(buf, pos, 28, 32, "varint")


def read_uvarlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varlong of at most 10 bytes (64 bits)."""
    return _read_unsigned(buf, pos, 63, 64, "varlong")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag signed varint (int32)."""
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag signed varlong (int64)."""
    v, pos = read_uvarlong(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def uvarint(value: int) -> bytes:
    """Encode an unsigned varint (also used for varlongs)."""
    if value < 128:
        if value < 0:
            raise ValueError(f"unsigned varint cannot be negative: {value}")
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Encode a zig-zag signed varint (int32)."""
    return uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def varlong(value: int) -> bytes:
    """Encode a zig-zag signed varlong (int64)."""
    return uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------- fixed-width helpers

def read_bool(buf: bytes, pos: int) -> tuple[bool, int]:
    if pos >= len(buf):
        raise TruncatedError("boolean runs past the end of the input", pos)
    b = buf[pos]
    if b > 1:
        raise InvalidValueError(f"boolean byte must be 0 or 1, got {b}", pos)
    return b == 1, pos + 1


def check_bool(value: int, pos: int) -> bool:
    """Turn an unpacked int8 into a bool, refusing anything but 0 and 1."""
    if value == 1:
        return True
    if value == 0:
        return False
    raise InvalidValueError(f"boolean byte must be 0 or 1, got {value}", pos)


def make_uuid(raw: bytes) -> UUID:
    return UUID(bytes=raw) if raw != b"\0" * 16 else ZERO_UUID


# ---------------------------------------------------------------- strings and bytes

def _take(buf: bytes, pos: int, length: int, what: str) -> bytes:
    end = pos + length
    if end > len(buf):
        raise InvalidLengthError(f"{what} of {length} bytes exceeds the {len(buf) - pos} bytes left", pos)
    return buf[pos:end]


def _utf8(raw: bytes, pos: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidValueError(f"invalid UTF-8 at byte {exc.start} of the string", pos) from None


def read_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    """int16-length string; length -1 is null (the caller checks nullability)."""
    if pos + 2 > len(buf):
        raise TruncatedError("string length runs past the end of the input", pos)
    (length,) = I16.unpack_from(buf, pos)
    if length < 0:
        if length == -1:
            return None, pos + 2
        raise InvalidLengthError(f"negative string length {length}", pos)
    return _utf8(_take(buf, pos + 2, length, "string"), pos + 2), pos + 2 + length


def read_compact_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    """Unsigned-varint (length + 1) string; 0 is null."""
    start = pos
    if pos < len(buf) and buf[pos] < 0x80:
        length = buf[pos] - 1
        pos += 1
    else:
        length, pos = read_uvarint(buf, pos)
        length -= 1
        if length > MAX_STRING:
            raise InvalidLengthError(f"string length {length} exceeds {MAX_STRING}", start)
    if length < 0:
        return None, pos
    return _utf8(_take(buf, pos, length, "string"), pos), pos + length


def read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """int32-length bytes; length -1 is null."""
    if pos + 4 > len(buf):
        raise TruncatedError("bytes length runs past the end of the input", pos)
    (length,) = I32.unpack_from(buf, pos)
    if length < 0:
        if length == -1:
            return None, pos + 4
        raise InvalidLengthError(f"negative bytes length {length}", pos)
    return _take(buf, pos + 4, length, "bytes"), pos + 4 + length


def read_compact_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """Unsigned-varint (length + 1) bytes; 0 is null."""
    if pos < len(buf) and buf[pos] < 0x80:
        length = buf[pos] - 1
        pos += 1
    else:
        length, pos = read_uvarint(buf, pos)
        length -= 1
    if length < 0:
        return None, pos
    return _take(buf, pos, length, "bytes"), pos + length


def read_array_length(buf: bytes, pos: int) -> tuple[int, int]:
    """int32 element count; -1 is null. Counts larger than the remaining bytes are refused."""
    if pos + 4 > len(buf):
        raise TruncatedError("array length runs past the end of the input", pos)
    (count,) = I32.unpack_from(buf, pos)
    if count > len(buf) - pos - 4:
        raise InvalidLengthError(f"array of {count} elements cannot fit in {len(buf) - pos - 4} bytes", pos)
    if count < -1:
        raise InvalidLengthError(f"negative array length {count}", pos)
    return count, pos + 4


def read_compact_array_length(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned-varint (count + 1); -1 means null."""
    start = pos
    if pos < len(buf) and buf[pos] < 0x80:
        count = buf[pos] - 1
        pos += 1
    else:
        count, pos = read_uvarint(buf, pos)
        count -= 1
    if count > len(buf) - pos:
        raise InvalidLengthError(f"array of {count} elements cannot fit in {len(buf) - pos} bytes", start)
    return count, pos


def read_fixed_array(buf: bytes, pos: int, count: int, code: str, size: int) -> tuple[tuple, int]:
    """`count` fixed-width numbers in one unpack (code is a struct code such as 'i')."""
    end = pos + count * size
    if end > len(buf):
        raise InvalidLengthError(f"array of {count} elements exceeds the {len(buf) - pos} bytes left", pos)
    return struct.unpack_from(f">{count}{code}", buf, pos), end


# ---------------------------------------------------------------- tagged fields

def read_tag_header(buf: bytes, pos: int) -> tuple[int, int, int]:
    """Return (tag, size, pos of the data) and check the data fits."""
    tag, pos = read_uvarint(buf, pos)
    size, pos = read_uvarint(buf, pos)
    if pos + size > len(buf):
        raise InvalidLengthError(f"tagged field {tag} of {size} bytes exceeds the input", pos)
    return tag, size, pos


def write_tagged(
    write: Callable[[bytes], object], known: list[tuple[int, bytes]], unknown: tuple[tuple[int, bytes], ...]
) -> None:
    """Write a tag section: known (tag, encoded value) pairs merged with unknown raw tags, by tag."""
    if unknown:
        written = {tag for tag, _ in known}
        known = sorted(known + [t for t in unknown if t[0] not in written])
    write(uvarint(len(known)))
    for tag, data in known:
        write(uvarint(tag))
        write(uvarint(len(data)))
        write(data)


# ---------------------------------------------------------------- writers

def compact_len(length: int) -> bytes:
    """Unsigned varint of length + 1 (a compact length prefix)."""
    return _SMALL_UVARINTS[length + 1] if length < 127 else uvarint(length + 1)


def pack_array(code: str, values: tuple | list) -> bytes:
    return struct.pack(f">{len(values)}{code}", *values)


"""Every name generated modules use: primitives, base classes, writers and error constructors."""

from __future__ import annotations

import struct as _struct
from typing import Any, Callable

from kprotocol.errors import (
    DecodeError,
    EncodeError,
    InvalidLengthError,
    InvalidValueError,
    TruncatedError,
)
from kprotocol.runtime.primitives import (
    I16,
    I32,
    MAX_STRING,
    ZERO_UUID,
    check_bool,
    compact_len,
    make_uuid,
    pack_array,
    read_array_length,
    read_bool,
    read_bytes,
    read_compact_array_length,
    read_compact_bytes,
    read_compact_string,
    read_fixed_array,
    read_string,
    read_tag_header,
    read_uvarint,
    write_tagged,
)
from kprotocol.runtime.accel import install_plans
from kprotocol.runtime.struct import INHERIT, Field, Message, Struct, as_tuple, attribute

_new = tuple.__new__
NULL_ARRAY = b"\xff\xff\xff\xff"
NULL_COMPACT = b"\x00"
Writer = Callable[[bytes], object]

__all__ = [
    "DecodeError", "Field", "INHERIT", "Message", "NULL_ARRAY", "NULL_COMPACT", "Struct", "ZERO_UUID", "_new", "array_len",
    "as_tuple", "attribute", "bad_marker", "check_bool", "compact_len", "install_plans", "make_uuid", "null_field", "null_value", "pack_array",
    "read_array_length", "read_bool", "read_bytes", "read_compact_array_length", "read_compact_bytes",
    "read_compact_string", "read_fixed_array", "read_string", "read_tag_header", "read_uvarint",
    "tag_size_mismatch", "tags_out_of_order", "unsupported_field", "wrap_decode_error", "wrap_encode_error",
    "write_bytes", "write_bytes_nullable", "write_compact_bytes", "write_compact_bytes_nullable",
    "write_compact_string", "write_compact_string_nullable", "write_string", "write_string_nullable",
    "write_tagged",
]


# ---------------------------------------------------------------- decode errors

def null_field() -> DecodeError:
    return InvalidValueError("null where the field is not nullable")


def bad_marker(marker: int) -> DecodeError:
    return InvalidValueError(f"struct presence marker must be 1 or null, got {marker}")


def tags_out_of_order(tag: int) -> DecodeError:
    return InvalidValueError(f"tagged field {tag} is out of order or repeated")


def tag_size_mismatch(tag: int, size: int, used: int) -> DecodeError:
    return InvalidLengthError(f"tagged field {tag} declares {size} bytes but its value takes {used}")


def wrap_decode_error(exc: Exception, field: str, pos: int) -> DecodeError:
    """Turn any failure inside a struct decoder into a DecodeError located at `field`."""
    if isinstance(exc, DecodeError):
        if exc.offset is None:
            exc.offset = pos
        return exc.within(field)
    if isinstance(exc, (_struct.error, IndexError)):
        return TruncatedError("input ends inside the field", pos, field)
    if isinstance(exc, RecursionError):
        return InvalidValueError("structure nested too deeply", pos, field)
    return InvalidValueError(f"{type(exc).__name__}: {exc}", pos, field)


# ---------------------------------------------------------------- encode errors

def unsupported_field(version: int) -> EncodeError:
    return EncodeError(f"field has a non-default value but does not exist in version {version}")


def wrap_encode_error(exc: Exception, field: str) -> EncodeError:
    if isinstance(exc, EncodeError):
        return exc.within(field)
    return EncodeError(f"cannot encode value: {type(exc).__name__}: {exc}", field)


# ---------------------------------------------------------------- writers

def array_len(n: int) -> bytes:
    return I32.pack(n)


def _utf8(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > MAX_STRING:
        raise EncodeError(f"string of {len(data)} bytes is longer than {MAX_STRING}")
    return data


def null_value() -> EncodeError:
    return EncodeError("null is not allowed for this field at this version")


def _not_null(value: Any) -> Any:
    if value is None:
        raise null_value()
    return value


def write_string(w: Writer, value: str) -> None:
    data = _utf8(_not_null(value))
    w(I16.pack(len(data)))
    w(data)


def write_string_nullable(w: Writer, value: str | None) -> None:
    if value is None:
        w(b"\xff\xff")
    else:
        data = _utf8(value)
        w(I16.pack(len(data)))
        w(data)


def write_compact_string(w: Writer, value: str) -> None:
    data = _utf8(_not_null(value))
    w(compact_len(len(data)))
    w(data)


def write_compact_string_nullable(w: Writer, value: str | None) -> None:
    if value is None:
        w(b"\x00")
    else:
        data = _utf8(value)
        w(compact_len(len(data)))
        w(data)


def write_bytes(w: Writer, value: bytes) -> None:
    w(I32.pack(len(_not_null(value))))
    w(value)


def write_bytes_nullable(w: Writer, value: bytes | None) -> None:
    if value is None:
        w(NULL_ARRAY)
    else:
        w(I32.pack(len(value)))
        w(value)


def write_compact_bytes(w: Writer, value: bytes) -> None:
    w(compact_len(len(_not_null(value))))
    w(value)


def write_compact_bytes_nullable(w: Writer, value: bytes | None) -> None:
    if value is None:
        w(b"\x00")
    else:
        w(compact_len(len(value)))
        w(value)

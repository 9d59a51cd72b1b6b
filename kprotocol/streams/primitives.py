"""`construct` building blocks for the Streams userdata layouts.

Custom constructs check every length and count against the bytes that remain (so a hostile count never
allocates) and raise `kprotocol` decode errors carrying the byte offset and the construct path.
Each also emits code for `construct`'s compiler (`compile_layout`): runs of integers become one
`struct` call, so a compiled layout runs as straight-line Python.
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

# Objects the compiled layouts refer to by name; injected into each compiled module.
_GLOBALS: dict[str, Any] = {}


def _name(prefix: str, value: Any) -> str:
    name = f"{prefix}_{id(value)}"
    _GLOBALS[name] = value
    return name


def compile_layout(layout: Construct) -> Construct:
    """`layout.compile()` with the names the emitted code uses."""
    compiled = layout.compile()
    compiled.module.__dict__.update(_GLOBALS)
    return compiled


def _struct(fmt: str) -> struct.Struct:
    return _STRUCTS.setdefault(fmt, struct.Struct(fmt))


_STRUCTS: dict[str, struct.Struct] = {}
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

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_counted_{code.allocateId()}"
        count = _name("unpack", _I32.unpack)
        code.append(f"""
            def {fname}(io, this):
                count = {count}(io.read(4))[0]
                if count < 0 or count * {self.min_size} > io.size - io.tell():
                    raise ValueError(count)
                return {self._emit_elements(code)}
        """)
        return f"{fname}(io, this)"

    def _emit_elements(self, code: Any) -> str:
        """The list of `count` elements; records of integers only are read with one `iter_unpack`."""
        fmt = self.subcon.int_format() if isinstance(self.subcon, Record) else None
        if fmt is None:
            return f"[{self.subcon._compileparse(code)} for _ in range(count)]"
        unpack = _struct(fmt)
        items = f"{_name('iter_unpack', unpack.iter_unpack)}(io.read(count * {unpack.size}))"
        if self.subcon.make is values:
            return f"list({items})"
        return f"[{_name('make', self.subcon.make)}(*item) for item in {items}]"

    def _emitbuild(self, code: Any) -> str:
        fname = f"build_counted_{code.allocateId()}"
        code.append(f"""
            def {fname}(items, io, this):
                io.write({_name("pack", _I32.pack)}(len(items)))
                for obj in items:
                    {self.subcon._compilebuild(code)}
                return items
        """)
        return f"{fname}(obj, io, this)"

    def _build(self, obj: Iterable, stream: io.BytesIO, context: Any, path: str) -> Iterable:
        items = list(obj)
        stream_write(stream, _I32.pack(len(items)), 4, path)
        build = self.subcon._build
        for i, item in enumerate(items):
            build(item, stream, context, f"{path} -> [{i}]")
        return obj


class Record(Construct):
    """Named fields read in order into a value object: `make(*values)`; built from `unmake(obj)`."""

    def __init__(
        self, make: Callable[..., Any], unmake: Callable[[Any], Iterable], *subcons: Construct
    ) -> None:
        super().__init__()
        self.make, self.unmake, self.subcons = make, unmake, subcons

    def _parse(self, stream: Input, context: Any, path: str) -> Any:
        return self.make(*[sc._parsereport(stream, context, path) for sc in self.subcons])

    def _runs(self) -> list[tuple[str | None, list[int]]]:
        """Field indexes grouped into runs of integers (struct format) and single other fields (None)."""
        runs: list[tuple[str | None, list[int]]] = []
        for i, sc in enumerate(self.subcons):
            inner = sc.subcon
            if isinstance(inner, Int) and runs and runs[-1][0] is not None:
                runs[-1] = (runs[-1][0] + inner.fmt.format[1:], runs[-1][1] + [i])
            elif isinstance(inner, Int):
                runs.append((inner.fmt.format, [i]))
            else:
                runs.append((None, [i]))
        return runs

    def int_format(self) -> str | None:
        """The `struct` format of the whole record when all its fields are integers."""
        runs = self._runs()
        return runs[0][0] if len(runs) == 1 else None

    def _emitparse(self, code: Any) -> str:
        args = []
        for fmt, fields in self._runs():
            if fmt is None:
                args.append(self.subcons[fields[0]]._compileparse(code))
            else:
                unpack = _struct(fmt)
                args.append(f"*{_name('unpack', unpack.unpack)}(io.read({unpack.size}))")
        if self.make is values:  # a tuple display: no call
            return f"({', '.join(args)},)"
        return f"{_name('make', self.make)}({', '.join(args)})"

    def _emitbuild(self, code: Any) -> str:
        fname = f"build_record_{code.allocateId()}"
        lines = [f"values = {_name('unmake', self.unmake)}(obj)"]
        for fmt, fields in self._runs():
            if fmt is None:
                lines += [f"obj = values[{fields[0]}]", self.subcons[fields[0]]._compilebuild(code)]
            else:
                items = ", ".join(f"values[{i}]" for i in fields)
                lines.append(f"io.write({_name('pack', _struct(fmt).pack)}({items}))")
        body = "\n                ".join(lines)
        code.append(f"""
            def {fname}(obj, io, this):
                {body}
                return obj
        """)
        return f"{fname}(obj, io, this)"

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        for sc, value in zip(self.subcons, self.unmake(obj), strict=True):
            sc._build(value, stream, context, path)
        return obj


def record(make: Callable[..., Any], *subcons: Construct) -> Record:
    """A Record of a tuple type whose items are the fields in wire order."""
    return Record(make, tuple, *subcons)


def _take(stream: io.BytesIO, length: int) -> bytes:
    data = stream.read(length)
    if len(data) != length or length < 0:
        raise ValueError("short read")
    return data


class Linked(Construct):
    """A construct whose compiled form calls its `fast_parse(stream)` (no path tracking; any failure makes
    `Layout` rerun the interpreted declaration) and its own `_build`."""

    def fast_parse(self, stream: io.BytesIO) -> Any:
        raise NotImplementedError

    def _emitparse(self, code: Any) -> str:
        return f"{_name('parse', self.fast_parse)}(io)"

    def _emitbuild(self, code: Any) -> str:
        return f"{_name('build', self._build)}(obj, io, this, '(compiled)')"


class Uuid(Linked):
    """16 bytes: most then least significant 64 bits."""

    def _parse(self, stream: Input, context: Any, path: str) -> uuid.UUID:
        return uuid.UUID(bytes=_read(stream, 16, path, "need a uuid"))

    def fast_parse(self, stream: io.BytesIO) -> uuid.UUID:
        return uuid.UUID(bytes=_take(stream, 16))

    def _build(self, obj: uuid.UUID, stream: io.BytesIO, context: Any, path: str) -> uuid.UUID:
        stream_write(stream, obj.bytes, 16, path)
        return obj


class Utf8Bytes32(Linked):
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

    def fast_parse(self, stream: io.BytesIO) -> str | None:
        text = _take(stream, _I32.unpack(stream.read(4))[0]).decode("utf-8", "replace")
        return None if self.empty_is_none and not text else text

    def _build(self, obj: str | None, stream: io.BytesIO, context: Any, path: str) -> str | None:
        data = (obj or "").encode("utf-8", "replace")
        stream_write(stream, _I32.pack(len(data)) + data, 4 + len(data), path)
        return obj


class NullableStr16(Linked):
    """`nstr16`: int16 length (negative = null) then UTF-8."""

    def _parse(self, stream: Input, context: Any, path: str) -> str | None:
        length = _int(_I16, stream, path)
        if length < 0:
            return None
        return _read(stream, length, path, "need a string").decode("utf-8", "replace")

    def fast_parse(self, stream: io.BytesIO) -> str | None:
        length = _I16.unpack(stream.read(2))[0]  # struct.error when short
        return None if length < 0 else _take(stream, length).decode("utf-8", "replace")

    def _build(self, obj: str | None, stream: io.BytesIO, context: Any, path: str) -> str | None:
        if obj is None:
            stream_write(stream, b"\xff\xff", 2, path)
        else:
            data = obj.encode("utf-8", "replace")
            if len(data) > 0x7FFF:
                raise StringTooLongError(f"string of {len(data)} bytes exceeds 32767", field_path(path))
            stream_write(stream, _I16.pack(len(data)) + data, 2 + len(data), path)
        return obj


class MUtf8(Linked):
    """Java `writeUTF`: uint16 byte count then modified UTF-8."""

    def _parse(self, stream: Input, context: Any, path: str) -> str:
        length = _int(_U16, stream, path)
        offset = stream.tell()
        data = _read(stream, length, path, "need a string")
        try:
            return decode_mutf8(data)
        except ValueError as exc:
            raise InvalidValueError(str(exc), offset, field_path(path)) from None

    def fast_parse(self, stream: io.BytesIO) -> str:
        return decode_mutf8(_take(stream, _U16.unpack(stream.read(2))[0]))

    def _build(self, obj: str, stream: io.BytesIO, context: Any, path: str) -> str:
        data = encode_mutf8(obj)
        if len(data) > 0xFFFF:
            raise StringTooLongError(
                f"modified UTF-8 string of {len(data)} bytes exceeds 65535", field_path(path)
            )
        stream_write(stream, _U16.pack(len(data)) + data, 2 + len(data), path)
        return obj


class Utf16Name(Linked):
    """Named-topology suffix: int32 char count (<= 0: none) then UTF-16BE chars."""

    def _parse(self, stream: Input, context: Any, path: str) -> str | None:
        count = _int(_I32, stream, path)
        if count <= 0:
            return None
        return decode_utf16(_read(stream, 2 * count, path, "need chars"))

    def fast_parse(self, stream: io.BytesIO) -> str | None:
        count = _I32.unpack(stream.read(4))[0]
        return None if count <= 0 else decode_utf16(_take(stream, 2 * count))

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

    def _emitparse(self, code: Any) -> str:
        return f"{_name('unpack', self.fmt.unpack)}(io.read({self.fmt.size}))[0]"

    def _emitbuild(self, code: Any) -> str:
        return f"io.write({_name('pack', self.fmt.pack)}(obj))"


I8, I32, I64 = Int(">b"), Int(">i"), Int(">q")


def values(*items: Any) -> tuple:
    """`make` for a Record decoding to a plain tuple."""
    return items

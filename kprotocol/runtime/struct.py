"""Base classes of generated messages: immutable, tuple-backed data classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Self

from kprotocol.errors import DecodeError, TrailingBytesError, UnsupportedVersionError, EncodeError

try:  # CPython's fast C accessor, the one namedtuple uses
    from collections import _tuplegetter as _getter  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - other interpreters
    from operator import itemgetter

    def _getter(index: int, doc: str | None) -> property:  # type: ignore[misc]
        return property(itemgetter(index), doc=doc)

Range = tuple[int, int] | None
INHERIT: Any = "inherit"  # a Field.flexible value: the field follows the message's flexible versions


def attribute(index: int) -> Any:
    """Read-only attribute backed by tuple slot `index`."""
    return _getter(index, None)


def as_tuple(value: Any) -> Any:
    return value if value is None or type(value) is tuple else tuple(value)


@dataclass(frozen=True, slots=True)
class Field:
    """Schema of one field, used by the JSON converter, tests and tools (codecs are generated)."""

    name: str
    json_name: str
    type: str  # primitive type name, "struct" or "array"
    element: str | None  # array element: primitive type name or "struct"
    struct: Any  # the Struct class of struct fields and struct arrays
    versions: Range
    nullable: Range
    tagged: Range
    tag: int | None
    default: Any
    ignorable: bool
    flexible: Any  # INHERIT or a field-level flexible range

    def present(self, version: int) -> bool:
        return self.versions is not None and self.versions[0] <= version <= self.versions[1]

    def nullable_at(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]

    def tagged_at(self, version: int) -> bool:
        return self.tagged is not None and self.tagged[0] <= version <= self.tagged[1]


class Struct(tuple):
    """An immutable record; fields are attributes, the last slot holds unknown tagged fields."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]]
    _spec: ClassVar[tuple[Field, ...]]
    _decoders: ClassVar[dict[int, Any]]
    _encoders: ClassVar[dict[int, Any]]

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and tuple.__eq__(self, other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        parts = [f"{name}={value!r}" for name, value in zip(self._fields, self)]
        if not self[-1]:
            parts.pop()
        return f"{type(self).__name__}({', '.join(parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple.__new__, (type(self), tuple(self)))

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed."""
        values = dict(zip(self._fields, self))
        unknown = set(changes) - values.keys()
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        values.update(changes)
        return type(self)(**values)

    def to_dict(self) -> dict[str, Any]:
        """Attribute names to values (nested structs stay objects)."""
        return dict(zip(self._fields, self))


class Message(Struct):
    """A top-level spec: request, response, header, data or coordinator record key/value."""

    __slots__ = ()
    spec_type: ClassVar[str]
    api_key: ClassVar[int | None]
    valid_versions: ClassVar[tuple[int, int]]
    flexible_versions: ClassVar[Range]

    @classmethod
    def _codec(cls, table: dict[int, Any], version: int) -> Any:
        try:
            return table[version]
        except (KeyError, TypeError):
            lo, hi = cls.valid_versions
            raise UnsupportedVersionError(f"{cls.__name__} has no version {version!r} (valid: {lo}-{hi})") from None

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self:
        """Decode exactly `data` (all of it) at `version`."""
        buf = data if type(data) is bytes else bytes(data)
        msg, pos = cls.decode_prefix(buf, version, 0)
        if pos != len(buf):
            raise TrailingBytesError(f"{len(buf) - pos} bytes left after the message", pos, cls.__name__)
        return msg

    @classmethod
    def decode_prefix(cls, data: bytes | bytearray | memoryview, version: int, offset: int = 0) -> tuple[Self, int]:
        """Decode one message starting at `offset`; return it and the offset after it."""
        fn = cls._codec(cls._decoders, version)
        if type(data) is not bytes:  # the compiled path reads bytes objects only
            data = bytes(data)
        try:
            return fn(data, offset)
        except DecodeError as exc:
            pure = cls.__dict__.get("_py_decoders")
            if pure is None:
                raise exc.within(cls.__name__) from None
        try:  # the compiled path failed somewhere inside: rerun in Python for the full field path
            return pure[version](data, offset)
        except DecodeError as exc:
            raise exc.within(cls.__name__) from None

    def encode(self, version: int) -> bytes:
        out: list[bytes] = []
        self.encode_into(out.append, version)
        return b"".join(out)

    def encode_into(self, write: Any, version: int) -> None:
        """Append the encoding to a writer such as `list.append`."""
        fn = self._codec(self._encoders, version)
        try:
            fn(self, write)
            return
        except EncodeError as exc:
            pure = type(self).__dict__.get("_py_encoders")
            if pure is None:
                raise exc.within(type(self).__name__) from None
        try:  # rerun in Python for the full field path
            pure[version](self, lambda _: None)
        except EncodeError as exc:
            raise exc.within(type(self).__name__) from None
        raise AssertionError("compiled and Python encoders disagree")  # pragma: no cover

    def to_json(self, version: int, records: bool = True) -> dict[str, Any]:
        """Kafka's JSON shape at `version` (records fields null with `records=False`)."""
        from kprotocol.runtime.json_codec import struct_to_json

        self._codec(self._decoders, version)
        return struct_to_json(self, version, records)

    @classmethod
    def from_json(cls, doc: dict[str, Any], version: int) -> Self:
        from kprotocol.runtime.json_codec import struct_from_json

        cls._codec(cls._decoders, version)
        return struct_from_json(cls, doc, version, cls.__name__)

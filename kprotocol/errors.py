"""The exception hierarchy: every decoding failure is a `DecodeError` (a `ValueError`)."""

from __future__ import annotations


def join_path(outer: str, inner: str) -> str:
    """`members` + `[3]` -> `members[3]`; `members[3]` + `metadata` -> `members[3].metadata`."""
    if not inner:
        return outer
    if not outer:
        return inner
    return outer + inner if inner.startswith("[") else f"{outer}.{inner}"


class DecodeError(ValueError):
    """Bytes that cannot be decoded; `offset` is the byte position, `path` the field path."""

    def __init__(self, message: str, offset: int | None = None, path: str = "") -> None:
        super().__init__(message)
        self.reason = message
        self.offset = offset
        self.path = path

    def within(self, segment: str) -> DecodeError:
        """Prefix the field path with an enclosing field name or `[index]`; returns self."""
        self.path = join_path(segment, self.path)
        return self

    def __str__(self) -> str:
        where = []
        if self.path:
            where.append(f"at {self.path}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason


class TruncatedError(DecodeError):
    """The input ended before the value being read."""


class InvalidLengthError(DecodeError):
    """A length or count prefix is negative, too large, or larger than the remaining input."""


class InvalidValueError(DecodeError):
    """A value is malformed: a bad varint, invalid UTF-8, a null where none is allowed, a bad checksum..."""


class TrailingBytesError(DecodeError):
    """Bytes remain after a complete message."""


class UnsupportedVersionError(DecodeError):
    """The version is outside the message's valid versions."""


class EncodeError(ValueError):
    """A value cannot be encoded at the requested version; `path` names the field."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.reason = message
        self.path = path

    def within(self, segment: str) -> EncodeError:
        self.path = join_path(segment, self.path)
        return self

    def __str__(self) -> str:
        return f"{self.reason} (at {self.path})" if self.path else self.reason

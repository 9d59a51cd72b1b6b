"""Typed errors of the Kafka Streams userdata codecs."""

from __future__ import annotations

from kprotocol.errors import (
    DecodeError,
    EncodeError,
    InvalidLengthError,
    InvalidValueError,
    TruncatedError,
    UnsupportedVersionError,
)

__all__ = [
    "DecodeError",
    "EncodeError",
    "InvalidLengthError",
    "InvalidValueError",
    "InvalidVersionError",
    "NamedTopologyError",
    "StringTooLongError",
    "TruncatedError",
    "UnsupportedVersionError",
]


class InvalidVersionError(EncodeError):
    """The version cannot be built or encoded (outside 1..11, or above the latest supported version)."""


class NamedTopologyError(EncodeError):
    """A task with a named topology at a version that cannot carry one (before v10)."""


class StringTooLongError(EncodeError):
    """A modified-UTF-8 string longer than 65535 bytes."""

"""Record batch errors, all `DecodeError`s; each names the batch (its base offset) where known."""

from __future__ import annotations

from kprotocol.errors import InvalidLengthError, InvalidValueError


class ChecksumError(InvalidValueError):
    """A batch's stored CRC does not match its bytes."""


class CompressionError(InvalidValueError):
    """A compressed payload is malformed or uses an unknown codec."""


class DecompressionLimitError(InvalidLengthError):
    """A compressed payload expands past the configured limit (a likely decompression bomb)."""

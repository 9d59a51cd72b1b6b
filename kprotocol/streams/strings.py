"""Java's modified UTF-8 (`DataOutput.writeUTF`) and UTF-16 char strings (`writeChars`)."""

from __future__ import annotations

import re

_NEEDS_CESU = re.compile("[\x00\ud800-\udfff\U00010000-\U0010ffff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _split_astral(match: re.Match[str]) -> str:
    code = ord(match.group()) - 0x10000
    return chr(0xD800 | (code >> 10)) + chr(0xDC00 | (code & 0x3FF))


def encode_mutf8(text: str) -> bytes:
    """Modified UTF-8: NUL as c0 80, characters outside the BMP as two 3-byte surrogates."""
    if _NEEDS_CESU.search(text) is None:
        return text.encode("utf-8")
    return _ASTRAL.sub(_split_astral, text).encode("utf-8", "surrogatepass").replace(b"\0", b"\xc0\x80")


def _join_surrogates(text: str) -> str:
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


def decode_mutf8(data: bytes) -> str:
    """Decode like Java's `readUTF`: 1-3 byte sequences only (overlong forms accepted), else ValueError.

    The error message gives the byte position of the malformed sequence.
    """
    if data.isascii():
        return data.decode("ascii")
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return _join_surrogates(_decode_mutf8_slow(data))
    if _ASTRAL.search(text):  # a standard 4-byte sequence: readUTF rejects it
        return _join_surrogates(_decode_mutf8_slow(data))
    return _join_surrogates(text) if _SURROGATE.search(text) else text


def _decode_mutf8_slow(data: bytes) -> str:
    units: list[str] = []
    i, end = 0, len(data)
    while i < end:
        c = data[i]
        kind = c >> 4
        if kind < 8:
            units.append(chr(c))
            i += 1
        elif kind in (12, 13):
            if i + 2 > end or data[i + 1] & 0xC0 != 0x80:
                raise ValueError(f"malformed modified UTF-8 around byte {i}")
            units.append(chr(((c & 0x1F) << 6) | (data[i + 1] & 0x3F)))
            i += 2
        elif kind == 14:
            if i + 3 > end or data[i + 1] & 0xC0 != 0x80 or data[i + 2] & 0xC0 != 0x80:
                raise ValueError(f"malformed modified UTF-8 around byte {i}")
            units.append(chr(((c & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F)))
            i += 3
        else:
            raise ValueError(f"malformed modified UTF-8 around byte {i}")
    return "".join(units)


def encode_utf16(text: str) -> bytes:
    """UTF-16BE code units, as Java's `writeChars` (lone surrogates kept)."""
    return text.encode("utf-16-be", "surrogatepass")


def decode_utf16(data: bytes) -> str:
    return data.decode("utf-16-be", "surrogatepass")

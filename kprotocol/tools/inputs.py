"""Command-line inputs, read the same way by every command, and the user-mistake error.

A payload argument is hex (spaces and a `0x` prefix allowed), base64 (`base64:` prefix, or any
text that is not hex), `@path` (a file of raw bytes, or of hex/base64 text) or `-` (standard input,
likewise). A mistake raises `UsageError`: `kprotocol` prints it as one line and exits with 2.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import difflib
import sys
from pathlib import Path

from kprotocol.registry import message_class, spec_names
from kprotocol.runtime.struct import Message


class UsageError(Exception):
    """A user mistake (a missing file, an unknown name, unreadable input): one line, exit code 2."""


def parse_text(text: str) -> bytes:
    """Hex or base64 text to bytes."""
    compact = "".join(text.split())
    if compact.startswith("base64:"):
        return _base64(compact[7:])
    hexdigits = compact[2:] if compact[:2].lower() == "0x" else compact
    try:
        return bytes.fromhex(hexdigits)
    except ValueError:
        pass
    _hex_typo(hexdigits, compact is not hexdigits)
    try:
        return _base64(compact)
    except UsageError:
        raise UsageError(f"input is neither hex nor base64: {text[:40]!r}") from None


HEX = frozenset("0123456789abcdefABCDEF")


def _hex_typo(digits: str, prefixed: bool) -> None:
    """Hex with a mistake in it (an odd number of digits, a stray character among many hex digits, or
    anything after `0x`) is told as such, not read as base64 (`base64:` forces base64)."""
    stray = [(i, c) for i, c in enumerate(digits) if c not in HEX]
    if prefixed and stray:
        raise UsageError(f"not hex: {stray[0][1]!r} at position {stray[0][0] + 2}")
    if not stray and (prefixed or len(digits) % 2):
        raise UsageError(f"hex with an odd number of digits ({len(digits)}); prefix base64 text with 'base64:'")
    if stray and len(digits) >= 8 and len(stray) <= max(1, len(digits) // 20):
        i, c = stray[0]
        raise UsageError(f"not hex: {c!r} at position {i} among {len(digits) - len(stray)} hex digits "
                         "(base64 text: prefix it with 'base64:')")


def _base64(text: str) -> bytes:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise UsageError(f"input is not valid base64: {text[:40]!r}") from None


def read_payload(arg: str) -> bytes:
    """The bytes an argument names (see the module docstring)."""
    if arg == "-":
        return _text_or_raw(sys.stdin.buffer.read())
    if arg.startswith("@"):
        path = Path(arg[1:])
        if path.is_dir():
            raise UsageError(f"{path} is a directory, not a file")
        try:
            return _text_or_raw(path.read_bytes())
        except FileNotFoundError:
            raise UsageError(f"{path}: no such file") from None
    return parse_text(arg)


def _text_or_raw(data: bytes) -> bytes:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return data
    try:
        return parse_text(text)
    except UsageError:
        return data  # printable bytes that are neither hex nor base64: the bytes themselves


def read_text(arg: str) -> str:
    """A literal argument, `@path` for a file's text, or `-` for standard input."""
    if arg == "-":
        return sys.stdin.read()
    if arg.startswith("@"):
        try:
            return Path(arg[1:]).read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError):
            raise UsageError(f"{arg[1:]}: no such file") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"{arg[1:]}: not UTF-8 text (byte {exc.start})") from None
    return arg


def message_type(name: str) -> type[Message]:
    """The generated class of a spec name, or a UsageError that suggests the nearest names."""
    try:
        return message_class(name)
    except KeyError:
        folded = [n for n in spec_names() if n.lower() == name.lower()]  # names are case-insensitive, as --api
        if len(folded) == 1:
            return message_class(folded[0])
        close = difflib.get_close_matches(name, spec_names(), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (kprotocol message list shows them all)"
        raise UsageError(f"unknown message {name!r}{hint}") from None


def count(text: str) -> int:
    """An argparse type for -c/--count (--max-records): a number of items, 0 meaning none."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a number of at least 0, not {text!r}")
    return int(text)


def checked_version(cls: type[Message], version: int) -> int:
    low, high = cls.valid_versions
    if not low <= version <= high:
        raise UsageError(f"{cls.__name__} has no version {version} (valid: {low}-{high})")
    return version


def host_port(text: str) -> tuple[str, int]:
    """An argparse type: `HOST:PORT` (IPv6 hosts in brackets; an empty host is 127.0.0.1)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)

"""Packets of a pcap or pcapng capture, streamed from a file in bounded memory.

    for packet in read_packets(open("x.pcapng", "rb")):
        packet.number, packet.time, packet.link_type, packet.data

pcap: both byte orders, microsecond and nanosecond timestamps. pcapng: section header blocks in
either byte order (several sections), interface description blocks (link type, `if_tsresol`),
enhanced and simple packet blocks; other blocks are skipped by their length. Packets are numbered
from 1 as Wireshark numbers them.

Damage (a bad block or record length, a truncated file) raises a CaptureError that names its
offset, after every packet before it has been yielded. With `problems=[]`, the error is appended
there instead and reading resumes at the next plausible block or record of a seekable file (a
pcapng block whose trailing length matches its leading one; a pcap record header whose lengths
fit and whose time is within a day of the last packet's), so packets after the damage are kept.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from kprotocol.errors import DecodeError

PCAP_MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
              b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}
PCAPNG_SHB = 0x0A0D0D0A
BYTE_ORDER_MAGIC = 0x1A2B3C4D
IDB, SPB, EPB, OLD_PACKET = 1, 3, 6, 2
MAX_BLOCK = 256 << 20  # larger than any packet a capture tool writes (snaplen is at most 256 KiB)
TSRESOL = 9
MAX_PACKET = 256 << 10  # Wireshark's largest standard packet
MAX_SCAN = 1 << 20  # how far past damage to look for the next block or record
PAST_END = 1 << 62  # the offset of a reader that found nothing plausible after damage: past any end


class CaptureError(DecodeError):
    """A capture file that cannot be read further (bad magic, block length, truncation)."""


@dataclass(frozen=True, slots=True)
class Packet:
    number: int          # 1-based, in file order
    time: float          # seconds since the epoch
    link_type: int       # LINKTYPE_* of its interface
    data: bytes          # the captured bytes (possibly fewer than on the wire)
    original_length: int


def _read(stream: BinaryIO, size: int, offset: int, what: str) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise CaptureError(f"capture ends inside {what}: {len(data)} of {size} bytes", offset, what)
    return data


@dataclass(frozen=True, slots=True)
class Split:
    """A stretch of a capture file that can be read on its own: packets from the block or record at
    `offset` (numbered from `number` + 1) up to `end` (None: the end of the file), with the pcapng
    byte order and interfaces in effect there."""

    offset: int
    end: int | None
    number: int
    order: str = "<"
    interfaces: tuple[tuple[int, float], ...] = ()


@dataclass(slots=True)
class Position:
    """Where a reader is: the offset of the next block or record, the packets numbered before it, the
    pcapng byte order and interfaces in effect there, the last pcap timestamp (to judge resyncs)."""

    offset: int
    number: int = 0
    order: str = "<"
    interfaces: list[tuple[int, float]] = field(default_factory=list)
    last_time: int | None = None
    pending: bytes = b""  # bytes at `offset` already read from the stream (a pcapng's magic)


@dataclass(frozen=True, slots=True)
class Format:
    """What a capture's first bytes say: pcap (its byte order, time unit, link type and largest
    packet) or pcapng (`pcap` False)."""

    pcap: bool
    order: str = "<"
    unit: float = 1e-6
    link_type: int = 0
    limit: int = MAX_BLOCK


def read_packets(stream: BinaryIO, problems: list[CaptureError] | None = None,
                 split: Split | None = None) -> Iterator[Packet]:
    """Every packet of a pcap or pcapng stream, or of one `split` of it (see `plan_splits`); see the
    module docstring for `problems`."""
    kind, at = open_capture(stream, split)
    yield from packets_from(stream, kind, at, None if split is None else split.end, problems)


def open_capture(stream: BinaryIO, split: Split | None = None) -> tuple[Format, Position]:
    """Read a capture's header: its format, and the position of its first packet (or of `split`)."""
    magic = _magic(stream)
    if magic in PCAP_MAGIC:
        order, unit = PCAP_MAGIC[magic]
        header = _read(stream, 20, 4, "pcap file header")
        _, _, _, _, snaplen, link_type = struct.unpack(order + "HHiIII", header)
        limit = min(max(snaplen, MAX_PACKET), MAX_BLOCK)  # tools write packets past a small snaplen
        kind, at = Format(True, order, unit, link_type & 0x0FFFFFFF, limit), Position(24)
    else:
        kind, at = Format(False), Position(0, pending=magic)
    if split is not None:
        at = Position(split.offset, split.number, split.order, [*split.interfaces])
        stream.seek(at.offset)
    return kind, at


def packets_from(stream: BinaryIO, kind: Format, at: Position, end: int | None,
                 problems: list[CaptureError] | None) -> Iterator[Packet]:
    """The packets from `at` (moved along as they are read) up to offset `end` (None: the end)."""
    if kind.pcap:
        return _pcap(stream, kind, at, end, problems)
    return _pcapng(stream, at, end, problems)


def _magic(stream: BinaryIO) -> bytes:
    magic = stream.read(4)
    if len(magic) < 4:
        raise CaptureError("not a capture: fewer than 4 bytes", 0, "magic")
    if magic not in PCAP_MAGIC and struct.unpack("<I", magic)[0] != PCAPNG_SHB:
        raise CaptureError(f"not a pcap or pcapng file (magic {magic.hex()})", 0, "magic")
    return magic


def plan_splits(stream: BinaryIO, every: int) -> list[Split]:
    """Cut a seekable capture into splits of about `every` bytes at block or record boundaries,
    reading only headers (and pcapng interface blocks). Damage ends the walk: the last split then
    runs to the end of the file and its reader reports the damage and resumes after it."""
    magic = _magic(stream)
    splits: list[Split] = []
    if magic in PCAP_MAGIC:
        order, _ = PCAP_MAGIC[magic]
        (snaplen,) = struct.unpack(order + "I", _read(stream, 20, 4, "pcap file header")[12:16])
        limit = min(max(snaplen, MAX_PACKET), MAX_BLOCK)  # tools write packets past a small snaplen
        offset = start = 24
        number = first = 0
        while len(head := stream.read(16)) == 16:
            (captured,) = struct.unpack_from(order + "I", head, 8)
            if captured > limit:
                break
            offset += 16 + captured
            number += 1
            stream.seek(offset)
            if offset - start >= every:
                splits.append(Split(start, offset, first))
                start, first = offset, number
        return [*splits, Split(start, None, first)]
    stream.seek(0)
    offset = start = 0
    number = first = 0
    order, interfaces = "<", []
    state = (order, ())
    while len(head := stream.read(8)) == 8:
        if struct.unpack_from("<I", head)[0] == PCAPNG_SHB:
            bom = stream.read(4)
            if len(bom) < 4:
                break
            order = "<" if struct.unpack("<I", bom)[0] == BYTE_ORDER_MAGIC else ">"
            interfaces = []
        block_type, length = struct.unpack(order + "II", head)
        if length < 12 or length % 4 or length > MAX_BLOCK:
            break
        if block_type == IDB:
            stream.seek(offset + 8)
            body = stream.read(length - 12)
            if len(body) < length - 12 or len(body) < 8:
                break
            interfaces.append(_interface(body, order, offset))
        elif block_type in (EPB, SPB, OLD_PACKET):
            number += 1
        offset += length
        stream.seek(offset)
        if offset - start >= every:
            splits.append(Split(start, offset, first, *state))
            start, first = offset, number
        state = (order, tuple(interfaces))
    return [*splits, Split(start, None, first, *state)]


def _resume(stream: BinaryIO, problems: list[CaptureError] | None, error: CaptureError) -> bool:
    """Keep `error` and say whether to look for the next block, or raise it."""
    if problems is None or not stream.seekable():
        raise error
    problems.append(error)
    return True


def _pcap(stream: BinaryIO, kind: Format, at: Position, end: int | None,
          problems: list[CaptureError] | None) -> Iterator[Packet]:
    record = struct.Struct(kind.order + "IIII")
    while (end is None or at.offset < end) and (head := stream.read(16)):
        offset = at.offset
        try:
            if len(head) < 16:
                raise CaptureError(f"capture ends inside a packet header: {len(head)} of 16 bytes", offset, "packet")
            seconds, fraction, captured, original = record.unpack(head)
            if captured > kind.limit:
                raise CaptureError(f"packet length {captured} exceeds {kind.limit} bytes", offset, "packet")
            data = _read(stream, captured, offset + 16, "packet data")
        except CaptureError as error:
            _resume(stream, problems, error)
            found = _next_record(stream, offset + 1, record, kind.limit, at.last_time)
            if found is None:
                at.offset = PAST_END  # nothing plausible follows
                return
            at.offset = found
            continue
        at.number += 1
        at.last_time = seconds
        at.offset = offset + 16 + captured
        yield Packet(at.number, seconds + fraction * kind.unit, kind.link_type, data, original)


def _next_record(stream: BinaryIO, start: int, record: struct.Struct, limit: int,
                 last_time: int | None) -> int | None:
    """The offset of the next plausible pcap record header at or after `start` (the stream is left there)."""
    def plausible(raw: bytes, pos: int) -> bool:
        seconds, fraction, captured, original = record.unpack_from(raw, pos)
        return (captured <= limit and captured <= original <= MAX_BLOCK and fraction < 1_000_000_000
                and (last_time is None or abs(seconds - last_time) < 86400))

    stream.seek(start)
    window = stream.read(MAX_SCAN)
    for pos in range(0, max(0, len(window) - 15)):
        if not plausible(window, pos):
            continue
        (captured,) = struct.unpack_from(record.format[0] + "I", window, pos + 8)
        follower = pos + 16 + captured
        if follower == len(window) or (follower + 16 <= len(window) and plausible(window, follower)):
            stream.seek(start + pos)
            return start + pos
    return None


def _pcapng(stream: BinaryIO, at: Position, end: int | None,
            problems: list[CaptureError] | None) -> Iterator[Packet]:
    while (end is None or at.offset < end) and (block_type_raw := at.pending or stream.read(4)):
        offset, at.pending = at.offset, b""
        try:
            length, at.order, packet = _pcapng_block(stream, block_type_raw, offset, at.order, at.interfaces)
        except CaptureError as error:
            _resume(stream, problems, error)
            found = _next_block(stream, offset + 4, at.order)
            if found is None:
                at.offset = PAST_END  # nothing plausible follows
                return
            at.offset = found
            continue
        at.offset = offset + length
        if packet is not None:
            link_type, time, data, original = packet
            at.number += 1
            yield Packet(at.number, time, link_type, data, original)


def _next_block(stream: BinaryIO, start: int, order: str) -> int | None:
    """The offset of the next 4-aligned block whose trailing length matches its leading one."""
    start += -start % 4
    stream.seek(start)
    window = stream.read(MAX_SCAN)
    for pos in range(0, len(window) - 11, 4):
        block_type, length = struct.unpack_from(order + "II", window, pos)
        if block_type not in (EPB, SPB, IDB, OLD_PACKET, PCAPNG_SHB) or length < 12 or length % 4 or length > MAX_BLOCK:
            continue
        stream.seek(start + pos + length - 4)
        trailer = stream.read(4)
        if len(trailer) == 4 and struct.unpack(order + "I", trailer)[0] == length:
            stream.seek(start + pos)
            return start + pos
    return None


def _pcapng_block(stream: BinaryIO, block_type_raw: bytes, offset: int, order: str,
                  interfaces: list[tuple[int, float]]) -> tuple[int, str, tuple[int, float, bytes, int] | None]:
    """Read the rest of one block: (its length, the byte order from here, its packet if any)."""
    packet = None
    if len(block_type_raw) < 4:
        raise CaptureError("capture ends inside a block type", offset, "block")
    length_raw = _read(stream, 4, offset + 4, "block length")
    if struct.unpack("<I", block_type_raw)[0] == PCAPNG_SHB:  # a new section: its own byte order
        bom = _read(stream, 4, offset + 8, "byte-order magic")
        order = "<" if struct.unpack("<I", bom)[0] == BYTE_ORDER_MAGIC else ">"
        if struct.unpack(order + "I", bom)[0] != BYTE_ORDER_MAGIC:
            raise CaptureError("section header with a bad byte-order magic", offset + 8, "section")
        (length,) = struct.unpack(order + "I", length_raw)
        _check_length(length, offset, 28)
        _read(stream, length - 12, offset + 12, "section header")
        interfaces.clear()
    else:
        (block_type,) = struct.unpack(order + "I", block_type_raw)
        (length,) = struct.unpack(order + "I", length_raw)
        _check_length(length, offset, 12)
        body = _read(stream, length - 12, offset + 8, "block body")
        _read(stream, 4, offset + length - 4, "block trailer")
        packet = _block(block_type, body, order, offset, interfaces)
    return length, order, packet


def _block(block_type: int, body: bytes, order: str, offset: int,
           interfaces: list[tuple[int, float]]) -> tuple[int, float, bytes, int] | None:
    """(link type, time, data, original length) of a packet block; records an interface block."""
    if block_type == IDB:
        interfaces.append(_interface(body, order, offset))
    elif block_type in (EPB, OLD_PACKET):
        if len(body) < 20:
            raise CaptureError("packet block shorter than its 20-byte header", offset, "packet")
        if block_type == EPB:
            interface, high, low, captured, original = struct.unpack_from(order + "IIIII", body)
        else:  # the obsolete packet block: a 16-bit interface id and a drop count
            interface, _, high, low, captured, original = struct.unpack_from(order + "HHIIII", body)
        if interface >= len(interfaces):
            raise CaptureError(f"packet on undeclared interface {interface}", offset + 8, "interface")
        if 20 + captured > len(body):
            raise CaptureError(f"packet of {captured} bytes overruns its block", offset, "packet")
        link_type, unit = interfaces[interface]
        return link_type, ((high << 32) | low) * unit, body[20:20 + captured], original
    elif block_type == SPB:
        if not interfaces:
            raise CaptureError("simple packet before any interface", offset, "interface")
        (original,) = struct.unpack_from(order + "I", body)
        return interfaces[0][0], 0.0, body[4:4 + min(original, len(body) - 4)], original
    return None


def _check_length(length: int, offset: int, minimum: int) -> None:
    if length < minimum or length % 4 or length > MAX_BLOCK:
        raise CaptureError(f"block length {length} is not a multiple of 4 in {minimum}..{MAX_BLOCK}", offset + 4,
                           "block")


def _interface(body: bytes, order: str, offset: int) -> tuple[int, float]:
    """(link type, seconds per timestamp unit) of an interface description block."""
    link_type, _, _ = struct.unpack_from(order + "HHI", body)
    unit = 1e-6
    pos = 8
    while pos + 4 <= len(body):
        code, size = struct.unpack_from(order + "HH", body, pos)
        if code == 0:
            break
        if code == TSRESOL and size >= 1:
            value = body[pos + 4]
            unit = 2.0 ** -(value & 0x7F) if value & 0x80 else 10.0 ** -value
        pos += 4 + size + (-size % 4)
    return link_type, unit

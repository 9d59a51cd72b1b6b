"""Packets of a pcap or pcapng capture, streamed from a file in bounded memory.

    for packet in read_packets(open("x.pcapng", "rb")):
        packet.number, packet.time, packet.link_type, packet.data

pcap: both byte orders, microsecond and nanosecond timestamps. pcapng: section header blocks in
either byte order (several sections), interface description blocks (link type, `if_tsresol`),
enhanced and simple packet blocks; other blocks are skipped by their length. Packets are numbered
from 1 as Wireshark numbers them. A damaged block ends the file with a CaptureError that names its
offset; every packet before it has been yielded.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from kprotocol.errors import DecodeError

PCAP_MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
              b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}
PCAPNG_SHB = 0x0A0D0D0A
BYTE_ORDER_MAGIC = 0x1A2B3C4D
IDB, SPB, EPB, OLD_PACKET = 1, 3, 6, 2
MAX_BLOCK = 256 << 20  # larger than any packet a capture tool writes (snaplen is at most 256 KiB)
TSRESOL = 9


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


def read_packets(stream: BinaryIO) -> Iterator[Packet]:
    """Every packet of a pcap or pcapng stream."""
    magic = stream.read(4)
    if len(magic) < 4:
        raise CaptureError("not a capture: fewer than 4 bytes", 0, "magic")
    if magic in PCAP_MAGIC:
        yield from _pcap(stream, magic)
    elif struct.unpack("<I", magic)[0] == PCAPNG_SHB:
        yield from _pcapng(stream, magic)
    else:
        raise CaptureError(f"not a pcap or pcapng file (magic {magic.hex()})", 0, "magic")


def _pcap(stream: BinaryIO, magic: bytes) -> Iterator[Packet]:
    order, unit = PCAP_MAGIC[magic]
    header = _read(stream, 20, 4, "pcap file header")
    _, _, _, _, snaplen, link_type = struct.unpack(order + "HHiIII", header)
    record = struct.Struct(order + "IIII")
    offset, number = 24, 0
    while head := stream.read(16):
        if len(head) < 16:
            raise CaptureError(f"capture ends inside a packet header: {len(head)} of 16 bytes", offset, "packet")
        seconds, fraction, captured, original = record.unpack(head)
        if captured > MAX_BLOCK:
            raise CaptureError(f"packet length {captured} exceeds {MAX_BLOCK} bytes", offset, "packet")
        data = _read(stream, captured, offset + 16, "packet data")
        number += 1
        yield Packet(number, seconds + fraction * unit, link_type & 0x0FFFFFFF, data, original)
        offset += 16 + captured


def _pcapng(stream: BinaryIO, first: bytes) -> Iterator[Packet]:
    offset, number = 0, 0
    order = "<"
    interfaces: list[tuple[int, float]] = []  # (link type, seconds per timestamp unit), per section
    block_type_raw = first
    while block_type_raw:
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
            interfaces = []
        else:
            (block_type,) = struct.unpack(order + "I", block_type_raw)
            (length,) = struct.unpack(order + "I", length_raw)
            _check_length(length, offset, 12)
            body = _read(stream, length - 12, offset + 8, "block body")
            _read(stream, 4, offset + length - 4, "block trailer")
            packet = _block(block_type, body, order, offset, interfaces)
            if packet is not None:
                link_type, time, data, original = packet
                number += 1
                yield Packet(number, time, link_type, data, original)
        offset += length
        block_type_raw = stream.read(4)


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

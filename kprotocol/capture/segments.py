"""TCP segments out of captured packets: link layer, IPv4/IPv6, TCP.

Link types: Ethernet (with 802.1Q/802.1ad VLAN tags), Linux cooked v1 and v2 (`-i any`), raw IP
and BSD/OpenBSD loopback. Anything that is not a TCP segment (ARP, UDP, a later IP fragment) is
passed over; a packet too short for the headers it claims is reported as a `SegmentProblem`, and
reading goes on with the next packet.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from kprotocol.capture.files import Packet

ETHERNET, RAW, RAW_12, RAW_14, LINUX_SLL, LINUX_SLL2, NULL, LOOP = 1, 101, 12, 14, 113, 276, 0, 108
IPV4, IPV6, VLAN_TAGS = 0x0800, 0x86DD, (0x8100, 0x88A8, 0x9100)
TCP = 6
IPV6_EXTENSIONS = {0, 43, 60}  # hop-by-hop, routing, destination options: skipped by their length
FLAG_FIN, FLAG_SYN, FLAG_RST = 0x01, 0x02, 0x04


class TcpSegment(NamedTuple):
    """One captured TCP segment (a tuple: cheap to build, to sort by packet number and to pickle)."""

    number: int
    time: float
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class SegmentProblem:
    number: int
    message: str


class _Short(Exception):
    pass


def _network(packet: Packet) -> tuple[int, bytes] | None:
    """(ethertype, network-layer bytes) of a packet, or None for a link type without IP."""
    data, link = packet.data, packet.link_type
    if link == ETHERNET:
        if len(data) < 14:
            raise _Short("Ethernet header")
        (ethertype,) = struct.unpack_from(">H", data, 12)
        pos = 14
        while ethertype in VLAN_TAGS:
            if len(data) < pos + 4:
                raise _Short("VLAN tag")
            (ethertype,) = struct.unpack_from(">H", data, pos + 2)
            pos += 4
        return ethertype, data[pos:]
    if link == LINUX_SLL:
        if len(data) < 16:
            raise _Short("Linux cooked header")
        return struct.unpack_from(">H", data, 14)[0], data[16:]
    if link == LINUX_SLL2:
        if len(data) < 20:
            raise _Short("Linux cooked v2 header")
        return struct.unpack_from(">H", data, 0)[0], data[20:]
    if link in (RAW, RAW_12, RAW_14):
        if not data:
            raise _Short("IP header")
        return (IPV4 if data[0] >> 4 == 4 else IPV6), data
    if link in (NULL, LOOP):
        if len(data) < 4:
            raise _Short("loopback header")
        family = struct.unpack_from(">I" if link == LOOP else "<I", data)[0]
        if family > 0xFFFF:  # written in the other byte order
            family = struct.unpack_from("<I" if link == LOOP else ">I", data)[0]
        return (IPV4 if family == socket.AF_INET else IPV6), data[4:]
    return None


def _transport(ethertype: int, ip: bytes) -> tuple[str, str, bytes] | None:
    """(source, destination, TCP bytes) of an IP packet carrying TCP, or None."""
    if ethertype == IPV4:
        if len(ip) < 20:
            raise _Short("IPv4 header")
        header = (ip[0] & 0x0F) * 4
        (total,) = struct.unpack_from(">H", ip, 2)
        (fragment,) = struct.unpack_from(">H", ip, 6)
        if ip[9] != TCP or fragment & 0x1FFF:  # not TCP, or not the first fragment
            return None
        if header < 20 or len(ip) < header:
            raise _Short("IPv4 options")
        end = min(len(ip), total) if total else len(ip)  # TSO captures write a total length of 0
        return socket.inet_ntop(socket.AF_INET, ip[12:16]), socket.inet_ntop(socket.AF_INET, ip[16:20]), ip[header:end]
    if ethertype == IPV6:
        if len(ip) < 40:
            raise _Short("IPv6 header")
        (payload_length,) = struct.unpack_from(">H", ip, 4)
        next_header, pos = ip[6], 40
        while next_header in IPV6_EXTENSIONS:
            if len(ip) < pos + 8:
                raise _Short("IPv6 extension header")
            next_header, pos = ip[pos], pos + (ip[pos + 1] + 1) * 8
        if next_header != TCP:
            return None
        end = min(len(ip), 40 + payload_length) if payload_length else len(ip)
        return socket.inet_ntop(socket.AF_INET6, ip[8:24]), socket.inet_ntop(socket.AF_INET6, ip[24:40]), ip[pos:end]
    return None


def tcp_segments(packets: Iterable[Packet]) -> Iterator[TcpSegment | SegmentProblem]:
    """The TCP segments of `packets`, in capture order, and a problem for each unreadable packet."""
    for packet in packets:
        try:
            network = _network(packet)
            transport = _transport(*network) if network else None
            if transport is None:
                continue
            src, dst, tcp = transport
            if len(tcp) < 20 or len(tcp) < (tcp[12] >> 4) * 4:
                raise _Short("TCP header")
        except _Short as short:
            yield SegmentProblem(packet.number, f"packet {packet.number} is too short for its {short}")
            continue
        sport, dport, seq, ack = struct.unpack_from(">HHII", tcp)
        yield TcpSegment(packet.number, packet.time, src, sport, dst, dport, seq, ack, tcp[13],
                         tcp[(tcp[12] >> 4) * 4:])

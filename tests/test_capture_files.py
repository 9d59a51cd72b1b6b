"""Reading pcap and pcapng captures: both formats and byte orders, timestamps, damaged files."""

from __future__ import annotations

import io
import random

import dpkt
import pytest

from kprotocol.capture import CaptureError, read_packets

PACKETS = [(1_700_000_000.25 + i, bytes(random.Random(i).randrange(256) for _ in range(40 + i))) for i in range(20)]
ETHERNET = 1


def _pcap(nano: bool = False) -> bytes:
    out = io.BytesIO()
    writer = dpkt.pcap.Writer(out, linktype=ETHERNET, nano=nano)
    for ts, data in PACKETS:
        writer.writepkt(data, ts=ts)
    return out.getvalue()


def _pcapng() -> bytes:
    out = io.BytesIO()
    writer = dpkt.pcapng.Writer(out, linktype=ETHERNET)
    for ts, data in PACKETS:
        writer.writepkt(data, ts=ts)
    return out.getvalue()


def _swapped_pcap() -> bytes:
    """The same capture written big-endian."""
    raw = _pcap()
    out = bytearray(b"\xa1\xb2\xc3\xd4")
    import struct

    out += struct.pack(">HHiIII", *struct.unpack_from("<HHiIII", raw, 4))
    pos = 24
    while pos < len(raw):
        fields = struct.unpack_from("<IIII", raw, pos)
        out += struct.pack(">IIII", *fields) + raw[pos + 16:pos + 16 + fields[2]]
        pos += 16 + fields[2]
    return bytes(out)


@pytest.mark.parametrize("capture", [_pcap(), _pcap(nano=True), _pcapng(), _swapped_pcap()],
                         ids=["pcap", "pcap-nano", "pcapng", "pcap-big-endian"])
def test_every_packet_with_its_number_time_and_bytes(capture: bytes) -> None:
    packets = list(read_packets(io.BytesIO(capture)))
    assert [p.number for p in packets] == list(range(1, len(PACKETS) + 1))
    assert [p.data for p in packets] == [data for _, data in PACKETS]
    assert all(abs(p.time - ts) < 1e-6 for p, (ts, _) in zip(packets, PACKETS))
    assert {p.link_type for p in packets} == {ETHERNET}


def test_damaged_files_keep_every_packet_before_the_damage() -> None:
    capture = _pcapng()
    cut = len(capture) - 30
    reader = read_packets(io.BytesIO(capture[:cut]))
    got = []
    with pytest.raises(CaptureError, match="capture ends inside"):
        for packet in reader:
            got.append(packet)
    assert [p.data for p in got] == [data for _, data in PACKETS[:len(got)]] and len(got) == len(PACKETS) - 1

    hostile = bytearray(capture)
    first_epb = capture.index(b"\x06\x00\x00\x00")
    hostile[first_epb + 4:first_epb + 8] = b"\xff\xff\xff\xff"  # a block length of 2^32-1
    with pytest.raises(CaptureError, match="block length"):
        list(read_packets(io.BytesIO(bytes(hostile))))
    for garbage in (b"", b"\x00\x01", bytes(random.Random(7).randrange(256) for _ in range(500))):
        with pytest.raises(CaptureError):
            list(read_packets(io.BytesIO(garbage)))


def _tcp_packet(payload: bytes, *, v6: bool = False, vlan: bool = False, seq: int = 1000) -> bytes:
    tcp = dpkt.tcp.TCP(sport=50000, dport=9092, seq=seq, ack=7, flags=dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH,
                       data=payload)
    if v6:
        ip = dpkt.ip6.IP6(src=bytes(15) + b"\x01", dst=bytes(15) + b"\x02", nxt=6, hlim=64, data=tcp,
                          plen=len(bytes(tcp)))
        ethertype = dpkt.ethernet.ETH_TYPE_IP6
    else:
        ip = dpkt.ip.IP(src=b"\x7f\x00\x00\x01", dst=b"\x7f\x00\x00\x02", p=6, data=tcp)
        ip.len = len(bytes(ip))
        ethertype = dpkt.ethernet.ETH_TYPE_IP
    frame = dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x00" * 6, type=ethertype, data=ip)
    raw = bytes(frame)
    if vlan:  # an 802.1Q tag between the MAC addresses and the ethertype
        raw = raw[:12] + b"\x81\x00\x00\x2a" + raw[12:]
    return raw + (b"\x00" * 6 if not v6 else b"")  # Ethernet padding after the IP packet


@pytest.mark.parametrize("v6,vlan", [(False, False), (True, False), (False, True)])
def test_tcp_segments_through_ethernet_vlan_ipv4_and_ipv6(v6: bool, vlan: bool) -> None:
    from kprotocol.capture.segments import TcpSegment, tcp_segments

    out = io.BytesIO()
    writer = dpkt.pcapng.Writer(out, linktype=ETHERNET)
    writer.writepkt(_tcp_packet(b"\x00\x00\x00\x04abcd", v6=v6, vlan=vlan), ts=1.5)
    writer.writepkt(b"\x00" * 10, ts=2.0)  # too short for an Ethernet header
    items = list(tcp_segments(read_packets(io.BytesIO(out.getvalue()))))
    segment, problem = items
    assert isinstance(segment, TcpSegment)
    assert (segment.sport, segment.dport, segment.seq, segment.payload) == (50000, 9092, 1000, b"\x00\x00\x00\x04abcd")
    assert segment.src == ("::1" if v6 else "127.0.0.1") and segment.number == 1
    assert problem.number == 2 and "too short" in problem.message

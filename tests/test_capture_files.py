"""Reading pcap and pcapng captures: both formats and byte orders, timestamps, damaged files."""

from __future__ import annotations

import io
import random
import tempfile

from pathlib import Path

import dpkt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprotocol.capture import CaptureError, read_packets

PACKETS = [(1_700_000_000.25 + i, bytes(random.Random(i).randrange(256) for _ in range(40 + i))) for i in range(20)]
ETHERNET = 1
CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"


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


def _reference(capture: bytes, split=None) -> tuple[list, list[str]]:
    """What the Python readers give: the TCP segments and problems, and the error that ended reading."""
    from kprotocol.capture.segments import tcp_segments

    problems: list[CaptureError] = []
    items: list = []
    try:
        items += tcp_segments(read_packets(io.BytesIO(capture), problems, split))
    except CaptureError as exc:
        problems.append(exc)
    return items, [str(p) for p in problems]


def _walked(capture: bytes, split=None, share=None) -> tuple[list, list[str]]:
    from kprotocol.capture.walk import Walk

    problems: list[CaptureError] = []
    items: list = []
    try:
        items += Walk(io.BytesIO(capture), problems, split, share)
    except CaptureError as exc:
        problems.append(exc)
    return items, [str(p) for p in problems]


def _walked_file(capture: bytes) -> tuple[list, list[str]]:
    """`_walked` from a file on disk, which `Walk` maps instead of reading."""
    from kprotocol.capture.walk import Walk

    problems: list[CaptureError] = []
    items: list = []
    with tempfile.TemporaryFile() as file:
        file.write(capture)
        file.seek(0)
        try:
            items += Walk(file, problems)
        except CaptureError as exc:
            problems.append(exc)
    return items, [str(p) for p in problems]


def _mixed(link_type: int, frame, nano: bool = False, pcapng: bool = True) -> bytes:
    """A capture of TCP segments (IPv4 and IPv6), a UDP datagram and a runt, framed by `frame`."""
    out = io.BytesIO()
    writer = (dpkt.pcapng.Writer(out, linktype=link_type) if pcapng
              else dpkt.pcap.Writer(out, linktype=link_type, nano=nano))
    for i in range(12):
        ip = _tcp_packet(bytes([i]) * (i * 97), v6=i % 3 == 0, seq=(2**32 - 50 + i * 7) % 2**32)[14:]
        if i == 5:
            ip = bytes(dpkt.ip.IP(src=b"\x0a\x00\x00\x01", dst=b"\x0a\x00\x00\x02", p=17,
                                  data=dpkt.udp.UDP(sport=53, dport=53, data=b"dns")))
        writer.writepkt(b"\x01" if i == 8 else frame(ip, i % 3 == 0), ts=1_700_000_000.123456 + i)
    return out.getvalue()


LINKS = {
    "ethernet": (1, lambda ip, v6: b"\x00" * 12 + (b"\x86\xdd" if v6 else b"\x08\x00") + ip),
    "sll": (113, lambda ip, v6: b"\x00" * 14 + (b"\x86\xdd" if v6 else b"\x08\x00") + ip),
    "sll2": (276, lambda ip, v6: (b"\x86\xdd" if v6 else b"\x08\x00") + b"\x00" * 18 + ip),
    "raw": (101, lambda ip, v6: ip),
    "null": (0, lambda ip, v6: (30 if v6 else 2).to_bytes(4, "little") + ip),
    "loop": (108, lambda ip, v6: (24 if v6 else 2).to_bytes(4, "big") + ip),
}


@pytest.mark.parametrize("link", sorted(LINKS))
@pytest.mark.parametrize("container", ["pcapng", "pcap", "pcap-nano"])
def test_the_compiled_walk_gives_what_the_python_readers_give(link: str, container: str) -> None:
    """`Walk` (the compiled walk with the Python readers for the rest) equals the Python readers item
    for item: every link type, IPv4/IPv6, non-TCP packets and runts among them, time units."""
    link_type, frame = LINKS[link]
    capture = _mixed(link_type, frame, nano=container == "pcap-nano", pcapng=container == "pcapng")
    reference = _reference(capture)
    assert len(reference[0]) == 11 and sum(hasattr(item, "payload") for item in reference[0]) == 10
    assert _walked(capture) == reference == _walked_file(capture)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["clients.pcapng", "clients.pcap", "data.pcap"]), st.data())
def test_the_compiled_walk_equals_the_python_readers_on_damaged_captures(name: str, data: st.DataObject) -> None:
    """Bytes flipped, lengths overwritten, stretches cut out or the end truncated: the same segments,
    the same problems (offsets included), from the compiled walk and from the Python readers, whole or
    split."""
    from kprotocol.capture.files import plan_splits

    capture = bytearray((CAPTURES / name).read_bytes()[:60_000])
    for _ in range(data.draw(st.integers(0, 4))):
        if len(capture) < 4:
            break
        at = data.draw(st.integers(0, len(capture) - 4))
        edit = data.draw(st.sampled_from(["flip", "length", "cut", "truncate"]))
        if edit == "flip":
            capture[at] ^= 1 << data.draw(st.integers(0, 7))
        elif edit == "length":
            capture[at:at + 4] = data.draw(st.sampled_from([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x0c\x00\x00\x00"]))
        elif edit == "cut":
            del capture[at:at + data.draw(st.integers(1, 3000))]
        else:
            del capture[at:]
    raw = bytes(capture)
    assert _walked(raw) == _reference(raw) == _walked_file(raw)
    _check_shares(raw, PORTS[name])
    try:
        splits = plan_splits(io.BytesIO(raw), data.draw(st.integers(500, 20_000)))
    except CaptureError:
        return
    for split in splits:
        assert _walked(raw, split) == _reference(raw, split)


PORTS = {"clients.pcapng": 60127, "clients.pcap": 60127, "data.pcap": 36897}


def _check_shares(raw: bytes, port: int) -> None:
    """For n processes: each one's compiled walk keeps exactly the segments the Python `Sharing` gives
    it out of the Python readers' items, every problem included, and the n shares together hold every
    segment on the Kafka port once."""
    from kprotocol.capture.segments import SegmentProblem
    from kprotocol.capture.walk import Sharing, sharing

    reference, messages = _reference(raw)
    kafka = [i for i in reference if not isinstance(i, SegmentProblem) and port in (i.sport, i.dport)]
    for n in (2, 3):
        kept = []
        for k in range(n):
            python = Sharing(k, n, [port])
            expected = [i for i in reference if isinstance(i, SegmentProblem)
                        or python.keeps(i.sport, i.dport, len(i.payload))]
            compiled = sharing(k, n, [port])
            assert _walked(raw, share=compiled) == (expected, messages)
            assert compiled.loads == python.loads
            kept += [i for i in expected if not isinstance(i, SegmentProblem)]
        assert sorted(kept) == sorted(kafka)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
       st.lists(st.tuples(st.integers(0, 65535), st.integers(0, 65535), st.integers(0, 70_000)), max_size=300),
       st.lists(st.integers(0, 65535), min_size=1, max_size=3))
def test_the_compiled_sharing_agrees_with_the_python_one(share: tuple[int, int], segments: list, ports: list) -> None:
    """Port pairs (either direction) go to the process with the fewest bytes so far, alike in C and Python;
    segments on no Kafka port belong to nobody."""
    from kprotocol.capture import walk

    n, k = share
    segments += [(ports[0], sport, length) for sport, _, length in segments[:50]]  # replies, and reuse
    python, compiled = walk.Sharing(k, n, ports), walk._walk.Sharing(k, n, tuple(ports))
    for sport, dport, length in segments:
        kept = python.keeps(sport, dport, length)
        assert compiled.keeps(sport, dport, length) is kept
        assert not kept or sport in ports or dport in ports
    assert compiled.loads == python.loads
    answers: dict[frozenset[int], bool] = {}
    again = walk.Sharing(k, n, ports)
    for sport, dport, length in segments:  # a pair stays with one process, whichever way its segments go
        kept = again.keeps(sport, dport, length)
        assert answers.setdefault(frozenset((sport, dport)), kept) is kept
    with pytest.raises(ValueError):
        walk._walk.Sharing(n, n, tuple(ports))
    with pytest.raises(ValueError):
        walk.Sharing(n, n, ports)


class _Unseekable(io.RawIOBase):
    """A stream that can only be read forward (a pipe)."""

    def __init__(self, data: bytes) -> None:
        self.inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        chunk = self.inner.read(len(buffer))
        buffer[:len(chunk)] = chunk
        return len(chunk)


@pytest.mark.parametrize("name", ["clients.pcapng", "clients.pcap"])
def test_a_stream_that_cannot_seek_is_read_by_the_python_readers(name: str) -> None:
    from kprotocol.capture.walk import Walk

    raw = (CAPTURES / name).read_bytes()
    walk = Walk(io.BufferedReader(_Unseekable(raw)))
    assert list(walk) == _reference(raw)[0] and walk.packets == 884

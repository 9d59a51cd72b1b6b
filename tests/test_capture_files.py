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

"""Hostile inputs for the capture and stream parsers: memory stays flat and time linear.

A capture of many one-packet connections, streams of zeros (a size-0 frame every 4 bytes), streams
of orphan responses, captures of unreadable packets and pcapng files of many interface blocks.
The heavy runs are measured in a subprocess (peak RSS from the kernel's VmHWM). `KPROTOCOL_SCALE=1` runs the
capture of a million connections (70 MB, `make capture-scale`) instead of 100,000.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kprotocol import encode_request, encode_response, message_class
from kprotocol.capture.decode import decode_capture, decode_segments
from kprotocol.capture.exchanges import MAX_ORPHANS, Connection
from kprotocol.capture.segments import TcpSegment

SCALE = bool(os.environ.get("KPROTOCOL_SCALE"))
MEASURE = """
import re, runpy, sys, time
start = time.process_time()
sys.argv = {argv!r}
try:
    runpy.run_module("kprotocol", run_name="__main__")
except SystemExit as exc:
    status = exc.code
with open("/proc/self/status") as status_file:  # VmHWM: this program's peak (ru_maxrss keeps the forking parent's)
    peak = int(re.search(r"VmHWM:\\s+(\\d+)", status_file.read()).group(1)) // 1024
print("MEASURED", status, time.process_time() - start, peak, file=sys.stderr)
"""


def _measured(*argv: str, timeout: float) -> tuple[str, int, float, int]:
    """(stdout, exit status, CPU seconds, peak RSS in MiB) of `python -m kprotocol ARGV`."""
    done = subprocess.run([sys.executable, "-c", MEASURE.format(argv=["kprotocol", *argv])], capture_output=True,
                          text=True, timeout=timeout)
    status, cpu, rss = done.stderr.rsplit("MEASURED ", 1)[1].split()
    return done.stdout, int(status), float(cpu), int(rss)


def one_packet_connections(path: Path, count: int, port: int = 9092) -> None:
    """A pcap of `count` connections of one packet each (a SYN from its own address), 70 bytes a packet."""
    with path.open("wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(count):
            tcp = struct.pack(">HHIIBBHHH", 1024 + i % 60000, port, i, 0, 5 << 4, 0x02, 65535, 0, 0)
            ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 6, 0, bytes((10, i >> 16 & 255, i >> 8 & 255,
                                                                                 i & 255)), b"\x0a\xff\x00\x01")
            frame = b"\x00" * 12 + b"\x08\x00" + ip + tcp
            out.write(struct.pack("<IIII", 1000 + i // 1000, i % 1000 * 1000, len(frame), len(frame)) + frame)


def test_connections_cost_nothing_once_settled(tmp_path: Path) -> None:
    count = 1_000_000 if SCALE else 100_000
    capture = tmp_path / "connections.pcap"
    one_packet_connections(capture, count)
    assert capture.stat().st_size == 24 + 70 * count
    out, status, cpu, rss = _measured("capture", "summary", str(capture), "--format", "json",
                                      timeout=900 if SCALE else 300)
    summary = json.loads(out)
    assert (summary["connections"], summary["rows"], summary["problems"], status) == (count, [], 0, 0)
    print(f"\n{count} one-packet connections: {cpu:.1f} s CPU, peak RSS {rss} MiB")
    assert rss < 300  # 4.3 KB a connection kept was 430 MB at 100,000, 4.3 GB at a million


def test_a_stream_of_zeros_is_two_problems_in_flat_memory(tmp_path: Path) -> None:
    zeros = tmp_path / "zeros.bin"
    with zeros.open("wb") as out:
        for _ in range(20):
            out.write(bytes(1 << 20))
    out, status, cpu, rss = _measured("frames", "decode", str(zeros), str(zeros), timeout=300)
    lines = [json.loads(line) for line in out.splitlines()]
    count = 20 * (1 << 20) // 4
    assert status == 1 and lines == [
        {"error": f"request stream: {20 << 20} bytes frame of size 0 (no header)", "requestOffset": 0,
         "count": count, "lastOffset": (20 << 20) - 4},
        {"error": f"response stream: {20 << 20} bytes frame of size 0 (no header)", "responseOffset": 0,
         "count": count, "lastOffset": (20 << 20) - 4}]
    print(f"\n20 MB of zeros each way: {cpu:.1f} s CPU, peak RSS {rss} MiB")
    assert rss < 200 and cpu < 30  # was 700 MB and 60 s


def _response(correlation_id: int) -> bytes:
    header = message_class("ResponseHeader")(correlation_id=correlation_id)
    return encode_response(header, message_class("MetadataResponse")(cluster_id="k" * 200), 12)


def test_repeated_problems_and_orphans_of_one_stream_are_counted() -> None:
    connection = Connection(("client", 1), ("server", 2), 0, synced=True)
    tiny = b"".join(struct.pack(">i", 3) + b"abc" + bytes(4) for _ in range(1000))  # alternating kinds
    assert connection.stream_bytes(True, 0, tiny) == []
    orphans = b"".join(_response(i) for i in range(5000))
    assert connection.stream_bytes(False, 0, orphans) == []
    assert connection.finish() == []
    assert [p.to_json() for p in connection.problems] == [
        {"conn": connection.name, "direction": "request", "offset": 0, "length": 7000,
         "reason": "request frame too short for its header", "count": 1000, "lastOffset": 10989},
        {"conn": connection.name, "direction": "request", "offset": 7, "length": 4000,
         "reason": "frame of size 0 (no header)", "count": 1000, "lastOffset": 10996}]
    kept = connection.orphans
    size = len(_response(0))
    assert len(kept) == MAX_ORPHANS and len({o.correlation_id for o in kept}) == MAX_ORPHANS
    assert all(o.frame.offset == o.correlation_id * size for o in kept)
    assert sum(o.count for o in kept) == 5000 and kept[-1].count == 5000 - MAX_ORPHANS + 1
    assert kept[-1].last_offset is not None and kept[-1].last_offset % size == 0
    assert all(len(o.frame.data) <= 64 for o in kept)  # what their JSON shows, not the whole frame
    assert kept[-1].to_json()["count"] == kept[-1].count


def test_unreadable_packets_of_one_kind_are_one_problem(tmp_path: Path) -> None:
    capture = tmp_path / "short.pcap"
    with capture.open("wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(20_000):
            frame = b"\x00" * 12 + b"\x08\x00" + (b"\x45" + bytes(9) if i % 2 else b"\x45\x00")
            out.write(struct.pack("<IIII", 1000, i, len(frame), len(frame)) + frame)
    decoded = decode_capture(capture)
    assert list(decoded) == []
    assert [p.to_json() for p in decoded.problems] == [
        {"packet": 1, "offset": None, "reason": "packet 1 is too short for its IPv4 header", "count": 20_000,
         "lastPacket": 20_000}]


def test_pcapng_interface_blocks_take_linear_time(tmp_path: Path) -> None:
    """100,000 interface blocks (2 MB) and a packet on the last one: was 24 s (each walk call copied them all)."""
    capture = tmp_path / "interfaces.pcapng"
    blocks = [struct.pack("<II", 0x0A0D0D0A, 28) + struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)]
    blocks += [struct.pack("<IIHHII", 1, 20, 1, 0, 0, 20)] * 99_999
    blocks.append(struct.pack("<IIHHI", 1, 28, 101, 0, 0) + struct.pack("<HHI", 9, 1, 3) + struct.pack("<I", 28))
    tcp = struct.pack(">HHIIBBHHH", 50000, 9092, 1, 0, 5 << 4, 0x02, 65535, 0, 0)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 6, 0, b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02")
    body = struct.pack("<IIIII", 99_999, 0, 1_500, len(ip + tcp), len(ip + tcp)) + ip + tcp
    blocks.append(struct.pack("<II", 6, 12 + len(body)) + body + struct.pack("<I", 12 + len(body)))
    capture.write_bytes(b"".join(blocks))
    start = time.process_time()
    decoded = decode_capture(capture)
    assert list(decoded) == [] and decoded.problems == [] and decoded.packets == 1
    assert decoded.connections == 1  # the SYN on the last interface (raw IP, milliseconds) was read
    assert time.process_time() - start < 8


def _kafka_and_noise(noise_per_packet: int, idle_after: int | None = None) -> list[TcpSegment]:
    """A Kafka connection of five exchanges, each packet followed by SYNs of one-packet connections;
    with `idle_after`, the capture clock jumps 11 minutes after that many exchanges."""
    client, server = ("10.0.0.1", 50000), ("10.0.0.2", 9092)
    items: list = []
    seq = {client: 1000, server: 5000}
    clock = [1.0]

    def add(src: tuple[str, int], dst: tuple[str, int], payload: bytes, flags: int = 0x18) -> None:
        items.append(TcpSegment(len(items) + 1, clock[0], *src, *dst, seq[src], 0, flags, payload))
        seq[src] += len(payload) + (flags & 0x02 != 0)
        for _ in range(noise_per_packet):
            n = len(items)
            items.append(TcpSegment(n + 1, clock[0], f"10.1.{n >> 8 & 255}.{n & 255}", 40000 + n % 20000,
                                    *server, n, 0, 0x02, b""))

    add(client, server, b"", 0x02)
    add(server, client, b"", 0x12)
    for i in range(5):
        if idle_after is not None and i == idle_after:
            clock[0] += 660
        header = message_class("RequestHeader")(request_api_key=3, request_api_version=12, correlation_id=i,
                                                client_id="c")
        add(client, server, encode_request(header, message_class("MetadataRequest")(topics=())))
        add(server, client, encode_response(message_class("ResponseHeader")(correlation_id=i),
                                            message_class("MetadataResponse")(cluster_id="k"), 12))
    return items


def test_only_the_least_recently_active_connections_are_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kprotocol.capture.decode.MAX_OPEN", 20)
    decoded = decode_segments(_kafka_and_noise(10))
    exchanges = [e.to_json() for e in decoded]
    assert [e["correlationId"] for e in exchanges] == [0, 1, 2, 3, 4]
    assert all(e["response"] is not None and "noResponse" not in e for e in exchanges)
    assert decoded.connections == 1 + 12 * 10 and not decoded.problems and not decoded.orphans
    assert len(decoded._recent) <= 21 and len(decoded._table) <= 42  # the rest settled as they went


def test_a_connection_idle_longer_than_kafka_keeps_one_is_settled() -> None:
    decoded = decode_segments(_kafka_and_noise(1, idle_after=2))
    exchanges = [e.to_json() for e in decoded]
    # after 11 idle minutes the connection was settled: its later packets start a new one (no SYN),
    # found again by resynchronising on the next request
    assert [e["correlationId"] for e in exchanges] == [0, 1, 2, 3, 4]
    assert exchanges[2]["requestAfterResync"] and all(e["response"] is not None for e in exchanges)
    assert decoded.connections == 2 + 12

"""decode_capture on the kept capture of real clients (tcpdump on loopback: kafka-python,
librdkafka, Kafka's Java clients, Kafka Streams in both group protocols), its pcapng copy, and
copies edited the way real captures go wrong: duplicated, reordered and deleted packets, a
capture started late, truncated or damaged files. The judge of the byte streams is tshark's own
TCP reassembly (`-z follow,tcp,raw`), decoded frame by frame with kprotocol.conversation."""

from __future__ import annotations

import io
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import dpkt
import pytest

from kprotocol.capture import decode_capture, read_packets
from kprotocol.capture.files import Packet
from kprotocol.cli import main
from kprotocol.conversation import Conversation, RequestEvent, ResponseEvent
from kprotocol.toolchain.tcpdump import tool

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
PCAP, PCAPNG = CAPTURES / "clients.pcap", CAPTURES / "clients.pcapng"
PORT = 60127  # the port the clients connected to when the capture was made


def _streams_by_tshark(path: Path) -> dict[str, tuple[bytes, bytes]]:
    """conn -> (client bytes, server bytes) of every TCP stream, reassembled by tshark."""
    count = max(map(int, subprocess.run([tool("tshark"), "-r", str(path), "-T", "fields", "-e", "tcp.stream"],
                                        capture_output=True, text=True, check=True).stdout.split())) + 1
    follow = [x for n in range(count) for x in ("-z", f"follow,tcp,raw,{n}")]
    text = subprocess.run([tool("tshark"), "-r", str(path), "-q", *follow], capture_output=True, text=True,
                          check=True, timeout=300).stdout
    streams = {}
    for block in text.split("=" * 67):
        lines = block.strip().splitlines()
        if len(lines) < 4 or not lines[0].startswith("Follow"):
            continue
        node0, node1 = lines[2].split(": ")[1], lines[3].split(": ")[1]
        sent = {0: bytearray(), 1: bytearray()}
        for line in lines[4:]:
            sent[1 if line.startswith("\t") else 0] += bytes.fromhex(line.strip())
        client, server = (node0, node1) if node1.endswith(f":{PORT}") else (node1, node0)
        pair = (bytes(sent[0]), bytes(sent[1])) if client == node0 else (bytes(sent[1]), bytes(sent[0]))
        streams[f"{client}->{server}"] = pair
    return streams


def _expected(client: bytes, server: bytes) -> list[dict]:
    conversation = Conversation()
    requests = [e for e in conversation.client_bytes(client) if isinstance(e, RequestEvent)]
    responses = {e.header.correlation_id: e.to_json()["body"] for e in conversation.server_bytes(server)
                 if isinstance(e, ResponseEvent)}
    return [{"correlationId": r.header.correlation_id, "apiKey": r.api_key, "apiVersion": r.api_version,
             "clientId": r.header.client_id, "request": r.to_json()["body"],
             "response": responses.get(r.header.correlation_id)} for r in requests]


def _kafka(exchange: dict) -> dict:
    return {k: exchange.get(k) for k in ("correlationId", "apiKey", "apiVersion", "clientId", "request", "response")}


def _decode(source, ports=(PORT,)) -> tuple[dict[str, list[dict]], object]:
    capture = decode_capture(source, ports=ports)
    by_conn: dict[str, list[dict]] = defaultdict(list)
    for exchange in capture:
        by_conn[exchange.conn].append(exchange.to_json())
    return by_conn, capture


@pytest.fixture(scope="module")
def baseline() -> dict[str, list[dict]]:
    by_conn, capture = _decode(PCAP)
    assert not capture.problems and not capture.orphans
    return by_conn


@pytest.mark.parametrize("path", [PCAP, PCAPNG], ids=["pcap", "pcapng"])
def test_every_exchange_of_tsharks_streams_field_for_field(path: Path) -> None:
    by_conn, capture = _decode(path)
    streams = _streams_by_tshark(path)
    assert set(by_conn) == set(streams) and len(streams) == 42
    total = 0
    for conn, (client, server) in streams.items():
        got = by_conn[conn]
        assert [_kafka(e) for e in got] == _expected(client, server), conn
        total += len(got)
    assert total == 199 and not capture.problems and not capture.orphans
    assert {e["apiName"] for es in by_conn.values() for e in es} >= {
        "Produce", "Fetch", "JoinGroup", "SyncGroup", "StreamsGroupHeartbeat", "ConsumerGroupHeartbeat", "EndTxn"}


def test_frames_times_sizes_and_header_versions(baseline: dict[str, list[dict]]) -> None:
    packets = list(read_packets(PCAP.open("rb")))
    for exchanges in baseline.values():
        for e in exchanges:
            first, last = e["requestFrames"]
            assert 1 <= first <= last <= len(packets)
            assert e["requestTime"] == round(packets[last - 1].time, 6)
            if "response" in e:
                assert e["responseFrames"][0] >= first and e["responseTime"] >= e["requestTime"]
            assert e["requestHeaderVersion"] in (1, 2) and e.get("responseHeaderVersion", 0) in (0, 1)
            assert ("responseHeaderVersion" in e) == ("response" in e) != ("noResponse" in e)
            if e["apiKey"] == 18:
                assert e["responseHeaderVersion"] == 0  # ApiVersions responses keep the v0 header
    produce = [e for es in baseline.values() for e in es if e["apiName"] == "Produce"]
    batches = [b for e in produce for field in e["recordBatches"] for b in field["batches"]]
    assert batches and all(b["crcValid"] for b in batches)
    assert {b["compression"] for b in batches} >= {"gzip", "snappy", "lz4", "zstd"}
    assert all(f["path"].startswith("/request/topicData/") for e in produce for f in e["recordBatches"])


# ---------------------------------------------------------------- edited copies

def _write(packets: list[Packet]) -> io.BytesIO:
    out = io.BytesIO()
    writer = dpkt.pcap.Writer(out, linktype=packets[0].link_type, nano=True)
    for packet in packets:
        writer.writepkt(packet.data, ts=packet.time)
    out.seek(0)
    return out


def _packets() -> list[Packet]:
    return list(read_packets(PCAP.open("rb")))


def _payload(packet: Packet) -> bytes:
    ip = dpkt.ethernet.Ethernet(packet.data).data
    return bytes(ip.data.data)


def test_duplicated_and_reordered_packets_change_nothing(baseline: dict[str, list[dict]]) -> None:
    rng = random.Random(5)
    packets = _packets()
    edited = []
    for packet in packets:
        edited.append(packet)
        if rng.random() < 0.15:
            edited.append(packet)  # a retransmission
    for i in range(1, len(edited) - 1):
        if rng.random() < 0.2:
            edited[i], edited[i + 1] = edited[i + 1], edited[i]  # out of order
    by_conn, capture = _decode(_write(edited))
    assert {c: [_kafka(e) for e in es] for c, es in by_conn.items()} == {
        c: [_kafka(e) for e in es] for c, es in baseline.items()}
    assert not capture.problems


def test_deleted_packets_become_gaps_and_everything_else_is_kept(baseline: dict[str, list[dict]]) -> None:
    packets = _packets()
    data = [i for i, p in enumerate(packets) if _payload(p)]
    deleted = set(data[10::37])
    by_conn, capture = _decode(_write([p for i, p in enumerate(packets) if i not in deleted]))
    gaps = [p for p in capture.problems if getattr(p, "reason", "") == "not captured (a gap)"]
    assert gaps
    expected = {c: [_kafka(e) for e in es] for c, es in baseline.items()}
    intact = flagged = 0
    for conn, exchanges in by_conn.items():
        for e in exchanges:
            if any(e.get(k) for k in ("requestGap", "responseGap", "requestAfterResync", "responseAfterResync",
                                      "noResponse", "requestTruncated")):
                flagged += 1
                if e.get("noResponse"):
                    assert e["noResponseReason"] in ("lost: gap in the server stream", "request incomplete",
                                                     "not captured", "acks=0")
                if e.get("requestGap"):
                    assert e["request"] is None
                continue
            assert _kafka(e) in expected[conn]
            intact += 1
    total = sum(map(len, expected.values()))
    assert flagged and intact >= total - 3 * len(deleted)
    print(f"\n{len(deleted)} data packets deleted: {intact} of {total} exchanges intact, {flagged} flagged")


def test_a_capture_started_late_resynchronises(baseline: dict[str, list[dict]]) -> None:
    packets = _packets()
    expected = {c: [_kafka(e) for e in es] for c, es in baseline.items()}
    without_response = {c: [{**x, "response": None} for x in es] for c, es in expected.items()}
    resynced = 0
    for start in range(100, len(packets), 75):  # started past many SYNs, inside many streams
        by_conn, capture = _decode(_write(packets[start:]))
        for conn, exchanges in by_conn.items():
            for e in exchanges:
                if e.get("requestGap") or e.get("requestTruncated"):
                    continue
                assert _kafka(e) in expected[conn] or (
                    e.get("response") is None and {**_kafka(e), "response": None} in without_response[conn])
                resynced += bool(e.get("requestAfterResync"))
    assert resynced >= 5


def test_truncated_damaged_and_garbage_files_never_raise(tmp_path: Path) -> None:
    raw = PCAPNG.read_bytes()
    full = sum(1 for _ in decode_capture(io.BytesIO(raw), ports=(PORT,)))
    for cut in (10, 100, 5000, len(raw) // 2, len(raw) - 3):
        capture = decode_capture(io.BytesIO(raw[:cut]), ports=(PORT,))
        got = sum(1 for _ in capture)
        assert got <= full and capture.problems
        for original in (PCAPNG, PCAP):  # a file cut short on disk (a capture still being written)
            data = original.read_bytes()
            path = tmp_path / f"cut-{cut}{original.suffix}"
            path.write_bytes(data[:min(cut, len(data) - 3)])
            capture = decode_capture(path, ports=(PORT,))
            assert sum(1 for _ in capture) <= full and capture.problems
    # a block length of 2^32-1 in the middle: the packets before and after it are kept
    damaged = bytearray(raw)
    middle = damaged.index(b"\x06\x00\x00\x00", len(raw) // 2)
    damaged[middle + 4:middle + 8] = b"\xff\xff\xff\xff"
    capture = decode_capture(io.BytesIO(bytes(damaged)), ports=(PORT,))
    got = sum(1 for _ in capture)
    assert any("block length" in p.reason for p in capture.problems)
    assert capture.packets == len(_packets()) - 1 and got >= full - 3
    # garbage link layers and random bytes
    rng = random.Random(3)
    junk = [Packet(i + 1, 1.0 + i, 1, bytes(rng.randrange(256) for _ in range(rng.randrange(80))), 80)
            for i in range(300)]
    capture = decode_capture(_write(junk), ports=(PORT,))
    assert list(capture) == [] and capture.packets == 300
    capture = decode_capture(io.BytesIO(bytes(rng.randrange(256) for _ in range(5000))), ports=(PORT,))
    assert list(capture) == [] and capture.problems


def test_cli_decode_filters_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["capture", "decode", str(PCAP), "--ports", str(PORT), "--api", "JoinGroup", "--api", "14"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines and {e["apiName"] for e in lines} == {"JoinGroup", "SyncGroup"}
    assert any("decodedMetadata" in p for e in lines if e["apiName"] == "JoinGroup" for p in e["request"]["protocols"])
    assert main(["capture", "decode", str(PCAPNG), "--ports", str(PORT), "-c", "5"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5
    assert main(["capture", "summary", str(PCAP), "--ports", str(PORT), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sum(r["count"] for r in summary["rows"]) == 199 and summary["connections"] == 42
    assert main(["capture", "decode", str(CAPTURES / "missing.pcap")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_detection_finds_kafka_on_any_port(baseline: dict[str, list[dict]]) -> None:
    by_conn, capture = _decode(PCAP, ports=())
    assert by_conn == {}  # no Kafka port given, no detection: nothing
    detected = decode_capture(PCAP, ports=(), detect=True)
    found: dict[str, list[dict]] = defaultdict(list)
    for exchange in detected:
        found[exchange.conn].append(exchange.to_json())
    assert found == baseline  # every connection starts with ApiVersions: all of them are Kafka
    # a non-Kafka TCP conversation on another port is left alone
    rng = random.Random(9)
    junk = [_tcp(40000, 5555, i, bytes(rng.randrange(256) for _ in range(60))) for i in range(5)]
    assert list(decode_capture(_write(junk), ports=(), detect=True)) == []


def _tcp(sport: int, dport: int, number: int, payload: bytes) -> Packet:
    flags = dpkt.tcp.TH_SYN if number == 0 else dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH
    tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=1000 + 60 * number, flags=flags,
                       data=b"" if number == 0 else payload)
    ip = dpkt.ip.IP(src=b"\x7f\x00\x00\x01", dst=b"\x7f\x00\x00\x01", p=6, data=tcp)
    ip.len = len(bytes(ip))
    frame = dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x00" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
    return Packet(number + 1, 1.0 + number, 1, bytes(frame), len(bytes(frame)))


@pytest.mark.parametrize("jobs", [2, 3, 5])
def test_parallel_decode_writes_what_one_process_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    """`capture decode -j N`: each process decodes its share of the connections; the lines, the problems and
    the exit status equal a single process's, on the kept capture, a damaged copy (a block length of
    2^32-1, a truncated end) and a copy started late (connections without their SYN)."""
    if jobs == 5:
        monkeypatch.setattr("kprotocol.capture.parallel.BLOCK", 300)  # connections written in many blocks
    raw = PCAPNG.read_bytes()
    damaged = bytearray(raw)
    middle = damaged.index(b"\x06\x00\x00\x00", len(raw) // 2)
    damaged[middle + 4:middle + 8] = b"\xff\xff\xff\xff"
    (tmp_path / "damaged.pcapng").write_bytes(bytes(damaged[:-100]))
    late = _write(_packets()[len(_packets()) // 3:])
    (tmp_path / "late.pcap").write_bytes(late.getvalue())
    for path in (PCAP, tmp_path / "damaged.pcapng", tmp_path / "late.pcap"):
        outputs = []
        for args in (["-j", "1"], ["-j", str(jobs)], ["-j", str(jobs), "--api", "Fetch", "-c", "7"]):
            status = main(["capture", "decode", str(path), "--ports", str(PORT), *args])
            captured = capsys.readouterr()
            outputs.append((status, captured.out, sorted(captured.err.splitlines())))
        assert outputs[0][1].count("\n") > 20
        assert outputs[1] == outputs[0]
        fetches = [line for line in outputs[0][1].splitlines() if '"apiName":"Fetch"' in line][:7]
        assert outputs[2][1].splitlines() == fetches


def test_parallel_decode_to_a_file_and_a_pipe(tmp_path: Path) -> None:
    """With a real standard output, `-j N` hands the processes' blocks to the kernel (sendfile) to a file
    or a pipe: the bytes equal a single process's."""
    command = [sys.executable, "-m", "kprotocol", "capture", "decode", str(PCAPNG), "--ports", str(PORT)]
    single, parallel = tmp_path / "single.jsonl", tmp_path / "parallel.jsonl"
    with single.open("wb") as out:
        subprocess.run([*command, "-j", "1"], stdout=out, check=True)
    with parallel.open("wb") as out:
        subprocess.run([*command, "-j", "3"], stdout=out, check=True)
    piped = subprocess.run([*command, "-j", "2"], stdout=subprocess.PIPE, check=True).stdout
    assert single.read_bytes().count(b"\n") > 100
    assert parallel.read_bytes() == single.read_bytes() == piped


def _error_code_keys(node: object, out: dict[int, int]) -> dict[int, int]:
    """The reference: every non-zero "errorCode" key of a message's own JSON (no userdata annotations)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "errorCode" and isinstance(value, int) and value:
                out[value] = out.get(value, 0) + 1
            else:
                _error_code_keys(value, out)
    elif isinstance(node, list):
        for item in node:
            _error_code_keys(item, out)
    return out


@pytest.mark.parametrize("name, port", [("clients.pcap", PORT), ("data.pcap", 36897), ("sasl.pcap", None),
                                        ("gateway.pcap", None)])
def test_error_codes_and_json_without_records(name: str, port: int | None) -> None:
    """`error_codes` counts the errorCode fields of the decoded message, nested ones too, as its JSON
    has them; `to_json(records=False)` is `to_json()` with the raw records fields null."""
    from kprotocol.capture.exchanges import error_codes

    path = CAPTURES / name
    ports = (port,) if port else tuple({p for p in _ports(path)})
    found = exchanges = 0
    for exchange in decode_capture(path, ports):
        exchanges += 1
        for message in (exchange.request, exchange.response):
            if message is not None:
                expected = _error_code_keys(message.to_json(exchange.api_version), {})
                assert error_codes(message) == expected, exchange.conn
                found += sum(expected.values())
        full, lean = exchange.to_json(), exchange.to_json(records=False)
        for batches in full.get("recordBatches", []):
            *parents, leaf = batches["path"].split("/")[1:]
            node = full
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            assert node[leaf] is not None
            node[leaf] = None
        assert lean == full
    assert exchanges > 20 and (found or name in ("data.pcap", "gateway.pcap"))
    assert error_codes(None) == {}


def _ports(path: Path) -> set[int]:
    """The server ports of a capture: where the SYN-ACKs come from."""
    ports = set()
    for packet in read_packets(path.open("rb")):
        eth = dpkt.ethernet.Ethernet(packet.data) if packet.link_type == 1 else None
        tcp = getattr(getattr(eth, "data", None), "data", None)
        if isinstance(tcp, dpkt.tcp.TCP) and tcp.flags & dpkt.tcp.TH_SYN and tcp.flags & dpkt.tcp.TH_ACK:
            ports.add(tcp.sport)
    return ports

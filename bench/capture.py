"""Capture decoding: tshark -T json against `kprotocol capture decode` on the same merged capture.

    python bench/capture.py [--size-mb 1024] [--mix clients,data] [--keep DIR]

Builds one capture of about `--size-mb` from the kept real captures in fixtures/captures/ with
Wireshark's own tools (`editcap -t` shifts each copy in time, `mergecap -a` concatenates, doubling
until the size is reached), then runs, one after the other in this run:
- tshark with the Kafka dissector on the capture's ports, `-T json` to /dev/null,
- `kprotocol capture decode` (every exchange as a JSON line, records summarised) to /dev/null, in one
  process and in one per core (up to 4; its default on large captures),
and prints wall time, MB/s, packets/s, peak RSS of each (from wait4) and the ratio; then what the
compiled consumer-protocol and Streams userdata decoder (kprotocol.capture.payloads, _offsets.c) changes:
the JoinGroup/SyncGroup payloads of the kept captures decoded by it and by the Python reference
(kprotocol.group_payloads), per payload, and their share of the capture's decoding. kprotocol's
bytecode is compiled first, as a wheel install has it (PYTHONDONTWRITEBYTECODE would otherwise make
every process compile its modules again).
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kprotocol.capture import Exchange, read_packets  # noqa: E402
from kprotocol.toolchain.tcpdump import tool  # noqa: E402

FIXTURES = ROOT / "fixtures" / "captures"
PORTS = {"clients": 60127, "data": 36897}  # the broker ports of the kept captures


def build(mix: list[str], size_mb: int, directory: Path) -> Path:
    """One pcapng of about `size_mb` MB out of the kept captures of `mix`."""
    current = directory / "merged-0.pcapng"
    subprocess.run([tool("mergecap"), "-a", "-F", "pcapng", "-w", str(current),
                    *(str(FIXTURES / f"{name}.pcap") for name in mix)], check=True)
    step, round_ = 3600, 0
    while current.stat().st_size < size_mb * 1_000_000:
        round_ += 1
        shifted = directory / "shifted.pcapng"
        subprocess.run([tool("editcap"), "-t", str(step), str(current), str(shifted)], check=True,
                       capture_output=True)
        doubled = directory / f"merged-{round_}.pcapng"
        subprocess.run([tool("mergecap"), "-a", "-F", "pcapng", "-w", str(doubled), str(current), str(shifted)],
                       check=True)
        current.unlink()
        shifted.unlink()
        current, step = doubled, step * 2
    return current


def replicate(mix: list[str], size_mb: int, directory: Path) -> Path:
    """One pcap of about `size_mb` MB made of copies of the kept captures, each copy shifted in time
    and with its client ports renumbered, so that every copy is a different set of connections (as
    in a real capture of many clients; TCP checksums are not recomputed, no decoder here checks them)."""
    import dpkt

    kafka = set(PORTS[name] for name in mix)
    packets = [p for name in mix for p in read_packets((FIXTURES / f"{name}.pcap").open("rb"))]
    target = directory / "replicated.pcap"
    with target.open("wb") as out:
        writer = dpkt.pcap.Writer(out, linktype=packets[0].link_type, nano=True)
        copy, written = 0, 0
        while written < size_mb * 1_000_000:
            for packet in packets:
                data = bytearray(packet.data)
                tcp = 14 + (data[14] & 0x0F) * 4  # Ethernet, IPv4
                sport, dport = int.from_bytes(data[tcp:tcp + 2], "big"), int.from_bytes(data[tcp + 2:tcp + 4], "big")
                at, port = (tcp + 2, dport) if sport in kafka else (tcp, sport)
                data[at:at + 2] = (1024 + (7 * port + 4099 * copy) % 64000).to_bytes(2, "big")
                writer.writepkt(bytes(data), ts=packet.time + copy * 3600)
                written += len(data) + 16
            copy += 1
    return target


def group_payloads(mix: list[str], repeat: int = 200) -> str:
    """JoinGroup/SyncGroup payloads of the kept captures, decoded through the compiled path and through
    the Python reference: microseconds per exchange body each, and the share of the whole decode."""
    from kprotocol.capture import decode_capture
    from kprotocol.capture.payloads import annotate as compiled
    from kprotocol.group_payloads import annotate as reference

    bodies, start = [], time.perf_counter()
    for name in mix:
        for exchange in decode_capture(str(FIXTURES / f"{name}.pcap"), ports=(PORTS[name],)):
            if isinstance(exchange, Exchange):
                exchange.to_json()
                for message in (exchange.request, exchange.response):
                    if message is not None and type(message).__name__ in ("JoinGroupRequest", "JoinGroupResponse",
                                                                          "SyncGroupRequest", "SyncGroupResponse"):
                        bodies.append((message.to_json(exchange.api_version), message, exchange.protocol))
    whole = time.perf_counter() - start
    if not bodies:
        return "no JoinGroup/SyncGroup exchanges in the kept captures"
    timings = {}
    for label, annotate in (("compiled", compiled), ("Python", reference)):
        start = time.perf_counter()
        for _ in range(repeat):
            for doc, message, protocol in bodies:
                annotate(dict(doc), message, protocol)
        timings[label] = (time.perf_counter() - start) / repeat
    streams = sum(b"streamsUserData" in repr(compiled(dict(d), m, p)).encode() for d, m, p in bodies)
    return (f"JoinGroup/SyncGroup bodies in {'+'.join(mix)}: {len(bodies)} ({streams} with Kafka Streams userdata); "
            f"their payloads decoded in {timings['compiled'] / len(bodies) * 1e6:.0f} us per body compiled against "
            f"{timings['Python'] / len(bodies) * 1e6:.0f} us in Python ({timings['Python'] / timings['compiled']:.1f}x), "
            f"{timings['Python'] / whole:.1%} of the kept captures' whole decode in Python, "
            f"{timings['compiled'] / whole:.1%} compiled")


def run(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child, its output thrown away."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: problems were reported, the run is complete
        raise RuntimeError(f"{command[0]} failed with {status}")
    return elapsed, usage.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--mix", default="clients,data", help="kept captures to merge: clients, data")
    parser.add_argument("--keep", type=Path, help="build the merged capture here and keep it")
    args = parser.parse_args()
    mix = args.mix.split(",")
    ports = [PORTS[name] for name in mix]
    directory = args.keep or Path(tempfile.mkdtemp(prefix="kprotocol-capture-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        compileall.compile_dir(ROOT / "kprotocol", quiet=1)
        capture = build(mix, args.size_mb, directory)
        size = capture.stat().st_size
        with capture.open("rb") as stream:
            packets = sum(1 for _ in read_packets(stream))
        print(f"capture: {capture.name}, {size / 1e6:.0f} MB, {packets} packets, mix {'+'.join(mix)}")
        decode_as = [x for port in ports for x in ("-d", f"tcp.port=={port},kafka")]
        runs = {"tshark -T json": run([tool("tshark"), "-r", str(capture), *decode_as, "-T", "json"])}
        for jobs in sorted({1, min(os.cpu_count() or 1, 4)}):
            runs[f"kprotocol capture decode -j {jobs}"] = run([
                sys.executable, "-m", "kprotocol", "capture", "decode", str(capture),
                "--ports", ",".join(map(str, ports)), "-j", str(jobs)])
        print(f"{'tool':<26} {'seconds':>8} {'MB/s':>8} {'packets/s':>10} {'peak RSS MB':>12}")
        for name, (seconds, rss) in runs.items():
            print(f"{name:<26} {seconds:8.1f} {size / 1e6 / seconds:8.1f} {packets / seconds:10.0f} {rss / 1e6:12.0f}")
        (tshark, _), *ours = runs.values()
        for name, (seconds, _) in list(runs.items())[1:]:
            print(f"{name} / tshark throughput: {tshark / seconds:.1f}x")
        print(group_payloads(mix))
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()

"""`kprotocol offsets decode` beside Kafka's `kafka-dump-log --offsets-decoder --print-data-log`
(DumpLogSegments, from the jars kprotocol.toolchain resolves) on the same segments, both writing to a file.

    python bench/offsets.py [--size-mb 64] [--runs 5]

Inputs, generated in a temporary directory:
- mix: a `__consumer_offsets` segment written with kprotocol's writer, as a busy coordinator writes one:
  offset commits of a few hundred groups (a batch per commit of 1-16 partitions, values v3, or v4 with a
  topic id) make most records; between them classic Kafka Streams groups' GroupMetadata (members with
  SubscriptionInfo/AssignmentInfo userdata), KIP-848 consumer groups' and KIP-1071 streams groups'
  records (taken from the kept segments, renamed per group), and transactional commits with their markers.
- broker: the kept segment a real 4.x broker wrote (fixtures/kafka/data/__consumer_offsets-0), its
  batches tiled to the same size (base offsets rewritten: they sit outside the CRC).
Each run starts both tools in turn (the JVM's start included); the table has the medians of wall and
CPU seconds, and the ratio Kafka / kprotocol. The record counts of both outputs are checked first.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kprotocol.coordinator import CONSUMER_OFFSETS, decode_record, record_types  # noqa: E402
from kprotocol.records import Record, marker_record, read_segment, write_batch  # noqa: E402
from kprotocol.registry import message_class  # noqa: E402
from kprotocol.toolchain.broker import java_command  # noqa: E402

SAMPLE = ROOT / "kprotocol" / "samples" / "consumer-offsets.log"
BROKER = ROOT / "fixtures" / "kafka" / "data" / f"{CONSUMER_OFFSETS}-0" / "00000000000000000000.log"
DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"
T0 = 1_790_000_000_000
TYPES = record_types(CONSUMER_OFFSETS)
CONSUMER_TYPES = {3, 4, 5, 6, 7, 8, 16}
STREAMS_TYPES = set(range(17, 25))


def _templates() -> dict[str, list[tuple[int, bytes, bytes | None]]]:
    """Group records of the kept segments by kind (classic Streams, consumer, streams), as their
    current layouts (values a release before 4.4 wrote are left out)."""
    kinds: dict[str, list[tuple[int, bytes, bytes | None]]] = {"classic": [], "consumer": [], "streams": []}
    for path in (SAMPLE, BROKER):
        for batch in read_segment(path):
            for record in [] if batch.is_control else batch.records:
                decoded = decode_record(record.key, record.value)
                type_id, value = decoded["key"]["type"], decoded["value"]
                if value is None or "data" not in value or "layout" in value:
                    continue
                if type_id == 2 and value["data"]["protocol"] == "stream":
                    kinds["classic"].append((type_id, record.key, record.value))
                elif type_id in CONSUMER_TYPES:
                    kinds["consumer"].append((type_id, record.key, record.value))
                elif type_id in STREAMS_TYPES:
                    kinds["streams"].append((type_id, record.key, record.value))
    return kinds


def _renamed(type_id: int, key: bytes, group: str) -> bytes:
    record_type = TYPES[type_id]
    message = record_type.key.decode(key[2:], record_type.key_version)
    field = "group" if "group" in message._fields else "group_id"
    return key[:2] + message.replace(**{field: group}).encode(record_type.key_version)


def _commit(group: str, topic: str, partition: int, offset: int, at: int, topic_id: uuid.UUID | None) -> tuple:
    key = struct.pack(">h", 1) + TYPES[1].key(group=group, topic=topic, partition=partition).encode(0)
    value_cls, version = TYPES[1].value, 4 if topic_id else 3
    fields = {"offset": offset, "leader_epoch": 7, "metadata": "", "commit_timestamp": at}
    if topic_id:
        fields["topic_id"] = topic_id
    return key, struct.pack(">h", version) + value_cls(**fields).encode(version)


def generate_mix(path: Path, size: int, seed: int = 25) -> int:
    """The mixed segment of about `size` bytes; its record count. Per event: an offset commit (93%),
    a transactional one with its marker (1%), four records of a consumer group (3%) or of a streams
    group (3%), a classic Streams group's GroupMetadata (0.5%, a rebalance: about 6 KB with userdata)."""
    rng = random.Random(seed)
    templates = _templates()
    groups = [f"app-{i:03d}" for i in range(300)]
    topics = {g: (f"{g}-input", uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.5 else None) for g in groups}
    offsets: dict[tuple[str, int], int] = {}
    offset = written = 0
    at = T0
    with path.open("wb") as out:
        while written < size:
            at += rng.randint(1, 50)
            group = rng.choice(groups)
            event = rng.random()
            producer_id, transactional = -1, False
            if event < 0.005:
                pairs = [(_renamed(t, k, group), v) for t, k, v in [rng.choice(templates["classic"])]]
            elif event < 0.035:
                pairs = [(_renamed(t, k, group), v) for t, k, v in rng.sample(templates["consumer"], 4)]
            elif event < 0.065:
                pairs = [(_renamed(t, k, group), v) for t, k, v in rng.sample(templates["streams"], 4)]
            else:
                topic, topic_id = topics[group]
                first = rng.randrange(32)
                pairs = []
                for partition in range(first, first + rng.choice([1, 1, 2, 4, 8, 16])):
                    offsets[group, partition] = offsets.get((group, partition), 0) + rng.randint(1, 5000)
                    pairs.append(_commit(group, topic, partition, offsets[group, partition], at, topic_id))
                if event > 0.99:
                    producer_id, transactional = rng.randint(1000, 2000), True
            records = [Record(offset + i, at, k, v) for i, (k, v) in enumerate(pairs)]
            batch = write_batch(records, partition_leader_epoch=0, producer_id=producer_id, producer_epoch=0,
                                transactional=transactional)
            offset += len(records)
            if transactional:
                batch += write_batch([marker_record(True, 3, offset, at)], partition_leader_epoch=0,
                                     producer_id=producer_id, producer_epoch=0, transactional=True, control=True)
                offset += 1
            out.write(batch)
            written += len(batch)
    return offset


def generate_tiled(path: Path, size: int) -> int:
    """The real broker's segment, its batches repeated to about `size` bytes; its record count."""
    data, batches, pos = BROKER.read_bytes(), [], 0
    for batch in read_segment(BROKER):
        batches.append((data[pos:pos + batch.size], batch.last_offset - batch.base_offset + 1))
        pos += batch.size
    offset = written = 0
    with path.open("wb") as out:
        while written < size:
            for raw, count in batches:
                out.write(struct.pack(">q", offset) + raw[8:])
                offset += count
                written += len(raw)
    return offset


def timed(command: list[str], output: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, every thread) of `command` writing its stdout to `output`."""
    with output.open("wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{command[:3]}... exited {process.returncode}: {process.stderr.read()[-2000:]!r}")
    process.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def composition(path: Path) -> str:
    """Records and bytes of each kind of record in a segment."""
    records: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for batch in read_segment(path):
        for record in batch.records:
            kind = "marker" if batch.is_control else "commit" if record.key[1] in (0, 1) else \
                "classic GroupMetadata" if record.key[1] == 2 else "consumer group" if record.key[1] in CONSUMER_TYPES \
                else "streams group"
            records[kind] = records.get(kind, 0) + 1
            sizes[kind] = sizes.get(kind, 0) + len(record.key) + len(record.value or b"")
    total, size = sum(records.values()), sum(sizes.values())
    return ", ".join(f"{kind} {records[kind] / total:.1%} of records ({sizes[kind] / size:.0%} of bytes)"
                     for kind in sorted(records, key=records.get, reverse=True))


def _count(path: Path, prefix: bytes | None = None) -> int:
    with path.open("rb") as lines:
        return sum(1 for line in lines if prefix is None or line.startswith(prefix))


def measure(name: str, segment: Path, records: int, runs: int, work: Path) -> dict:
    ours = [sys.executable, "-m", "kprotocol", "offsets", "decode", str(segment), "--no-progress"]
    theirs = java_command(DUMP_LOG, "--files", str(segment), "--print-data-log", "--offsets-decoder")
    results: dict[str, list[tuple[float, float, int]]] = {"kprotocol": [], "kafka-dump-log": []}
    for run in range(runs):
        for tool, command in (("kprotocol", ours), ("kafka-dump-log", theirs))[:: 1 if run % 2 == 0 else -1]:
            output = work / f"{name}.{tool}.out"
            wall, cpu = timed(command, output)
            if run == 0:
                counted = _count(output) if tool == "kprotocol" else _count(output, b"| offset: ")
                assert counted == records, (tool, counted, records)
            results[tool].append((wall, cpu, output.stat().st_size))
            output.unlink()
    return {tool: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs), rs[0][2])
            for tool, rs in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--inputs", default="mix,broker", help="comma-separated: mix, broker")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "kprotocol")], check=True)
    work = Path(tempfile.mkdtemp(prefix="kprotocol-bench-offsets-"))
    rows = []
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    try:
        for name in args.inputs.split(","):
            segment = work / name / f"{CONSUMER_OFFSETS}-0" / "00000000000000000000.log"
            segment.parent.mkdir(parents=True)
            records = (generate_mix if name == "mix" else generate_tiled)(segment, args.size_mb << 20)
            mib = segment.stat().st_size / (1 << 20)
            print(f"{name}: {composition(segment)}")
            for tool, (wall, cpu, out_size) in measure(name, segment, records, args.runs, work).items():
                rows.append((name, mib, records, tool, wall, cpu, out_size))
            segment.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}\n")
    print(f"medians of {args.runs} runs, output written to a file\n")
    print("| input | MiB | records | tool | wall s | CPU s | records/s (wall) | output MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, mib, records, tool, wall, cpu, out_size in rows:
        print(f"| {name} | {mib:.0f} | {records:,} | {tool} | {wall:.2f} | {cpu:.2f} | {records / wall:,.0f} | "
              f"{out_size / (1 << 20):.0f} |")
    print()
    for name in dict.fromkeys(r[0] for r in rows):
        ours, theirs = (next(r for r in rows if r[0] == name and r[3] == t) for t in ("kprotocol", "kafka-dump-log"))
        print(f"{name}: kprotocol is {theirs[4] / ours[4]:.1f}x faster than kafka-dump-log in wall time "
              f"({theirs[5] / ours[5]:.1f}x in CPU time); target >= 3x, aim 5x")


if __name__ == "__main__":
    main()

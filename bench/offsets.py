"""`kprotocol offsets decode` beside Kafka's `kafka-dump-log --offsets-decoder --print-data-log`
(DumpLogSegments, from the jars kprotocol.toolchain resolves) on the same segments, both writing to a file.

    python bench/offsets.py [--size-mb 64] [--runs 5]

Inputs, generated in a temporary directory:
- mix: a `__consumer_offsets` segment written with kprotocol's writer, as a busy coordinator writes one:
  offset commits of a few hundred groups (a batch per commit of 1-16 partitions, values v3, or v4 with a
  topic id) make most records; between them classic Kafka Streams groups' GroupMetadata (members with
  SubscriptionInfo/AssignmentInfo userdata), KIP-848 consumer groups' and KIP-1071 streams groups'
  records (taken from the kept segments, renamed per group), and transactional commits with their markers.
- streams: a Kafka Streams fleet's log (generate_streams): 20 applications of 5 instances x 2 threads
  (200 members), each member committing its tasks' source offsets every 100 ms (Streams' partition-time
  metadata; a third of the applications exactly-once, in transactions with their markers); every few
  minutes an application rebalances: a GroupMetadata record whose members carry SubscriptionInfo v11
  (task offset sums: lags of standbys, client tags, endpoint) and AssignmentInfo v11 (active and standby
  tasks, host maps); 4 applications on the KIP-1071 streams protocol write streams group records
  instead, and KIP-848 consumer groups share the log (records taken from the kept segments, renamed).
- broker: the kept segment a real 4.x broker wrote (fixtures/kafka/data/__consumer_offsets-0), its
  batches tiled to the same size (base offsets rewritten: they sit outside the CRC).
- sample: the same with the Kafka-made sample segment (kprotocol/samples/consumer-offsets.log: offset
  commits, a classic Streams group with its userdata, consumer and streams group records, compressed and
  transactional batches).
Each run starts both tools in turn (the JVM's start included); the table has the medians of wall and
CPU seconds, and the ratio Kafka / kprotocol. The record counts of both outputs are checked first.
"""

from __future__ import annotations

import argparse
import base64
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

from kprotocol.coordinator_topics import CONSUMER_OFFSETS, decode_record, record_types  # noqa: E402
from kprotocol.records import Record, marker_record, read_segment, write_batch  # noqa: E402
from kprotocol.registry import message_class  # noqa: E402
from kprotocol.streams import AssignmentInfo, SubscriptionInfo, TaskId, TaskOffsetSum, TopicPartition  # noqa: E402
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


def _commit(group: str, topic: str, partition: int, offset: int, at: int, topic_id: uuid.UUID | None,
            metadata: str = "") -> tuple:
    key = struct.pack(">h", 1) + TYPES[1].key(group=group, topic=topic, partition=partition).encode(0)
    value_cls, version = TYPES[1].value, 4 if topic_id else 3
    fields = {"offset": offset, "leader_epoch": 7, "metadata": metadata, "commit_timestamp": at}
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


def _streams_app(rng: random.Random, name: str) -> dict:
    """An application's topology: its subtopologies' source topics and partitions, and its instances."""
    partitions = rng.choice([8, 12, 16, 24])
    subtopologies = [[f"{name}-input"], [f"{name}-KSTREAM-AGGREGATE-STATE-STORE-0000000004-repartition"]]
    if rng.random() < 0.5:
        subtopologies.append([f"{name}-KTABLE-JOIN-0000000011-repartition", f"{name}-lookup"])
    instances = [(uuid.UUID(int=rng.getrandbits(128)), f"{name}-{i}.{name}.svc.cluster.local", 8080) for i in range(5)]
    return {"partitions": partitions, "subtopologies": subtopologies, "instances": instances, "generation": 1,
            "eos": rng.random() < 1 / 3, "owned": {}, "offsets": {}}


def _changelog(name: str, task: TaskId) -> TopicPartition:
    return TopicPartition(f"{name}-store-{task.subtopology}-changelog", task.partition)


def _rebalance(rng: random.Random, name: str, app: dict, at: int) -> bytes:
    """A classic Streams rebalance's GroupMetadata value: 10 members with their userdata, tasks spread
    round robin over the members, a standby of each task on another instance."""
    tasks = [TaskId(s, p) for s in range(len(app["subtopologies"])) for p in range(app["partitions"])]
    members = [(i, t) for i in range(5) for t in range(2)]
    active: dict[tuple[int, int], list[TaskId]] = {m: [] for m in members}
    standby: dict[tuple[int, int], list[TaskId]] = {m: [] for m in members}
    shift = rng.randrange(len(members))
    for n, task in enumerate(tasks):
        owner = members[(n + shift) % len(members)]
        active[owner].append(task)
        standby[members[(n + shift + 2) % len(members)]].append(task)
    by_host = {i: [] for i in range(5)}
    standby_by_host = {i: [] for i in range(5)}
    for (i, _), owned in active.items():
        by_host[i] += [TopicPartition(topic, t.partition) for t in owned for topic in app["subtopologies"][t.subtopology]]
    for (i, _), owned in standby.items():
        standby_by_host[i] += [_changelog(name, t) for t in owned]
    hosts = [(app["instances"][i][1:], tuple(by_host[i])) for i in range(5)]
    standby_hosts = [(app["instances"][i][1:], tuple(standby_by_host[i])) for i in range(5)]
    next_rebalance = at + 600_000 if rng.random() < 0.3 else (1 << 63) - 1  # a probing rebalance scheduled
    value_cls = TYPES[2].value
    member_cls = next(f.struct for f in value_cls._spec if f.name == "members")
    subscription_cls, assignment_cls = message_class("ConsumerProtocolSubscription"), message_class("ConsumerProtocolAssignment")
    assigned_cls = next(f.struct for f in assignment_cls._spec if f.name == "assigned_partitions")
    out = []
    previous = app["owned"]
    for i, thread in members:
        process, host, port = app["instances"][i]
        sums = [TaskOffsetSum(t, -2) for t in previous.get((i, thread), [])]
        sums += [TaskOffsetSum(t, rng.randrange(10**9, 10**12)) for t in standby[(i, thread)]]  # the lag's base
        info = SubscriptionInfo(11, 11, process, sums, f"{host}:{port}", 0, 0, (("zone", f"zone-{i % 3}"), ("rack", f"rack-{i}")))
        sources = sorted({(topic, t.partition) for t in active[(i, thread)] for topic in app["subtopologies"][t.subtopology]})
        topics = sorted({topic for sub in app["subtopologies"] for topic in sub})
        subscription = struct.pack(">h", 3) + subscription_cls(
            topics=tuple(topics), user_data=info.encode(), owned_partitions=(), generation_id=app["generation"] - 1,
            rack_id=f"rack-{i}").encode(3)
        assignment_info = AssignmentInfo(
            11, 11, tuple(active[(i, thread)]), tuple((t, (_changelog(name, t),)) for t in standby[(i, thread)]),
            tuple(hosts), tuple(standby_hosts), 0, next_rebalance)
        grouped: dict[str, list[int]] = {}
        for topic, partition in sources:
            grouped.setdefault(topic, []).append(partition)
        assignment = struct.pack(">h", 3) + assignment_cls(
            assigned_partitions=tuple(assigned_cls(topic=t, partitions=tuple(ps)) for t, ps in grouped.items()),
            user_data=assignment_info.encode()).encode(3)
        member_id = f"{name}-{process}-StreamThread-{thread + 1}-consumer-{uuid.UUID(int=rng.getrandbits(128))}"
        out.append(member_cls(member_id=member_id, group_instance_id=None, client_id=f"{name}-{process}-StreamThread-{thread + 1}-consumer",
                              client_host=f"/10.0.{i}.{thread + 10}", rebalance_timeout=300_000, session_timeout=45_000,
                              subscription=subscription, assignment=assignment))
    app["owned"] = active
    app["generation"] += 1
    value = value_cls(protocol_type="consumer", generation=app["generation"], protocol="stream", leader=out[0].member_id,
                      current_state_timestamp=at, members=tuple(out))
    return struct.pack(">h", 3) + value.encode(3)


def generate_streams(path: Path, size: int, seed: int = 1071) -> int:
    """The Streams fleet segment of about `size` bytes (see the module's docstring); its record count."""
    rng = random.Random(seed)
    templates = _templates()
    apps = {f"streams-app-{i:02d}": None for i in range(20)}
    for name in apps:
        apps[name] = _streams_app(rng, name)
    kip1071 = set(list(apps)[-4:])
    consumers = [f"consumer-group-{i:02d}" for i in range(10)]
    # each application rebalances every 2-5 simulated minutes, starting soon
    next_rebalance = {name: T0 + rng.randrange(0, 20_000) for name in apps}
    offset = written = 0
    at = T0
    producer = 5000
    with path.open("wb") as out:
        while written < size:
            at += 100  # a commit interval: every member of every application commits
            batches = []
            for name, app in apps.items():
                if at >= next_rebalance[name]:
                    next_rebalance[name] = at + rng.randrange(120_000, 300_000)
                    if name in kip1071:
                        pairs = [(_renamed(t, k, name), v) for t, k, v in rng.sample(templates["streams"], 6)]
                    else:
                        pairs = [(struct.pack(">h", 2) + TYPES[2].key(group=name).encode(0), _rebalance(rng, name, app, at))]
                    batches.append((pairs, -1))
                if not app["owned"]:
                    continue
                for member, tasks in app["owned"].items():
                    pairs = []
                    for task in tasks:
                        for topic in app["subtopologies"][task.subtopology]:
                            key = (topic, task.partition)
                            app["offsets"][key] = app["offsets"].get(key, rng.randrange(10**6)) + rng.randint(0, 400)
                            stamp = base64.b64encode(b"\x01" + struct.pack(">q", at - rng.randrange(5000))).decode()
                            pairs.append(_commit(name, topic, task.partition, app["offsets"][key], at, None, stamp))
                    if pairs:
                        batches.append((pairs, producer + hash((name, member)) % 1000 if app["eos"] else -1))
            if rng.random() < 0.05:  # KIP-848 consumer groups: heartbeats that change an assignment now and then
                group = rng.choice(consumers)
                batches.append(([(_renamed(t, k, group), v) for t, k, v in rng.sample(templates["consumer"], 3)], -1))
            for pairs, producer_id in batches:
                transactional = producer_id >= 0
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


def generate_tiled(path: Path, size: int, source: Path = BROKER) -> int:
    """A Kafka-made segment (the real broker's by default), its batches repeated to about `size` bytes;
    its record count."""
    data, batches, pos = source.read_bytes(), [], 0
    for batch in read_segment(source):
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


GENERATORS = {"mix": generate_mix, "streams": generate_streams, "broker": generate_tiled,
              "sample": lambda path, size: generate_tiled(path, size, SAMPLE)}


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
    parser.add_argument("--inputs", default=",".join(GENERATORS), help=f"comma-separated: {', '.join(GENERATORS)}")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "kprotocol")], check=True)
    work = Path(tempfile.mkdtemp(prefix="kprotocol-bench-offsets-"))
    rows = []
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    try:
        for name in args.inputs.split(","):
            segment = work / name / f"{CONSUMER_OFFSETS}-0" / "00000000000000000000.log"
            segment.parent.mkdir(parents=True)
            records = GENERATORS[name](segment, args.size_mb << 20)
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
              f"({theirs[5] / ours[5]:.1f}x in CPU time); target >= 5x")


if __name__ == "__main__":
    main()

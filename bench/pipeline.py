"""The Spark pipeline beside the single-process decoders and Kafka's own tool, on the same generated inputs.

    python bench/pipeline.py [--size-mb 2048] [--partitions 4] [--split-mb 64] [--task-mb 64] [--captures-mb 1024]
                             [--mix mix|streams|sample|broker]

Offsets: generates a Kafka data directory of `__consumer_offsets-N` segments, each one of bench/offsets.py's
inputs (--mix; `mix` by default: mostly offset commits, some transactional with markers, consumer and
streams groups' records, classic Kafka Streams rebalances; `streams`: a Kafka Streams fleet's log;
`sample` and `broker`: Kafka-made segments tiled), a seed per partition. Captures: writes
copies of the kept captures into one large pcap, each copy shifted in time and with its client ports
renumbered (distinct connections, as in a capture of many clients). Then, for each input, in one run:
- for offsets, one Spark task's work in a fresh process without Spark (`split_rows` + `write_part` of
  every table, the Parquet files written) on a mix segment of --task-mb, the median of three runs,
- the single-process CLI (`kprotocol offsets decode ...` / `kprotocol capture decode ...` > /dev/null),
- for offsets, Kafka's `kafka-dump-log --offsets-decoder --print-data-log` on the first partition's
  segment (output to a file, the JVM's start included, as bench/offsets.py runs it),
- the Spark job with `local[1]` and `local[2]`, each in a fresh process, its start-up (the
  SparkSession to a first action, and its Python workers to a first Python task) timed apart from
  the job itself,
(kprotocol's bytecode compiled first, as a wheel install has it) and prints records (or exchanges)/s,
MB/s, the speed-up from one core to two, per-core rate against the single-process decoder and against
kafka-dump-log (target >= 3x, aim 5x), what 1 TB would take on 64 cores at that per-core rate, and the
fixed start cost; for captures also the machine's own ceiling: how much more two single-process
decoders side by side get done than one alone.
"""

from __future__ import annotations

import argparse
import compileall
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

from offsets import DUMP_LOG, GENERATORS, java_command, timed  # noqa: E402  (bench/offsets.py)

TASK_RUN = """
import json, shutil, statistics, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from kprotocol.coordinator_topics import CONSUMER_OFFSETS
from kprotocol.pipeline.offsets_rows import split_rows
from kprotocol.pipeline.splits import SegmentSplit
from kprotocol.pipeline.tables import paused_gc, write_part
segment = sys.argv[2]
with open(segment, "rb") as f:
    size = f.seek(0, 2)
split = SegmentSplit(segment, CONSUMER_OFFSETS, 0, 0, size)
runs = []
for _ in range(int(sys.argv[3])):
    out = tempfile.mkdtemp(prefix="kprotocol-bench-task-")
    with paused_gc():  # as a Spark task runs it (jobs._decode_task)
        t0, c0 = time.perf_counter(), time.process_time()
        tables = split_rows(split)
        t1 = time.perf_counter()
        for table, rows in tables.items():
            write_part(out, table, 0, rows)
        t2, c2 = time.perf_counter(), time.process_time()
    runs.append((t1 - t0, t2 - t1, t2 - t0, len(tables["records"]), c2 - c0))
    del tables
    shutil.rmtree(out)
print(json.dumps({"decode": statistics.median(r[0] for r in runs), "write": statistics.median(r[1] for r in runs),
                  "total": statistics.median(r[2] for r in runs), "records": runs[0][3],
                  "cpu": statistics.median(r[4] for r in runs)}))
"""

SPARK_RUN = """
import json, sys, time
t0 = time.perf_counter()
from kprotocol.pipeline import run_captures, run_offsets, spark_session
spark = spark_session(sys.argv[1], progress=False)
spark.range(1).count()
cores = spark.sparkContext.defaultParallelism
spark.sparkContext.parallelize(range(cores), cores).map(lambda x: x).count()  # Python workers up
t1 = time.perf_counter()
if sys.argv[5] == "captures":
    counts = run_captures([sys.argv[2]], sys.argv[3], spark=spark, split_bytes=int(sys.argv[4]),
                          ports=tuple(map(int, sys.argv[6].split(","))))
else:
    counts = run_offsets([sys.argv[2]], sys.argv[3], spark=spark, split_bytes=int(sys.argv[4]))
t2 = time.perf_counter()
spark.stop()
print(json.dumps({"startup": t1 - t0, "job": t2 - t1, **counts}))
"""


def make_segment(mix: str, segment: Path, size: int, seed: int) -> int:
    """One segment of bench/offsets.py's input `mix`; its record count (a seed for the generated ones)."""
    if mix in ("mix", "streams"):
        return GENERATORS[mix](segment, size, seed=seed + (0 if mix == "mix" else 1046))
    return GENERATORS[mix](segment, size)


def generate(target: Path, size: int, partitions: int, mix: str = "mix") -> tuple[int, list[int]]:
    """`partitions` segments of bench/offsets.py's input `mix`, about size/partitions bytes each; their
    bytes, and each one's record count."""
    records, written = [], 0
    for partition in range(partitions):
        directory = target / f"__consumer_offsets-{partition}"
        directory.mkdir(parents=True)
        segment = directory / "00000000000000000000.log"
        records.append(make_segment(mix, segment, max(1, size // partitions), 25 + partition))
        written += segment.stat().st_size
    return written, records


def single_task(size: int, runs: int = 3, root: Path = ROOT, mix: str = "mix") -> dict:
    """One Spark task's work (split_rows + write_part) in a fresh process on a `mix` segment of `size` bytes,
    and kafka-dump-log on the same segment."""
    work = Path(tempfile.mkdtemp(prefix="kprotocol-bench-task-"))
    try:
        segment = work / "__consumer_offsets-0" / "00000000000000000000.log"
        segment.parent.mkdir()
        records = make_segment(mix, segment, size, 25)
        done = subprocess.run([sys.executable, "-c", TASK_RUN, str(root), str(segment), str(runs)],
                              capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["records"] == records, (result, records)
        return {**result, "mib": segment.stat().st_size / (1 << 20), "kafka": kafka_dump_log(segment, records)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kafka_dump_log(segment: Path, records: int) -> float:
    """Wall seconds of kafka-dump-log --offsets-decoder --print-data-log on `segment`, output to a file
    (its count of records checked)."""
    output = segment.parent.parent / "kafka-dump-log.out"
    try:
        wall, _ = timed(java_command(DUMP_LOG, "--files", str(segment), "--print-data-log", "--offsets-decoder"),
                        output)
        with output.open("rb") as lines:
            counted = sum(1 for line in lines if line.startswith(b"| offset: "))
        assert counted == records, (counted, records)
        return wall
    finally:
        output.unlink(missing_ok=True)


def single_process(data: Path) -> float:
    start = time.perf_counter()
    partitions = sorted(str(p) for p in data.iterdir())
    subprocess.run([sys.executable, "-m", "kprotocol", "offsets", "decode", *partitions, "--no-progress"],
                   stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def spark(data: Path, cores: int, split_bytes: int, job: str = "offsets", ports: str = "") -> dict:
    out = Path(tempfile.mkdtemp(prefix="kprotocol-bench-out-"))
    try:
        done = subprocess.run([sys.executable, "-c", SPARK_RUN, f"local[{cores}]", str(data), str(out),
                               str(split_bytes), job, ports], capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def side_by_side(command: list[str], copies: int) -> float:
    """Wall seconds of `copies` runs of `command` started together (output thrown away)."""
    start = time.perf_counter()
    processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for _ in range(copies)]
    for process in processes:
        process.wait()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=256, help="offsets input (0: skip)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--split-mb", type=int, default=16)
    parser.add_argument("--task-mb", type=int, default=64, help="one task's work measured alone on this much (0: skip)")
    parser.add_argument("--captures-mb", type=int, default=0, help="also the captures job on this much (0: skip)")
    parser.add_argument("--mix", default="mix", choices=sorted(GENERATORS), help="the offsets input (bench/offsets.py)")
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "kprotocol", quiet=1)  # as a wheel install has it; every process would compile
    if args.size_mb or args.task_mb:
        offsets(args.size_mb, args.partitions, args.split_mb, args.task_mb, args.mix)
    if args.captures_mb:
        captures(args.captures_mb, args.split_mb << 20)


def compiled_tasks(runs: dict[int, dict]) -> str:
    """What the tasks ran on: a rate measured in pure Python is not kprotocol's rate."""
    parts = [f"local[{cores}] " + ", ".join(f"{run[f'tasks_{path}']}/{run['tasks']} {path}"
                                           for path in ("accel", "walk", "offsets")) for cores, run in runs.items()]
    pure = sum(run["pure_python_tasks"] for run in runs.values())
    return ("tasks on kprotocol's compiled paths: " + "; ".join(parts)
            + (f"\nWARNING: {pure} task(s) ran pure Python: these rates are not the compiled ones" if pure else ""))


def offsets(size_mb: int, partitions: int, split_mb: int, task_mb: int, mix: str = "mix") -> None:
    if task_mb:
        task = single_task(task_mb << 20, mix=mix)
        print(f"one task alone (split_rows + write_part, no Spark) on a {task['mib']:.0f} MiB {mix} segment, "
              f"{task['records']:,} records: {task['total']:.2f} s (decode {task['decode']:.2f} s, Parquet "
              f"{task['write']:.2f} s; CPU {task['cpu']:.2f} s), {task['records'] / task['total']:,.0f} records/s; "
              f"median of 3; kafka-dump-log on the same segment: {task['kafka']:.2f} s: one task (one core) is "
              f"{task['kafka'] / task['total']:.1f}x faster (target >= 3x)")
    if not size_mb:
        return
    work = Path(tempfile.mkdtemp(prefix="kprotocol-bench-"))
    try:
        size, counts = generate(work / "data", size_mb << 20, partitions, mix)
        records, first_records = sum(counts), counts[0]
        mb = size / (1 << 20)
        print(f"input: {mb:.0f} MiB, {records:,} records in {partitions} __consumer_offsets partitions "
              f"(bench/offsets.py's {mix})")
        first = work / "data" / "__consumer_offsets-0" / "00000000000000000000.log"
        first_mb = first.stat().st_size / (1 << 20)
        kafka = kafka_dump_log(first, first_records)
        single = single_process(work / "data")
        runs = {cores: spark(work / "data", cores, split_mb << 20) for cores in (1, 2)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kafka_rate = first_records / kafka
    print("\n| run | seconds | records/s | MB/s |\n|---|---|---|---|")
    print(f"| kafka-dump-log --offsets-decoder --print-data-log, one {first_mb:.0f} MiB segment | {kafka:.1f} | "
          f"{kafka_rate:,.0f} | {first_mb / kafka:.1f} |")
    print(f"| single process (CLI) | {single:.1f} | {records / single:,.0f} | {mb / single:.1f} |")
    for cores, run in runs.items():
        assert run["records"] == records, (run, records)
        print(f"| Spark local[{cores}], job | {run['job']:.1f} | {records / run['job']:,.0f} | {mb / run['job']:.1f} |")
    start = sum(r["startup"] for r in runs.values()) / len(runs)
    speedup = runs[1]["job"] / runs[2]["job"]
    per_core = records / runs[1]["job"]
    per_core_mb = mb / runs[1]["job"]
    print(f"\nSpark start-up to a first Python task: {start:.1f} s (fixed cost, excluded from the job times above)")
    print(compiled_tasks(runs))
    print(f"per Spark core (local[1] job) vs kafka-dump-log: {per_core:,.0f} against {kafka_rate:,.0f} records/s, "
          f"{per_core / kafka_rate:.1f}x (target >= 3x, aim 5x)")
    if task_mb:
        task_rate = task["records"] / task["total"]
        print(f"one task alone (no Spark, no rebalances stage) vs kafka-dump-log: {task_rate:,.0f} against "
              f"{kafka_rate:,.0f} records/s, {task_rate / kafka_rate:.1f}x")
    terabyte = (1 << 40) / (per_core_mb * (1 << 20)) / 64
    print(f"1 TB on 64 cores at that per-core rate ({per_core_mb:.1f} MB/s): {terabyte / 60:.1f} min "
          f"(no start-up, perfect scaling)")
    print(f"speed-up 1 -> 2 cores: {speedup:.2f}x (target >= 1.8x)")
    print(f"per core, 1 core vs single process: {single / runs[1]['job']:.0%} (target >= 80%)")
    print(f"per core, 2 cores vs single process: {single / runs[2]['job'] / 2:.0%}")
    print(f"peak RSS of this driver script: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def captures(size_mb: int, split_bytes: int) -> None:
    from capture import PORTS, replicate

    work = Path(tempfile.mkdtemp(prefix="kprotocol-bench-captures-"))
    ports = ",".join(str(p) for p in PORTS.values())
    try:
        capture = replicate(list(PORTS), size_mb, work)
        mb = capture.stat().st_size / (1 << 20)
        command = [sys.executable, "-m", "kprotocol", "capture", "decode", str(capture), "--ports", ports, "-j", "1"]
        with subprocess.Popen(command, stdout=subprocess.PIPE) as process:  # the count, untimed
            exchanges = sum(1 for _ in process.stdout)  # type: ignore[union-attr]
        single, paired = side_by_side(command, 1), side_by_side(command, 2)
        runs = {cores: spark(capture, cores, split_bytes, "captures", ports) for cores in (1, 2)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ncaptures: one pcap of {mb:.0f} MiB (copies of the kept captures, client ports renumbered), "
          f"{exchanges:,} exchanges")
    print("\n| run | seconds | exchanges/s | MB/s |\n|---|---|---|---|")
    print(f"| single process (CLI, to /dev/null) | {single:.1f} | {exchanges / single:,.0f} | {mb / single:.1f} |")
    for cores, run in runs.items():
        assert run["exchanges"] == exchanges, (run, exchanges)
        print(f"| Spark local[{cores}], job | {run['job']:.1f} | {exchanges / run['job']:,.0f} | {mb / run['job']:.1f} |")
    start = sum(r["startup"] for r in runs.values()) / len(runs)
    print(f"\nSpark start-up to a first Python task: {start:.1f} s (fixed cost, excluded from the job times above)")
    print(compiled_tasks(runs))
    print(f"speed-up 1 -> 2 cores: {runs[1]['job'] / runs[2]['job']:.2f}x (target >= 1.8x); per core, 1 core vs "
          f"single process: {single / runs[1]['job']:.0%} (target >= 80%); 2 cores: {single / runs[2]['job'] / 2:.0%}")
    print(f"this machine's own ceiling: two single-process decoders side by side take {paired:.1f} s against "
          f"{single:.1f} s alone, {2 * single / paired:.2f}x the work of one in the same time")


if __name__ == "__main__":
    main()

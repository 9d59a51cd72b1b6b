"""The Spark pipeline beside the single-process decoders, on the same generated inputs.

    python bench/pipeline.py [--size-mb 2048] [--partitions 4] [--split-mb 64] [--captures-mb 1024]

Offsets: generates a Kafka data directory of `__consumer_offsets-N` segments by tiling the batches
of the bundled fixture segment (base offsets rewritten; they sit outside the CRC). Captures: writes
copies of the kept captures into one large pcap, each copy shifted in time and with its client ports
renumbered (distinct connections, as in a capture of many clients). Then, for each
input, in one run:
- the single-process CLI (`kprotocol offsets decode ...` / `kprotocol capture decode ...` > /dev/null),
- the Spark job with `local[1]` and `local[2]`, each in a fresh process, its start-up (the
  SparkSession to a first action, and its Python workers to a first Python task) timed apart from
  the job itself,
(kprotocol's bytecode compiled first, as a wheel install has it) and prints records (or exchanges)/s, MB/s, the speed-up from one core to two, per-core rate
against the single-process decoder, and the fixed start cost; for captures also the machine's own
ceiling: how much more two single-process decoders side by side get done than one alone.
"""

from __future__ import annotations

import argparse
import compileall
import json
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kprotocol.records.segment import read_segment  # noqa: E402

FIXTURE = ROOT / "fixtures" / "offsets" / "00000000000000000000.log"

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


def generate(target: Path, size: int, partitions: int) -> tuple[int, int]:
    """Tile the fixture's batches into `partitions` segments of about size/partitions bytes each."""
    batches, pos, data = [], 0, FIXTURE.read_bytes()
    for entry in read_segment(FIXTURE):
        batches.append((data[pos:pos + entry.size], entry.last_offset - entry.base_offset + 1))
        pos += entry.size
    per_round = sum(len(b) for b, _ in batches)
    records = written = 0
    for partition in range(partitions):
        directory = target / f"__consumer_offsets-{partition}"
        directory.mkdir(parents=True)
        offset = 0
        with (directory / "00000000000000000000.log").open("wb") as out:
            for _ in range(max(1, size // partitions // per_round)):
                for raw, count in batches:
                    out.write(struct.pack(">q", offset) + raw[8:])
                    offset += count
                    records += count
                    written += len(raw)
    return written, records


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
    parser.add_argument("--captures-mb", type=int, default=0, help="also the captures job on this much (0: skip)")
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "kprotocol", quiet=1)  # as a wheel install has it; every process would compile
    if args.size_mb:
        offsets(args.size_mb, args.partitions, args.split_mb)
    if args.captures_mb:
        captures(args.captures_mb, args.split_mb << 20)


def compiled_tasks(runs: dict[int, dict]) -> str:
    """What the tasks ran on: a rate measured in pure Python is not kprotocol's rate."""
    parts = [f"local[{cores}] " + ", ".join(f"{run[f'tasks_{path}']}/{run['tasks']} {path}"
                                           for path in ("accel", "walk", "offsets")) for cores, run in runs.items()]
    pure = sum(run["pure_python_tasks"] for run in runs.values())
    return ("tasks on kprotocol's compiled paths: " + "; ".join(parts)
            + (f"\nWARNING: {pure} task(s) ran pure Python: these rates are not the compiled ones" if pure else ""))


def offsets(size_mb: int, partitions: int, split_mb: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="kprotocol-bench-"))
    try:
        size, records = generate(work / "data", size_mb << 20, partitions)
        mb = size / (1 << 20)
        print(f"input: {mb:.0f} MiB, {records:,} records in {partitions} __consumer_offsets partitions")
        single = single_process(work / "data")
        runs = {cores: spark(work / "data", cores, split_mb << 20) for cores in (1, 2)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| run | seconds | records/s | MB/s |\n|---|---|---|---|")
    print(f"| single process (CLI) | {single:.1f} | {records / single:,.0f} | {mb / single:.1f} |")
    for cores, run in runs.items():
        assert run["records"] == records, (run, records)
        print(f"| Spark local[{cores}], job | {run['job']:.1f} | {records / run['job']:,.0f} | {mb / run['job']:.1f} |")
    start = sum(r["startup"] for r in runs.values()) / len(runs)
    speedup = runs[1]["job"] / runs[2]["job"]
    print(f"\nSpark start-up to a first Python task: {start:.1f} s (fixed cost, excluded from the job times above)")
    print(compiled_tasks(runs))
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

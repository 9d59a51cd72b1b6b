"""`kprotocol report` on a year of a fleet's rebalances: wall time and peak memory of the command.

    python bench/report.py [--sizes 30000,300000] [--per-group 1000]

For each size, synthetic pipeline tables (kprotocol.pipeline.synthetic: streams groups of 4 members and
8 tasks, --per-group rebalances a year each, an assignment per member per rebalance, offset commits; kept
under build/bench-report/ and reused) are rendered by `python -m kprotocol report` in a child process;
the table has its wall and CPU seconds (on a loaded machine the CPU time is the steadier), its peak
resident memory (the child's ru_maxrss), the report's size and the number of pages (past 25 groups,
one page per group).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kprotocol.pipeline.synthetic import write_fleet  # noqa: E402


def tables(size: int, per_group: int) -> tuple[Path, dict[str, int]]:
    out = ROOT / "build" / "bench-report" / f"fleet-{size}-{per_group}"
    done = out / "counts.json"
    if done.exists():
        return out, json.loads(done.read_text())
    counts = write_fleet(str(out), groups=max(1, size // per_group), rebalances=min(size, per_group))
    done.write_text(json.dumps(counts))
    return out, counts


def measure(out: Path) -> tuple[float, float, float, int, int]:
    """(wall seconds, CPU seconds, peak RSS MiB, HTML bytes, pages) of one `kprotocol report` run."""
    target = out / "report.html"
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kprotocol", "report", str(out), "--out", str(target)], check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = usage.ru_maxrss  # the largest child so far (KiB)
    cpu = usage.ru_utime + usage.ru_stime - cpu
    pages = 1 + len(list((out / "report-groups").glob("*.html"))) if (out / "report-groups").exists() else 1
    size = target.stat().st_size + sum(p.stat().st_size for p in (out / "report-groups").glob("*.html"))
    return wall, cpu, max(peak, before) / 1024, size, pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="30000,300000", help="rebalances, comma-separated")
    parser.add_argument("--per-group", type=int, default=1000, help="rebalances of each group (default 1000)")
    args = parser.parse_args()
    print("| rebalances | groups | group_members rows | report wall s | CPU s | peak RSS MiB | HTML MB | pages |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        out, counts = tables(size, args.per_group)
        wall, cpu, peak, html_bytes, pages = measure(out)
        print(f"| {counts['rebalances']:,} | {max(1, size // args.per_group):,} | {counts['group_members']:,} | "
              f"{wall:.1f} | {cpu:.1f} | {peak:.0f} | {html_bytes / 1e6:.1f} | {pages:,} |", flush=True)


if __name__ == "__main__":
    main()

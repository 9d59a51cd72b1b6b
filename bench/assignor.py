"""Benchmark of kprotocol.assignor beside Apache Kafka's Java assignors.

Runs Kafka's StreamsStickyAssignorBenchmark matrix on the sticky assignor (members 100/1000, partitions per
subtopology 10/100, subtopologies 10/100, standbys 0/1, members per process 1/50; full = fresh group,
incremental = the full result as previous assignment with the last process replaced by a new one), the
large highly-available cases and a rack-aware min_traffic case (1000 tasks x 100 clients).

Like Kafka's `ms`, the time is the median of the assignor call alone (`assign(ApplicationState)`) after
warm-ups; building the input is setup, and the input is moved out of the garbage collector's way
(gc.freeze) as a JVM benchmark's setup objects would be. Kafka's figure comes from
../shared/assignor/kafka-results when that scenario exists, else from the issue's measurements (marked *).

Then the whole scenario API call (`assign_scenario`: parsing, assigning, validating, spreading the
tasks over members) on the large sticky cases, beside Kafka's whole member-level call.

    .venv/bin/python bench/assignor.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import statistics
import time
from pathlib import Path

from kprotocol.assignor import BUILT_IN_ASSIGNORS, assign_scenario
from kprotocol.assignor.scenario import parse_scenario
from kprotocol.assignor.simulation import add_process, next_round, remove_process, synthetic_scenario

SHARED = Path(__file__).resolve().parents[2] / "shared" / "assignor"
ISSUE_FIGURES_MS = {"ha_m1000_s10_p100": 1500.0, "ha_rack_min_traffic_c100_t1000": 14000.0}
TARGETS_MS = {"ha_large_m100_s100_p100": 1000.0, "ha_m1000_s10_p100": 1500.0,
              "ha_rack_min_traffic_c100_t1000": 1000.0}


def kafka_ms(name: str) -> tuple[float | None, str]:
    path = SHARED / "kafka-results" / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())["ms"], ""
    return ISSUE_FIGURES_MS.get(name), "*" if name in ISSUE_FIGURES_MS else ""


def shared_or_synthetic(name: str, **kwargs) -> dict:
    path = SHARED / "scenarios" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else synthetic_scenario(**kwargs)


def incremental(scenario: dict) -> dict:
    """The full result installed, then the last process replaced by a new one of the same size."""
    scenario = next_round(scenario, assign_scenario(scenario))
    last = scenario["members"][-1]["process_id"]
    size = sum(1 for m in scenario["members"] if m["process_id"] == last)
    return add_process(remove_process(scenario, last), "zz-new", size)


def time_assignor(scenario: dict, warmups: int, runs: int) -> float:
    parsed = parse_scenario(scenario)
    assignor = BUILT_IN_ASSIGNORS[parsed.assignor]()
    gc.collect()
    gc.freeze()
    try:
        for _ in range(warmups):
            assignor.assign(parsed.state)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            assignor.assign(parsed.state)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        gc.unfreeze()
    return statistics.median(times)


def sticky_cases():
    for members, partitions, subtopologies, standbys, per_process in itertools.product(
            (100, 1000), (10, 100), (10, 100), (0, 1), (1, 50)):
        name = f"st_large_m{members}{'' if per_process == 1 else f'_mpp{per_process}'}_s{subtopologies}_p{partitions}"
        kwargs = dict(assignor="sticky", processes=members // per_process, members_per_process=per_process,
                      subtopologies=subtopologies, partitions=partitions, standbys=standbys)
        shared_one = standbys == 1 and (SHARED / "scenarios" / f"{name}.json").exists()
        scenario = shared_or_synthetic(name, **kwargs) if shared_one else synthetic_scenario(**kwargs)
        label = f"sticky m{members} p{partitions} s{subtopologies} sb{standbys} mpp{per_process}"
        yield label, name if shared_one else None, scenario, None
        yield label.replace("sticky", "sticky incr"), None, incremental(scenario), None


def other_cases(quick: bool):
    yield ("highly-available m100 s100 p100 sb1", "ha_large_m100_s100_p100",
           shared_or_synthetic("ha_large_m100_s100_p100"), TARGETS_MS["ha_large_m100_s100_p100"])
    yield ("highly-available m1000 s10 p100 sb1", "ha_m1000_s10_p100",
           synthetic_scenario(processes=1000, subtopologies=10, partitions=100, standbys=1),
           TARGETS_MS["ha_m1000_s10_p100"])
    rack = synthetic_scenario(processes=100, subtopologies=10, partitions=100, standbys=1, racks=3,
                              strategy="min_traffic")
    yield ("rack-aware min_traffic c100 t1000 sb1", "ha_rack_min_traffic_c100_t1000", rack,
           TARGETS_MS["ha_rack_min_traffic_c100_t1000"])
    if not quick:
        yield ("rack-aware c100 t1000 incr", None, incremental(rack), TARGETS_MS["ha_rack_min_traffic_c100_t1000"])
        yield ("highly-available m100 s100 p100 incr", None,
               incremental(shared_or_synthetic("ha_large_m100_s100_p100")), None)


# Kafka's whole member-level call (building its inputs included), as the issue measured it.
KAFKA_TOTAL_MS = {("sticky m1000 p100 s100 sb0 mpp1"): 19.5, ("sticky m1000 p10 s100 sb0 mpp1"): 3.0,
                  ("sticky m1000 p100 s10 sb0 mpp1"): 3.0}


def time_scenario(scenario: dict, warmups: int, runs: int) -> float:
    """Median ms of the whole scenario API: parsing, assigning, validating, spreading over members."""
    for _ in range(warmups):
        assign_scenario(scenario)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        assign_scenario(scenario)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, skip the incremental HA cases")
    args = parser.parse_args()
    warmups, runs = (1, 3) if args.quick else (3, 7)
    print(f"{'case':44s} {'tasks':>6s} {'procs':>5s} {'ours ms':>9s} {'kafka ms':>9s} {'target':>8s}")
    for label, name, scenario, target in itertools.chain(sticky_cases(), other_cases(args.quick)):
        tasks = sum(s["partitions"] for s in scenario["subtopologies"])
        processes = len({m["process_id"] for m in scenario["members"]})
        ours = time_assignor(scenario, warmups, runs)
        kafka, mark = kafka_ms(name) if name else (None, "")
        if target is None and kafka is not None:
            target = 3 * kafka
        kafka_text = f"{kafka:.1f}{mark}" if kafka is not None else "-"
        target_text = f"{target:.0f}" if target is not None else "-"
        verdict = "" if target is None else ("ok" if ours <= target else "SLOW")
        print(f"{label:44s} {tasks:6d} {processes:5d} {ours:9.1f} {kafka_text:>9s} {target_text:>8s} {verdict}",
              flush=True)
    print(f"\n{'whole call, member level (assign_scenario)':44s} {'ours ms':>9s} {'kafka ms':>9s} {'target':>8s}")
    for label, _, scenario, _ in sticky_cases():
        kafka = KAFKA_TOTAL_MS.get(label.replace("sticky incr", "sticky"))
        if kafka is None:
            continue
        ours = time_scenario(scenario, warmups, runs)
        verdict = "ok" if ours <= 3 * kafka else "SLOW"
        print(f"{label:44s} {ours:9.1f} {kafka:9.1f} {3 * kafka:8.1f} {verdict}", flush=True)


if __name__ == "__main__":
    main()

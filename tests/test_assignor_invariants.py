"""Invariants every assignment must satisfy, on randomized groups of both assignors, and determinism."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from kprotocol.assignor import assign_scenario
from kprotocol.assignor.problem import _ordered_by_group, _ordered_tasks
from kprotocol.assignor.simulation import next_round, stateful_tasks, synthetic_scenario


def all_tasks(scenario: dict) -> list[str]:
    return [f"{s['id']}_{p}" for s in scenario["subtopologies"] for p in range(s["partitions"])]


def process_loads(scenario: dict, result: dict, role: str, selected: set[str] | None = None) -> list[float]:
    """Tasks of `role` (optionally only `selected` ones) per thread, per process."""
    process_of = {m["member_id"]: m["process_id"] for m in scenario["members"]}
    threads = Counter(process_of.values())
    counts = Counter()
    for member, roles in result["members"].items():
        counts[process_of[member]] += sum(1 for t in roles[role] if selected is None or t in selected)
    return [counts[p] / threads[p] for p in sorted(threads)]


def check_invariants(scenario: dict, result: dict) -> None:
    process_of = {m["member_id"]: m["process_id"] for m in scenario["members"]}
    assert set(result["members"]) == set(process_of)
    tasks = all_tasks(scenario)
    stateful = stateful_tasks(scenario)
    owners = Counter()
    held = Counter()
    standby_processes: dict[str, set[str]] = {t: set() for t in stateful}
    for member, roles in result["members"].items():
        for role in ("active", "standby", "warmup"):
            for t in roles[role]:
                assert t in tasks, f"unknown task {t}"
                held[(process_of[member], t)] += 1
                if role == "active":
                    owners[t] += 1
                else:
                    assert t in stateful, f"{role} of stateless task {t}"
                    if role == "standby":
                        standby_processes[t].add(process_of[member])
    assert all(owners[t] == 1 for t in tasks), "each task needs exactly one active owner"
    assert all(n == 1 for n in held.values()), "a process holds a task twice"
    expected = min(scenario["configs"]["num.standby.replicas"], len(set(process_of.values())) - 1)
    assert all(len(p) == expected for p in standby_processes.values()), "wrong number of standbys"


def random_scenario(rng: random.Random, assignor: str) -> dict:
    racks = rng.choice((0, 0, 2, 3))
    return synthetic_scenario(
        assignor=assignor, processes=rng.randint(1, 7), members_per_process=rng.randint(1, 3),
        subtopologies=rng.randint(1, 5), partitions=rng.randint(0, 10), stateful_every=rng.randint(1, 3),
        standbys=rng.randint(0, 3), max_warmups=rng.randint(1, 3), racks=racks,
        strategy=rng.choice(("none", "min_traffic", "balance_subtopology")) if racks else "none",
        tags=rng.choice((None, {"zone": 3}, {"zone": 2, "host": 3})), seed=rng.randint(0, 10**6))


def perturb(rng: random.Random, scenario: dict) -> dict:
    """Drop some members and shuffle some previous ownership, as after crashes and restarts."""
    members = scenario["members"]
    if len(members) > 1:
        for _ in range(rng.randint(0, len(members) // 2)):
            members.pop(rng.randrange(len(members)))
    for m in members:
        if m["active"] and rng.random() < 0.3:
            m["standby"].append(m["active"].pop())
    return scenario


@pytest.mark.parametrize("assignor", ["sticky", "highly_available"])
@pytest.mark.parametrize("seed", range(30))
def test_invariants_and_determinism(assignor, seed):
    rng = random.Random(seed)
    scenario = random_scenario(rng, assignor)
    result = assign_scenario(scenario)
    check_invariants(scenario, result)
    scenario = perturb(rng, next_round(scenario, result, catch_up=rng.random() < 0.5))
    result = assign_scenario(scenario)
    check_invariants(scenario, result)
    assert assign_scenario(scenario) == result, f"non-deterministic (seed {seed})"


@pytest.mark.parametrize("seed", range(10))
def test_sticky_is_balanced_and_keeps_owners_within_quota(seed):
    rng = random.Random(seed)
    scenario = random_scenario(rng, "sticky")
    scenario = perturb(rng, next_round(scenario, assign_scenario(scenario)))
    result = assign_scenario(scenario)
    loads = process_loads(scenario, result, "active")
    assert max(loads) - min(loads) <= 1
    previous = {t: m["process_id"] for m in scenario["members"] for t in m["active"]}
    process_of = {m["member_id"]: m["process_id"] for m in scenario["members"]}
    kept = sum(1 for member, roles in result["members"].items() for t in roles["active"]
               if previous.get(t) == process_of[member])
    loads_before = Counter(previous.values())
    threads = Counter(process_of.values())
    total = len(all_tasks(scenario))
    ceiling = {p: -(-total * threads[p] // sum(threads.values())) for p in threads}
    assert kept >= sum(min(n, ceiling[p] - 1) for p, n in loads_before.items() if p in threads)


def test_input_order_does_not_matter():
    scenario = synthetic_scenario(processes=4, members_per_process=2, partitions=6, standbys=1, racks=3,
                                  strategy="min_traffic", tags={"zone": 2})
    result = assign_scenario(next_round(scenario, assign_scenario(scenario)))
    shuffled = next_round(scenario, assign_scenario(scenario))
    random.Random(7).shuffle(shuffled["members"])
    shuffled["subtopologies"].reverse()
    assert assign_scenario(shuffled) == result


@pytest.mark.parametrize("seed", range(200))
def test_task_order_fast_path_matches_the_general_one(seed):
    rng = random.Random(seed)
    ids = [f"{s}_{p}" for s in range(rng.randint(0, 5)) for p in range(rng.randint(1, 9))]
    ids += rng.sample(["0_01", "a_3", "b_1", "a_1", "10_0", "010_2", "x_y_3", "_4", "1_0", "0_0", "01_0", "2_5"],
                      rng.randint(0, 3))
    if rng.random() < 0.3:
        rng.shuffle(ids)
    assert _ordered_tasks(ids) == _ordered_by_group(list(ids))


HASH_SEED_SCRIPT = """
import json, sys
from kprotocol.assignor import assign_scenario
from kprotocol.assignor.simulation import add_process, next_round, synthetic_scenario
s = synthetic_scenario(processes=5, members_per_process=2, racks=3, strategy="min_traffic", tags={"zone": 2},
                       standbys=2)
s = add_process(next_round(s, assign_scenario(s)), "zz", 2, rack="r1", tags={"zone": "zone0"})
print(json.dumps(assign_scenario(s), sort_keys=True))
"""


def test_output_does_not_depend_on_hash_seed():
    outputs = {subprocess.run([sys.executable, "-c", HASH_SEED_SCRIPT], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outputs) == 1


@pytest.mark.parametrize("assignor", ["sticky", "highly_available"])
def test_unchanged_group_keeps_its_assignment(assignor):
    scenario = synthetic_scenario(assignor=assignor, processes=4, members_per_process=2, partitions=7, standbys=1,
                                  racks=2, strategy="min_traffic")
    result = assign_scenario(scenario)
    again = assign_scenario(next_round(scenario, result))
    assert again == result
    assert again["probing_rebalance"] is False

"""Convergence of the highly-available assignor, the way Kafka's TaskAssignorConvergenceTest checks it:
with warm-ups catching up between rounds, a changed cluster reaches a balanced, warm-up-free assignment
within (stateful tasks / max.warmup.replicas + 1) rebalances."""

from __future__ import annotations

import random

import pytest

from kprotocol.assignor import assign_scenario
from kprotocol.assignor.simulation import (add_process, next_round, remove_process, stateful_tasks,
                                           synthetic_scenario)
from test_assignor_invariants import check_invariants, process_loads


def round_limit(scenario: dict) -> int:
    return len(stateful_tasks(scenario)) // scenario["configs"]["max.warmup.replicas"] + 1


def converge(scenario: dict, context: str) -> tuple[dict, dict]:
    """Rebalance until no probing rebalance is requested; returns the last (scenario, result)."""
    limit = round_limit(scenario)
    for _ in range(limit):
        result = assign_scenario(scenario)
        check_invariants(scenario, result)
        if not result["probing_rebalance"]:
            assert_balanced(scenario, result, context)
            return scenario, result
        scenario = next_round(scenario, result)
    pytest.fail(f"{context}: no convergence within {limit} rebalances")


def assert_balanced(scenario: dict, result: dict, context: str) -> None:
    assert not any(r["warmup"] for r in result["members"].values()), f"{context}: warm-ups left"
    stateful = stateful_tasks(scenario)
    for label, selected in (("active", None), ("stateful active", stateful)):
        loads = process_loads(scenario, result, "active", selected)
        assert max(loads) - min(loads) <= 1, f"{context}: {label} tasks per thread unbalanced: {loads}"


def test_fresh_group_converges_in_one_round():
    scenario = synthetic_scenario(processes=5, subtopologies=4, partitions=10, standbys=1)
    result = assign_scenario(scenario)
    assert result["probing_rebalance"] is False
    assert_balanced(scenario, result, "fresh")


@pytest.mark.parametrize("added", [1, 3])
def test_adding_nodes_converges(added):
    scenario, result = converge(synthetic_scenario(processes=3, subtopologies=4, partitions=12, standbys=1), "initial")
    scenario = next_round(scenario, result)
    for i in range(added):
        scenario = add_process(scenario, f"new{i}")
    first = assign_scenario(scenario)
    assert first["probing_rebalance"] is True, "new empty processes must warm up first"
    assert sum(len(r["warmup"]) for r in first["members"].values()) <= scenario["configs"]["max.warmup.replicas"]
    converge(scenario, f"after adding {added}")


@pytest.mark.parametrize("removed", [1, 2])
def test_removing_nodes_converges(removed):
    scenario, result = converge(synthetic_scenario(processes=5, members_per_process=2, subtopologies=3,
                                                   partitions=10, standbys=1), "initial")
    scenario = next_round(scenario, result)
    for i in range(removed):
        scenario = remove_process(scenario, f"p{i:04d}")
    converge(scenario, f"after removing {removed}")


@pytest.mark.parametrize("seed", range(12))
def test_random_perturbations_converge(seed):
    rng = random.Random(seed)
    scenario = synthetic_scenario(processes=rng.randint(2, 6), members_per_process=rng.randint(1, 3),
                                  subtopologies=rng.randint(1, 4), partitions=rng.randint(2, 12),
                                  stateful_every=rng.randint(1, 3), standbys=rng.randint(0, 2),
                                  max_warmups=rng.randint(1, 3), seed=seed)
    scenario, result = converge(scenario, f"seed {seed} initial")
    for step in range(5):
        scenario = next_round(scenario, result)
        processes = sorted({m["process_id"] for m in scenario["members"]})
        action = rng.choice(("add", "remove", "bounce"))
        if action == "remove" and len(processes) > 1:
            scenario = remove_process(scenario, rng.choice(processes))
        elif action == "bounce":  # a process restarts with its state but under new member ids
            victim = rng.choice(processes)
            members = [m for m in scenario["members"] if m["process_id"] == victim]
            scenario = remove_process(scenario, victim)
            scenario = add_process(scenario, victim, len(members))
            for m in scenario["members"]:
                if m["process_id"] == victim:
                    m["task_offsets"] = {t: o for old in members for t, o in old["task_offsets"].items()}
        else:
            scenario = add_process(scenario, f"n{step}", rng.randint(1, 3))
        scenario, result = converge(scenario, f"seed {seed} step {step} ({action}); rerun with seed={seed}")

"""What-if rebalances in the scenario JSON format: synthetic groups and successive rounds.

`next_round` turns a result into the next scenario the way a group evolves between rebalances: members report
their assigned tasks as previous assignment, actives report end offsets, and standby / warm-up state is
either caught up (`catch_up=True`) or as far behind as before.
"""

from __future__ import annotations

import copy
import random
from typing import Any

END_OFFSET = 100_000


def synthetic_scenario(*, assignor: str = "highly_available", processes: int = 4, members_per_process: int = 1,
                       subtopologies: int = 3, partitions: int = 8, stateful_every: int = 2, standbys: int = 1,
                       max_warmups: int = 2, racks: int = 0, strategy: str = "none",
                       tags: dict[str, int] | None = None, seed: int = 0) -> dict[str, Any]:
    """A fresh group: subtopology i is stateful when i % stateful_every == 0; with `racks`, every partition
    has one or two replica racks out of r1..rN (seeded) and process i sits in rack i % racks; `tags` maps a
    tag key to its number of values, spread round-robin over processes."""
    rng = random.Random(seed)
    rack_names = [f"r{i + 1}" for i in range(racks)]
    subs = []
    partition_racks: dict[str, list[list[str]]] = {}
    for s in range(subtopologies):
        stateful = s % stateful_every == 0
        source, changelog = f"input-{s}", f"app-store-{s}-changelog"
        subs.append({"id": str(s), "partitions": partitions, "stateful": stateful, "source_topics": [source],
                     "changelog_topics": [changelog] if stateful else []})
        if racks:
            for topic in (source, changelog) if stateful else (source,):
                partition_racks[topic] = [sorted(rng.sample(rack_names, rng.randint(1, min(2, racks))))
                                          for _ in range(partitions)]
    members = []
    for p in range(processes):
        for m in range(members_per_process):
            members.append({
                "member_id": f"p{p:04d}-t{m}", "process_id": f"p{p:04d}",
                "rack": rack_names[p % racks] if racks else None,
                "client_tags": {k: f"{k}{p % n}" for k, n in (tags or {}).items()},
                "active": [], "standby": [], "warmup": [], "task_offsets": {}, "task_end_offsets": {}})
    scenario = {
        "assignor": assignor,
        "configs": {"num.standby.replicas": standbys, "acceptable.recovery.lag": 10_000,
                    "max.warmup.replicas": max_warmups, "rack.aware.assignment.strategy": strategy,
                    "rack.aware.assignment.traffic_cost": None, "rack.aware.assignment.non_overlap_cost": None,
                    "rack.aware.assignment.tags": sorted(tags or {})},
        "subtopologies": subs, "members": members}
    if racks:
        scenario["topic_partition_racks"] = partition_racks
    return scenario


def stateful_tasks(scenario: dict[str, Any]) -> set[str]:
    return {f"{s['id']}_{p}" for s in scenario["subtopologies"] if s["stateful"] for p in range(s["partitions"])}


def next_round(scenario: dict[str, Any], result: dict[str, Any], catch_up: bool = True) -> dict[str, Any]:
    """The scenario of the rebalance after `result` was installed."""
    stateful = stateful_tasks(scenario)
    nxt = copy.deepcopy(scenario)
    for member in nxt["members"]:
        roles = result["members"][member["member_id"]]
        old_offsets = member.get("task_offsets") or {}
        for role in ("active", "standby", "warmup"):
            member[role] = list(roles[role])
        member["task_end_offsets"] = {t: END_OFFSET for t in member["active"] if t in stateful}
        member["task_offsets"] = {t: END_OFFSET if catch_up else old_offsets.get(t, 0)
                                  for t in (*member["standby"], *member["warmup"])}
    return nxt


def add_process(scenario: dict[str, Any], process_id: str, members: int = 1, rack: str | None = None,
                tags: dict[str, str] | None = None) -> dict[str, Any]:
    nxt = copy.deepcopy(scenario)
    for m in range(members):
        nxt["members"].append({"member_id": f"{process_id}-t{m}", "process_id": process_id, "rack": rack,
                               "client_tags": dict(tags or {}), "active": [], "standby": [], "warmup": [],
                               "task_offsets": {}, "task_end_offsets": {}})
    return nxt


def remove_process(scenario: dict[str, Any], process_id: str) -> dict[str, Any]:
    nxt = copy.deepcopy(scenario)
    nxt["members"] = [m for m in nxt["members"] if m["process_id"] != process_id]
    return nxt

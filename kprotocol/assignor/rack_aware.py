"""KIP-925 rack awareness: min-cost placement of active tasks and greedy standby swaps.

Cost of a task on a process = traffic_cost x (source partitions whose replicas are all in other racks)
+ non_overlap_cost if the process is not the task's current owner. The number of tasks per process never
changes. Tasks with the same subtopology (balance_subtopology only), the same per-rack traffic and the same
current owner are interchangeable, so they are merged into one flow source; clients are reached through one
node per rack. That graph has (#task classes x #racks) arcs instead of tasks x clients and it has the same
optimum: keeping a task on its owner is an arc of its own, every other client of a rack costs the same.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from .api import AssignmentConfigs
from .min_cost_flow import FlowNetwork
from .problem import Problem
from .standby import tag_score

DEFAULT_TRAFFIC_COST = 10
DEFAULT_NON_OVERLAP_COST = 1


def configured_costs(configs: AssignmentConfigs) -> tuple[int, int]:
    """(traffic cost, non-overlap cost) from the configs, Kafka's defaults 10 and 1 when unset."""
    traffic_cost, non_overlap_cost = configs.rack_aware_traffic_cost, configs.rack_aware_non_overlap_cost
    return (DEFAULT_TRAFFIC_COST if traffic_cost is None else traffic_cost,
            DEFAULT_NON_OVERLAP_COST if non_overlap_cost is None else non_overlap_cost)


def traffic(partition_racks: Sequence[frozenset[str]], rack: str | None) -> int:
    """Partitions of a task whose replicas are all outside `rack` (0 for a client without rack)."""
    if rack is None:
        return 0
    return sum(1 for racks in partition_racks if rack not in racks)


def optimize_actives(problem: Problem, tasks: Sequence[int], owner: list[int], traffic_cost: int,
                     non_overlap_cost: int, balance_subtopology: bool = False) -> None:
    """Re-place `tasks` (currently on `owner[t]`) at minimum cost, same count per process; updates `owner`.

    With `balance_subtopology`, a process with load L gets at most ceil(S_j x L / n) of the n tasks, S_j of
    which belong to subtopology j (KIP-925); when that is infeasible the plain minimum is used.
    """
    if not tasks:
        return
    if balance_subtopology and _solve(problem, tasks, owner, traffic_cost, non_overlap_cost, True):
        return
    _solve(problem, tasks, owner, traffic_cost, non_overlap_cost, False)


def _solve(problem: Problem, tasks: Sequence[int], owner: list[int], traffic_cost: int, non_overlap_cost: int,
           by_subtopology: bool) -> bool:
    racks = sorted({r for r in problem.rack if r is not None}) + [None]
    rack_index = {r: i for i, r in enumerate(racks)}
    load: dict[int, int] = defaultdict(int)
    classes: dict[tuple, list[int]] = defaultdict(list)
    sub_size: dict[int, int] = defaultdict(int)
    for t in tasks:
        load[owner[t]] += 1
        sub = problem.subtopology[t] if by_subtopology else -1
        sub_size[sub] += 1
        costs = tuple(traffic(problem.source_racks[t], r) for r in racks)
        classes[(sub, costs, owner[t])].append(t)
    procs = sorted(load)
    in_rack = {r: [p for p in procs if problem.rack[p] == r] for r in racks}
    net = FlowNetwork()
    proc_node = {p: net.add_node(-load[p]) for p in procs}
    entry: dict[tuple[int, int], int] = {}   # (subtopology, process) -> node taking that subtopology's tasks
    rack_node: dict[tuple[int, int], int] = {}
    fan_out: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)  # rack node -> (arc, process)
    for sub in sorted(sub_size):
        for p in procs:
            if by_subtopology:
                node = net.add_node()
                net.add_arc(node, proc_node[p], 0, math.ceil(sub_size[sub] * load[p] / len(tasks)))
            else:
                node = proc_node[p]
            entry[(sub, p)] = node
        for ri, r in enumerate(racks):
            if in_rack[r]:
                rack_node[(sub, ri)] = node = net.add_node()
                fan_out[(sub, ri)] = [(net.add_arc(node, entry[(sub, p)], 0), p) for p in in_rack[r]]
    class_arcs = []
    for key in sorted(classes, key=lambda k: (k[0], k[1], k[2])):
        sub, costs, current = key
        node = net.add_node(len(classes[key]))
        stay = net.add_arc(node, entry[(sub, current)], traffic_cost * costs[rack_index[problem.rack[current]]])
        moves = [(net.add_arc(node, rack_node[(sub, ri)], traffic_cost * costs[ri] + non_overlap_cost), (sub, ri))
                 for ri in range(len(racks)) if (sub, ri) in rack_node]
        class_arcs.append((classes[key], current, stay, moves))
    flow = net.solve()
    if flow is None:
        return False
    pools: dict[tuple[int, int], list[int]] = defaultdict(list)
    for members, current, stay, moves in class_arcs:
        kept = flow[stay]
        for t in members[:kept]:
            owner[t] = current
        rest = iter(members[kept:])
        for arc, rnode in moves:
            pools[rnode].extend(next(rest) for _ in range(flow[arc]))
    for rnode, arcs in fan_out.items():
        pool = iter(pools.get(rnode, ()))
        for arc, p in arcs:
            for _ in range(flow[arc]):
                owner[next(pool)] = p
    return True


def swap_standbys(problem: Problem, active: list[int], standbys: list[list[int]], warmups: Sequence[int],
                  tag_keys: Sequence[str] = ()) -> None:
    """Greedily swap standbys between processes of two racks while that lowers changelog cross-rack traffic,
    keeps every task at most once per process and does not reduce client-tag spread.

    For racks A and B, moving task t from A to B saves gain(t) = cost(t, A) - cost(t, B); a swap pays off when
    the two gains add up to more than zero, so each rack's standbys are paired best gain first.
    """
    racks = sorted({problem.rack[p] for p in range(problem.num_processes)}, key=lambda r: (r is None, r or ""))
    if len(racks) < 2:
        return
    cost = {r: [traffic(problem.changelog_racks[t], r) if problem.stateful[t] else 0
                for t in range(problem.num_tasks)] for r in racks}
    holders = [{active[t], *standbys[t], warmups[t]} - {-1} for t in range(problem.num_tasks)]

    def keeps_tag_spread(t: int, old: int, new: int) -> bool:
        others = [h for h in holders[t] if h != old]
        return tag_score(problem, tag_keys, new, others) >= tag_score(problem, tag_keys, old, others)

    for i, rack_a in enumerate(racks):
        for rack_b in racks[i + 1:]:
            in_a, in_b = [], []
            for t, procs in enumerate(standbys):
                for p in procs:
                    if problem.rack[p] == rack_a:
                        in_a.append((cost[rack_b][t] - cost[rack_a][t], p, t))
                    elif problem.rack[p] == rack_b:
                        in_b.append((cost[rack_a][t] - cost[rack_b][t], p, t))
            in_a.sort()
            in_b.sort()
            taken = [False] * len(in_b)
            first = 0  # in_b[:first] are all taken
            for loss_a, p1, t1 in in_a:
                if loss_a >= 0:
                    break
                while first < len(in_b) and taken[first]:
                    first += 1
                for j in range(first, len(in_b)):
                    loss_b, p2, t2 = in_b[j]
                    if loss_a + loss_b >= 0:
                        break
                    if taken[j] or p2 in holders[t1] or p1 in holders[t2]:
                        continue
                    if tag_keys and not (keeps_tag_spread(t1, p1, p2) and keeps_tag_spread(t2, p2, p1)):
                        continue
                    taken[j] = True
                    standbys[t1][standbys[t1].index(p1)] = p2
                    standbys[t2][standbys[t2].index(p2)] = p1
                    holders[t1] ^= {p1, p2}
                    holders[t2] ^= {p1, p2}
                    break

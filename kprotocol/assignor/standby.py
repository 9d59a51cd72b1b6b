"""Standby placement: sticky, load-balanced, never on a process that already holds the task, and spread over
client tag values (KIP-708) when `rack.aware.assignment.tags` are set."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from itertools import compress, repeat
from operator import add, floordiv, mul

from .balance import even_quotas
from .problem import Problem


def tag_score(problem: Problem, tag_keys: Sequence[str], candidate: int, holders: Sequence[int]) -> int:
    """Number of tag keys on which `candidate` differs from every current holder of the task."""
    tags = problem.tags[candidate]
    return sum(1 for k in tag_keys if all(problem.tags[h].get(k) != tags.get(k) for h in holders))


def assign_standbys(problem: Problem, active: list[int], replicas: int, load: list[int],
                    tag_keys: Sequence[str] = (), by_lag: bool = False) -> list[Sequence[int]]:
    """Standby processes per task (empty for stateless ones); `load` (tasks per process) is updated.

    Previous standby holders, then the previous active owner, keep the standby while their total load stays
    within an even quota (`by_lag`: lowest lag first); other standbys go to the least loaded process.
    """
    n_proc = problem.num_processes
    replicas = min(replicas, n_proc - 1)
    standbys: list[Sequence[int]] = [()] * problem.num_tasks
    if replicas <= 0:
        return standbys
    stateful = list(compress(range(problem.num_tasks), problem.stateful))
    cap = problem.capacity
    quota = even_quotas(cap, sum(load) + replicas * len(stateful), ())
    heap = _LoadHeap(load, cap)
    use_tags = bool(tag_keys) and any(problem.tags[p].get(k) is not None for p in range(n_proc) for k in tag_keys)
    prev_active, prev_standby = problem.prev_active, problem.prev_standby
    take_least_loaded, keys, unit = heap.take_least_loaded, heap.heap, heap.unit
    lean = replicas == 1 and not use_tags
    for t in stateful:
        owner = active[t]
        held, previous_owner = prev_standby.get(t), prev_active[t]
        if lean and previous_owner in (-1, owner) and (held is None or len(held) == 1):
            # the common case, kept lean: one standby, at most one previous holder to prefer, else the
            # least loaded process, taken straight off the top of the heap when that is not the owner
            p = -1 if held is None else held[0]
            if p >= 0 and p != owner and load[p] < quota[p]:
                load[p] += 1
            else:
                key = keys[0]
                p = key % n_proc
                if p != owner and key == load[p] * unit[p] + p:
                    load[p] += 1
                    heapq.heapreplace(keys, key + unit[p])
                else:
                    p = take_least_loaded(owner, ())
            standbys[t] = [p]
            continue
        chosen: list[int] = []
        standbys[t] = chosen
        previous: Sequence[int] = ()
        if held is not None or previous_owner not in (-1, owner):
            previous = [p for p in held or () if p != owner]
            if previous_owner not in (-1, owner):
                previous.append(previous_owner)
        for _ in range(replicas):
            if use_tags:
                p = _best_by_tags(problem, tag_keys, t, [owner, *chosen], previous, load, quota, by_lag)
                load[p] += 1
            else:
                p = _best_previous(problem, t, chosen, previous, load, quota, by_lag) if previous else -1
                if p < 0:
                    p = take_least_loaded(owner, chosen)
                else:
                    load[p] += 1
            chosen.append(p)
    return standbys


class _LoadHeap:
    """Processes by tasks per thread, then process index: one entry per process, refreshed lazily when its
    `load` grew behind the heap's back (rebuilt at once when many did). Keys are plain ints (load x
    lcm(capacities) / capacity, then index) so that comparing them is exact and allocates nothing the GC tracks."""

    def __init__(self, load: list[int], capacity: Sequence[int]) -> None:
        self.load = load
        self.n = n = len(capacity)
        distinct = set(capacity)
        multiple = math.lcm(*distinct)
        if len(distinct) == 1:  # the usual equal thread counts: one unit for all
            self.unit = [multiple // capacity[0] * n] * n
        else:
            self.unit = list(map(mul, map(floordiv, repeat(multiple), capacity), repeat(n)))
        self.rebuild_after = max(4, n // 16)  # stale entries met in one call before a rebuild pays off
        self.heap: list[int] = []
        self._rebuild()

    def _rebuild(self) -> None:
        """All entries afresh, in place (callers may hold the list)."""
        self.heap[:] = map(add, map(mul, self.load, self.unit), range(self.n))
        heapq.heapify(self.heap)

    def take_least_loaded(self, owner: int, chosen: Sequence[int]) -> int:
        """The least loaded process other than `owner` and `chosen`, given one more task."""
        heap, load, unit, n = self.heap, self.load, self.unit, self.n
        skipped = []
        stale = 0
        while True:
            key = heap[0]
            p = key % n
            current = load[p] * unit[p] + p
            if key != current:  # entries only lag behind: the true key is larger
                stale += 1
                if stale <= self.rebuild_after:
                    heapq.heapreplace(heap, current)
                else:
                    self._rebuild()
                    skipped = []
            elif p == owner or p in chosen:
                if not skipped and len(heap) > 1:  # the runner-up child, if valid, swaps with the top in place
                    runner_up = heap[1] if len(heap) == 2 or heap[1] < heap[2] else heap[2]
                    q = runner_up % n
                    if runner_up == load[q] * unit[q] + q and q != owner and q not in chosen:
                        load[q] += 1
                        heapq.heapreplace(heap, runner_up + unit[q])  # drops the top ...
                        heapq.heapreplace(heap, key)  # ... and puts it back instead of the runner-up
                        return q
                skipped.append(heapq.heappop(heap))
            else:
                load[p] += 1
                heapq.heapreplace(heap, current + unit[p])
                for entry in skipped:
                    heapq.heappush(heap, entry)
                return p


def _best_previous(problem: Problem, t: int, chosen: list[int], previous: Sequence[int], load: list[int],
                   quota: list[int], by_lag: bool) -> int:
    """The previous holder (none of them is the active owner) to keep the standby, or -1."""
    if len(previous) == 1:
        p = previous[0]
        return p if load[p] < quota[p] and p not in chosen else -1
    best = None
    for p in previous:
        if p not in chosen and load[p] < quota[p]:
            key = (problem.lag(t, p) if by_lag else 0, load[p] / problem.capacity[p], p)
            if best is None or key < best:
                best = key
    return -1 if best is None else best[2]


def _best_by_tags(problem: Problem, tag_keys: Sequence[str], t: int, holders: list[int], previous: Sequence[int],
                  load: list[int], quota: list[int], by_lag: bool) -> int:
    best = None
    for p in range(problem.num_processes):
        if p in holders:
            continue
        sticky = p in previous and load[p] < quota[p]
        key = (-tag_score(problem, tag_keys, p, holders), not sticky,
               problem.lag(t, p) if by_lag and sticky else 0, load[p] / problem.capacity[p], p)
        if best is None or key < best:
            best = key
    return best[-1]

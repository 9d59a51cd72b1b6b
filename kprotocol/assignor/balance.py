"""Load quotas and the balanced, sticky placement of tasks on processes.

Loads are compared per thread (tasks / capacity). `even_quotas` gives every thread floor or ceil of its share,
so per-process spread stays <= 1; `placements` keeps previous owners within quota, then candidate holders,
then deals the rest round-robin in proportion to the remaining room, which spreads each subtopology.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress, islice, repeat
from operator import gt, lt, mul, sub
from types import MappingProxyType

import numpy as np


def even_quotas(capacity: Sequence[int], n: int, previous: Sequence[int]) -> list[int]:
    """Per-process task counts for `n` tasks: each thread gets n // threads, the n % threads extra tasks go
    first to processes that previously held more than their base quota (so fewer tasks move)."""
    threads = sum(capacity)
    if threads == 0:
        return [0] * len(capacity)
    base, extra = divmod(n, threads)
    quota = list(map(mul, capacity, repeat(base))) if base else [0] * len(capacity)
    base_quota = quota.copy()
    if extra and any(map(gt, previous, quota)):
        excess = sorted((q - v, p) for p, v, q in zip(range(len(quota)), previous, quota) if v > q)
        for neg_excess, p in excess:
            give = min(capacity[p], -neg_excess, extra)
            quota[p] += give
            extra -= give
            if extra == 0:
                break
    while extra:  # rounds in process order, one more task to each process with room left for extras
        for p in islice(compress(range(len(capacity)), map(lt, map(sub, quota, base_quota), capacity)), extra):
            quota[p] += 1  # read lazily by the map above after this process: the round sees it as before
            extra -= 1
    return quota


def fill_quotas(capacity: Sequence[int], base: Sequence[int], n: int, previous: Sequence[int]) -> list[int]:
    """How many of `n` more tasks each process takes on top of `base` loads, water-filling the least loaded
    thread first; ties favour processes that previously held more of these tasks."""
    added = [0] * len(capacity)
    left = list(previous)
    heap = [((base[p] + 1) / capacity[p], 0 if left[p] > 0 else 1, p) for p in range(len(capacity))]
    heapq.heapify(heap)
    for _ in range(n):
        _, _, p = heapq.heappop(heap)
        added[p] += 1
        left[p] -= 1
        heapq.heappush(heap, ((base[p] + added[p] + 1) / capacity[p], 0 if left[p] > 0 else 1, p))
    return added


def deal(count: int, room: Sequence[int]) -> list[int]:
    """`count` processes in an interleaved order in which each process appears evenly spread, at most room[p]
    times: consecutive tasks of one subtopology land on different processes."""
    rooms = np.asarray(room)
    procs = np.flatnonzero(rooms > 0)
    if count == 0 or procs.size == 0:
        return []
    sizes = rooms[procs]
    slot_proc = np.repeat(procs, sizes)
    starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
    rank = np.arange(slot_proc.size) - starts
    key = (2 * rank + 1) / (2 * np.repeat(sizes, sizes))
    order = np.lexsort((slot_proc, key))
    return slot_proc[order][:count].tolist()


def placements(tasks: Iterable[int], quota: Sequence[int], capacity: Sequence[int], keep: Sequence[int],
               candidates: Mapping[int, Iterable[int]] = MappingProxyType({}),
               rank: Callable[[int, int], int] | None = None) -> list[int]:
    """Per task (indexed like `keep`), the process of the tasks in `tasks`, -1 for the others; exactly
    `quota[p]` tasks per process (quotas add up to the number of `tasks`).

    1. `keep[t]`: the previous owner (or -1), kept while under quota (in the order of `tasks`);
    2. `candidates[t]`: processes to prefer, lowest `rank(t, p)` (default 0) then least loaded first;
    3. the rest is dealt over the remaining room in task index order (subtopology by subtopology).
    """
    owner = [-1] * len(keep)
    load = [0] * len(quota)
    if max(keep, default=-1) < 0:
        rest = list(tasks)
    else:
        rest = []
        for t in tasks:
            p = keep[t]
            if p >= 0 and load[p] < quota[p]:
                owner[t] = p
                load[p] += 1
            else:
                rest.append(t)
    unplaced = [] if candidates else rest
    for t in rest if candidates else ():
        best = None
        for p in candidates.get(t, ()):
            if load[p] < quota[p]:
                key = (rank(t, p) if rank else 0, load[p] / capacity[p], p)
                if best is None or key < best:
                    best = key
        if best is None:
            unplaced.append(t)
        else:
            owner[t] = best[2]
            load[best[2]] += 1
    room = list(map(sub, quota, load))
    unplaced.sort()
    for t, p in zip(unplaced, deal(len(unplaced), room)):
        owner[t] = p
    return owner

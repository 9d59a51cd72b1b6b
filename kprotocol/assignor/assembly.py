"""Turning per-task process indexes into a KIP-924 `TaskAssignment`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, repeat
from operator import attrgetter

from .api import KafkaStreamsAssignment, TaskAssignment
from .problem import Problem

_APPEND = attrgetter("append")


def to_task_assignment(problem: Problem, active: Sequence[int], standbys: Sequence[Sequence[int]],
                       warmups: Sequence[int] | None = None, deadline_ms: int | None = None) -> TaskAssignment:
    ids, n = problem.task_ids, problem.num_processes
    standby_pairs = ((task_id, p) for task_id, procs in compress(zip(ids, standbys), standbys) for p in procs)
    warmup_pairs = ((task_id, p) for task_id, p in zip(ids, warmups or ()) if p >= 0)
    fields = zip(problem.process_ids, _by_process(n, zip(ids, active), len(ids)),
                 _by_process(n, standby_pairs, sum(map(len, standbys))), _by_process(n, warmup_pairs, 0),
                 repeat(deadline_ms))
    # KafkaStreamsAssignment(...) without the keyword-handling overhead
    return TaskAssignment(tuple(map(tuple.__new__, repeat(KafkaStreamsAssignment), fields)))


def _by_process(n: int, pairs: Iterable[tuple[str, int]], size_hint: int) -> Iterator[tuple[str, ...]]:
    """Per process, the task ids paired with it (in pair order): a list per process when most processes get
    some, else a dict of the ones that do."""
    if size_hint >= n:
        groups = list(map(list, repeat((), n)))
        add = list(map(_APPEND, groups))
        for task_id, p in pairs:
            add[p](task_id)
        return map(tuple, groups)
    sparse: dict[int, list[str]] = {}
    for task_id, p in pairs:
        group = sparse.get(p)
        if group is None:
            sparse[p] = [task_id]
        else:
            group.append(task_id)
    groups: list[tuple[str, ...]] = [()] * n
    for p, group in sparse.items():
        groups[p] = tuple(group)
    return iter(groups)

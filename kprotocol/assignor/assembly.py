"""Turning per-task process indexes into a KIP-924 `TaskAssignment`."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import attrgetter

from .api import KafkaStreamsAssignment, TaskAssignment
from .problem import Problem

_APPEND = attrgetter("append")


def to_task_assignment(problem: Problem, active: Sequence[int], standbys: Sequence[Sequence[int]],
                       warmups: Sequence[int] | None = None, deadline_ms: int | None = None) -> TaskAssignment:
    ids, n = problem.task_ids, problem.num_processes
    actives: list[list[str]] = list(map(list, repeat((), n)))
    add = list(map(_APPEND, actives))
    for task_id, p in zip(ids, active):
        add[p](task_id)
    standby_tasks: list[list[str]] = list(map(list, repeat((), n)))
    add = list(map(_APPEND, standby_tasks))
    for task_id, procs in compress(zip(ids, standbys), standbys):
        for p in procs:
            add[p](task_id)
    warmup_tasks: dict[int, list[str]] = {}
    for task_id, p in zip(ids, warmups or ()):
        if p >= 0:
            warmup_tasks.setdefault(p, []).append(task_id)
    warmup_groups = map(tuple, map(warmup_tasks.get, range(n), repeat(()))) if warmup_tasks else repeat((), n)
    fields = zip(problem.process_ids, map(tuple, actives), map(tuple, standby_tasks), warmup_groups,
                 repeat(deadline_ms))
    # KafkaStreamsAssignment(...) without the keyword-handling overhead
    return TaskAssignment(tuple(map(tuple.__new__, repeat(KafkaStreamsAssignment), fields)))

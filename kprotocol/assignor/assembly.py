"""Turning per-task process indexes into a KIP-924 `TaskAssignment`."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat

from .api import KafkaStreamsAssignment, TaskAssignment
from .problem import Problem


def to_task_assignment(problem: Problem, active: Sequence[int], standbys: Sequence[Sequence[int]],
                       warmups: Sequence[int] | None = None, deadline_ms: int | None = None) -> TaskAssignment:
    ids, n = problem.task_ids, problem.num_processes
    actives: list[list[str]] = [[] for _ in range(n)]
    add = [tasks.append for tasks in actives]
    for task_id, p in zip(ids, active):
        add[p](task_id)
    standby_tasks: list[list[str]] = [[] for _ in range(n)]
    add = [tasks.append for tasks in standby_tasks]
    for task_id, procs in compress(zip(ids, standbys), standbys):
        for p in procs:
            add[p](task_id)
    warmup_tasks: dict[int, list[str]] = {}
    for task_id, p in zip(ids, warmups or ()):
        if p >= 0:
            warmup_tasks.setdefault(p, []).append(task_id)
    make = tuple.__new__  # KafkaStreamsAssignment(...) without the keyword-handling overhead
    return TaskAssignment(tuple(
        make(KafkaStreamsAssignment, (pid, tuple(a), tuple(s), tuple(warmup_tasks.get(p, ())), deadline))
        for p, pid, a, s, deadline in zip(range(n), problem.process_ids, actives, standby_tasks,
                                          repeat(deadline_ms))))

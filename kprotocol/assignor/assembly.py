"""Turning per-task process indexes into a KIP-924 `TaskAssignment`."""

from __future__ import annotations

from collections.abc import Sequence

from .api import KafkaStreamsAssignment, TaskAssignment
from .problem import Problem


def to_task_assignment(problem: Problem, active: Sequence[int], standbys: Sequence[Sequence[int]],
                       warmups: Sequence[int] | None = None, deadline_ms: int | None = None) -> TaskAssignment:
    ids = problem.task_ids
    roles: dict[int, tuple[list[str], list[str], list[str]]] = {}
    for task_id, p in zip(ids, active):
        (roles.get(p) or roles.setdefault(p, ([], [], [])))[0].append(task_id)
    for t, procs in enumerate(standbys):
        for p in procs:
            (roles.get(p) or roles.setdefault(p, ([], [], [])))[1].append(ids[t])
    for t, p in enumerate(warmups or ()):
        if p >= 0:
            (roles.get(p) or roles.setdefault(p, ([], [], [])))[2].append(ids[t])
    make = tuple.__new__  # KafkaStreamsAssignment(...) without the keyword-handling overhead
    clients = []
    for p, pid in enumerate(problem.process_ids):
        r = roles.get(p)
        fields = (pid, tuple(r[0]), tuple(r[1]), tuple(r[2]), deadline_ms) if r else (pid, (), (), (), deadline_ms)
        clients.append(make(KafkaStreamsAssignment, fields))
    return TaskAssignment(tuple(clients))

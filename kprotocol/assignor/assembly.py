"""Turning per-task process indexes into a KIP-924 `TaskAssignment`."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from .api import AssignedTask, AssignedTaskType, KafkaStreamsAssignment, TaskAssignment
from .problem import Problem


def to_task_assignment(problem: Problem, active: Sequence[int], standbys: Sequence[Sequence[int]],
                       warmups: Sequence[int] | None = None, deadline_ms: int | None = None) -> TaskAssignment:
    ids = problem.task_ids
    per_process: list[dict[str, AssignedTask]] = [{} for _ in problem.process_ids]
    active_kind, standby_kind, warmup_kind = AssignedTaskType.ACTIVE, AssignedTaskType.STANDBY, AssignedTaskType.WARMUP
    for task_id, p in zip(ids, active):
        per_process[p][task_id] = AssignedTask(task_id, active_kind)
    for t, procs in enumerate(standbys):
        for p in procs:
            per_process[p][ids[t]] = AssignedTask(ids[t], standby_kind)
    if warmups is not None:
        for t, p in enumerate(warmups):
            if p >= 0:
                per_process[p][ids[t]] = AssignedTask(ids[t], warmup_kind)
    return TaskAssignment(tuple(
        KafkaStreamsAssignment(pid, MappingProxyType(tasks), deadline_ms)
        for pid, tasks in zip(problem.process_ids, per_process)))

"""Turning per-task process indexes into a KIP-924 `TaskAssignment`."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from .api import AssignedTask, AssignedTaskType, KafkaStreamsAssignment, TaskAssignment
from .problem import Problem


def to_task_assignment(problem: Problem, active: Sequence[int], standbys: Sequence[Sequence[int]],
                       warmups: Sequence[int] | None = None, deadline_ms: int | None = None) -> TaskAssignment:
    per_process: list[dict[str, AssignedTask]] = [{} for _ in problem.process_ids]
    kinds = (AssignedTaskType.ACTIVE, AssignedTaskType.STANDBY, AssignedTaskType.WARMUP)
    for t, task_id in enumerate(problem.task_ids):
        per_process[active[t]][task_id] = AssignedTask(task_id, kinds[0])
        for p in standbys[t]:
            per_process[p][task_id] = AssignedTask(task_id, kinds[1])
        if warmups is not None and warmups[t] >= 0:
            per_process[warmups[t]][task_id] = AssignedTask(task_id, kinds[2])
    return TaskAssignment(tuple(
        KafkaStreamsAssignment(pid, MappingProxyType(tasks), deadline_ms)
        for pid, tasks in zip(problem.process_ids, per_process)))

"""Spreading each process's tasks over its members (stream threads): balanced and sticky per member."""

from __future__ import annotations

from collections.abc import Sequence

from .api import AssignedTaskType, TaskAssignment, task_sort_key
from .balance import even_quotas, fill_quotas, placements
from .scenario import Member

Roles = dict[str, dict[str, list[str]]]


def distribute(assignment: TaskAssignment, members: Sequence[Member]) -> Roles:
    """member id -> {"active", "standby", "warmup"} task lists (sorted)."""
    by_process: dict[str, list[Member]] = {}
    for m in members:
        by_process.setdefault(m.process_id, []).append(m)
    result: Roles = dict.fromkeys(m.member_id for m in members)  # type: ignore[arg-type]  # filled below
    for client in assignment.assignment:
        group = by_process.get(client.process_id, ())
        if not group:
            continue
        if len(group) == 1:  # the usual one-thread process: nothing to spread
            result[group[0].member_id] = {"active": _sorted(client.active_tasks),
                                          "standby": _sorted(client.standby_tasks),
                                          "warmup": _sorted(client.warmup_tasks)}
            continue
        group = sorted(group, key=lambda m: m.member_id)
        for m in group:
            result[m.member_id] = {"active": [], "standby": [], "warmup": []}
        actives = client.of_type(AssignedTaskType.ACTIVE)
        others = [(t, "standby") for t in client.of_type(AssignedTaskType.STANDBY)]
        others += [(t, "warmup") for t in client.of_type(AssignedTaskType.WARMUP)]
        others.sort(key=lambda item: task_sort_key(item[0]))
        ones = [1] * len(group)
        prev_active = {t: i for i, m in enumerate(group) for t in m.active}
        prev_any = {t: i for i, m in enumerate(group) for t in (*m.standby, *m.warmup)}
        prev_any.update(prev_active)
        keep = [prev_active.get(t, -1) for t in actives]
        owner = placements(range(len(actives)), even_quotas(ones, len(actives), _counts(keep, len(group))), ones,
                           keep=keep)
        load = [0] * len(group)
        for i, m in enumerate(owner):
            result[group[m].member_id]["active"].append(actives[i])
            load[m] += 1
        keep = [prev_any.get(t, -1) for t, _ in others]
        quota = fill_quotas(ones, load, len(others), _counts(keep, len(group)))
        owner = placements(range(len(others)), quota, ones, keep=keep)
        for i, m in enumerate(owner):
            task, role = others[i]
            result[group[m].member_id][role].append(task)
        for m in group:
            for tasks in result[m.member_id].values():
                tasks.sort(key=task_sort_key)
    for member_id, roles in result.items():
        if roles is None:  # a process the assignment does not name
            result[member_id] = {"active": [], "standby": [], "warmup": []}
    return result


def _sorted(ids: Sequence[str]) -> list[str]:
    return sorted(ids, key=task_sort_key) if len(ids) > 1 else list(ids)


def _counts(owners: Sequence[int], n: int) -> list[int]:
    counts = [0] * n
    for i in owners:
        if i >= 0:
            counts[i] += 1
    return counts

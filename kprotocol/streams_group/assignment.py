"""Target assignment of a streams group at member level.

`sticky` is Kafka's broker assignor itself (`broker_sticky`). Any other name is the shared assignor: it
places tasks on processes (KIP-924), `distribute` then spreads each process's tasks over its members;
previous ownership is the current target assignment, lags come from the task offsets members report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from kprotocol.assignor import (ApplicationState, AssignmentConfigs, AssignmentError, KafkaStreamsState,
                                TaskAssignmentError, TaskInfo, distribute, resolve_assignor,
                                validate_task_assignment)
from kprotocol.assignor.api import unchecked
from kprotocol.assignor.scenario import Member as ScenarioMember
from kprotocol.streams_group import broker_sticky
from kprotocol.streams_group.member import Member
from kprotocol.streams_group.tasks import TaskSets


_NO_TARGET = TaskSets()
_NOTHING: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True)
class AssignmentSettings:
    assignor: str = "sticky"
    num_standby_replicas: int = 0
    num_warmup_replicas: int = 2
    acceptable_recovery_lag: int = 10_000


def compute_targets(members: Mapping[str, Member], targets: Mapping[str, TaskSets], tasks: Mapping[str, int],
                    stateful: set[str], settings: AssignmentSettings,
                    task_offsets: Mapping[str, Mapping[tuple[str, int], int]],
                    end_offsets: Mapping[str, Mapping[tuple[str, int], int]], now_ms: int) -> dict[str, TaskSets]:
    """member id -> its new target, for `tasks` (subtopology -> number of tasks); `members` in the order Kafka
    iterates them (its table of members, then a joining member), which breaks the `sticky` assignor's ties."""
    if not members:
        return {}
    if settings.assignor == "sticky":
        return broker_sticky.assign(list(members.values()), tasks, stateful, settings.num_standby_replicas,
                                    task_offsets)
    shape = tuple(sorted(tasks.items()))
    all_tasks = _task_infos(shape, frozenset(stateful))
    name_of, task_of = _task_names(shape)
    by_process: dict[str, list[Member]] = {}
    scenario_by_process: dict[str, list[ScenarioMember]] = {}
    scenario_members = []
    for m in members.values():
        t = targets.get(m.member_id)
        active, standby, warmup = (_names(role, name_of) if role else () for role in (t or _NO_TARGET))
        member = unchecked(ScenarioMember, member_id=m.member_id, process_id=m.process_id, active=active,
                           standby=standby, warmup=warmup)
        scenario_members.append(member)
        by_process.setdefault(m.process_id, []).append(m)
        scenario_by_process.setdefault(m.process_id, []).append(member)
    ends: dict[str, int] = {}
    for per_member in end_offsets.values():
        for (sub, p), offset in per_member.items():
            ends[f"{sub}_{p}"] = max(ends.get(f"{sub}_{p}", 0), offset)
    states = {}
    for pid, group in by_process.items():
        group_members = scenario_by_process[pid]
        active = frozenset(x for s in group_members for x in s.active)
        standby = frozenset(x for s in group_members for x in (*s.standby, *s.warmup)) - active
        lags: dict[str, int] = {}
        for m in group:
            for (sub, p), offset in task_offsets.get(m.member_id, {}).items():
                tid = f"{sub}_{p}"
                if tid in all_tasks and all_tasks[tid].is_stateful:
                    lag = max(0, ends.get(tid, 0) - offset) if offset >= 0 else 0
                    lags[tid] = min(lags.get(tid, lag), lag)
        for tid in active:
            if all_tasks[tid].is_stateful:
                lags[tid] = 0
        first = group[0] if len(group) == 1 else min(group, key=lambda m: m.member_id)
        states[pid] = unchecked(
            KafkaStreamsState, process_id=pid, num_processing_threads=len(group), rack_id=first.rack_id,
            client_tags=MappingProxyType(dict(first.client_tags)) if first.client_tags else _NOTHING,
            previous_active_tasks=active, previous_standby_tasks=standby,
            task_lags=MappingProxyType(lags) if lags else _NOTHING, end_offsets=ends, consumer_client_ids=())
    configs = AssignmentConfigs(acceptable_recovery_lag=settings.acceptable_recovery_lag,
                                max_warmup_replicas=settings.num_warmup_replicas,
                                num_standby_replicas=settings.num_standby_replicas)
    state = ApplicationState(all_tasks, states, configs, now_ms)
    assignment = resolve_assignor(settings.assignor).assign(state)
    error = validate_task_assignment(state, assignment)
    if error is not AssignmentError.NONE:
        raise TaskAssignmentError(f"assignor {settings.assignor!r} returned an invalid assignment: {error.value}")
    roles = distribute(assignment, scenario_members)
    return {member_id: TaskSets(_tasks(r["active"], task_of), _tasks(r["standby"], task_of),
                                _tasks(r["warmup"], task_of)) for member_id, r in roles.items()}


@lru_cache(maxsize=64)
def _task_infos(tasks: tuple[tuple[str, int], ...], stateful: frozenset[str]) -> Mapping[str, TaskInfo]:
    """The assignor's tasks of a configured topology (built once per topology and partition counts)."""
    return MappingProxyType({f"{sub}_{p}": TaskInfo(f"{sub}_{p}", sub in stateful)
                             for sub, count in tasks for p in range(count)})


@lru_cache(maxsize=64)
def _task_names(tasks: tuple[tuple[str, int], ...]) -> tuple[dict[tuple[str, int], str], dict[str, tuple[str, int]]]:
    """(subtopology, partition) <-> the assignor's task id, for the tasks of a configured topology."""
    name_of = {(sub, p): f"{sub}_{p}" for sub, count in tasks for p in range(count)}
    return name_of, {name: task for task, name in name_of.items()}


def _names(tasks: Mapping[str, frozenset[int]], name_of: Mapping[tuple[str, int], str]) -> tuple[str, ...]:
    """The assignor's ids of `tasks`, in the order of their subtopologies and partitions; tasks the
    topology no longer has (fewer partitions) are left out."""
    return tuple(name for sub in sorted(tasks) for p in sorted(tasks[sub]) if (name := name_of.get((sub, p))))


def _tasks(ids: list[str], task_of: Mapping[str, tuple[str, int]]) -> dict[str, frozenset[int]]:
    if not ids:
        return {}
    pairs: dict[str, list[int]] = {}
    for tid in ids:
        sub, p = task_of[tid]
        pairs.setdefault(sub, []).append(p)
    return {sub: frozenset(ps) for sub, ps in pairs.items()}

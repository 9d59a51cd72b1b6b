"""An index-based view of an `ApplicationState` that the built-in assignors work on.

Tasks are numbered in `task_sort_key` order, processes in process-id order, so every tie broken by index is
deterministic. Lags are kept sparse: a process only lists the stateful tasks it has state for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .api import ApplicationState, task_sort_key

_NO_LAGS: Mapping[int, int] = MappingProxyType({})


@dataclass(frozen=True)
class Problem:
    task_ids: list[str]
    subtopology: list[int]               # per task, index into the distinct subtopologies
    partition: list[int]
    stateful: list[bool]
    process_ids: list[str]
    capacity: list[int]
    rack: list[str | None]
    tags: list[Mapping[str, str]]
    prev_active: list[int]               # per task: previous active process or -1
    prev_standby: dict[int, list[int]]   # task -> processes that held it as standby / warm-up (sparse)
    state_lags: dict[int, dict[int, int]]  # task -> {process: lag} for processes with local state (sparse)
    end_offset: list[int]                # per task: lag of a process without state
    acceptable_lag: int
    source_racks: list[tuple[frozenset[str], ...]]     # per task: replica racks of its known source partitions
    changelog_racks: list[tuple[frozenset[str], ...]]  # same for its changelog partitions
    racks_known: bool                    # some client has a rack and some partition has replica racks

    @property
    def num_tasks(self) -> int:
        return len(self.task_ids)

    def owned_first(self, tasks: Iterable[int]) -> list[int]:
        """Previously owned tasks by partition, then subtopology (so that any prefix mixes all subtopologies),
        followed by the other tasks."""
        tasks = list(tasks)
        width = len(self.task_ids) + 1
        owned = sorted((t for t in tasks if self.prev_active[t] >= 0),
                       key=lambda t: self.partition[t] * width + self.subtopology[t])
        return owned + [t for t in tasks if self.prev_active[t] < 0]

    @property
    def num_processes(self) -> int:
        return len(self.process_ids)

    def previous_standbys(self, task: int) -> Sequence[int]:
        return self.prev_standby.get(task, ())

    def state_holders(self, task: int) -> Mapping[int, int]:
        """Process -> lag for the processes with local state of `task`."""
        return self.state_lags.get(task, _NO_LAGS)

    def lag(self, task: int, process: int) -> int:
        return self.state_holders(task).get(process, self.end_offset[task])

    def caught_up(self, task: int, process: int) -> bool:
        return self.lag(task, process) <= self.acceptable_lag


def build_problem(state: ApplicationState) -> Problem:
    all_tasks = state.all_tasks
    task_ids, subtopology, partition = _ordered_tasks(all_tasks)
    index = {t: i for i, t in enumerate(task_ids)}
    stateful = [all_tasks[t].is_stateful for t in task_ids]
    process_ids = sorted(state.kafka_streams_states)
    clients = [state.kafka_streams_states[p] for p in process_ids]
    prev_active = [-1] * len(task_ids)
    prev_standby: dict[int, list[int]] = {}
    state_lags: dict[int, dict[int, int]] = {}
    end_offsets = clients[0].end_offsets if clients else {}
    for p, client in enumerate(clients):
        if not (client.previous_active_tasks or client.previous_standby_tasks or client.task_lags):
            continue
        for t in client.previous_active_tasks:
            i = index.get(t)
            if i is not None and prev_active[i] < 0:
                prev_active[i] = p
        for t in client.previous_standby_tasks:
            i = index.get(t)
            if i is not None:
                prev_standby.setdefault(i, []).append(p)
        for t, lag in client.task_lags.items():
            i = index.get(t)
            if i is not None and stateful[i]:
                state_lags.setdefault(i, {})[p] = lag
    for i, p in enumerate(prev_active):
        if p >= 0 and stateful[i]:
            state_lags.setdefault(i, {})[p] = 0
    with_racks = any(c.rack_id is not None for c in clients)
    source_racks = [_racks(state, t, False) for t in task_ids] if with_racks else [()] * len(task_ids)
    changelog_racks = [_racks(state, t, True) for t in task_ids] if with_racks else [()] * len(task_ids)
    return Problem(
        task_ids=task_ids,
        subtopology=subtopology,
        partition=partition,
        stateful=stateful,
        process_ids=process_ids,
        capacity=[c.num_processing_threads for c in clients],
        rack=[c.rack_id for c in clients],
        tags=[c.client_tags for c in clients],
        prev_active=prev_active,
        prev_standby=prev_standby,
        state_lags=state_lags,
        end_offset=[end_offsets.get(t, 0) if sf else 0 for t, sf in zip(task_ids, stateful)],
        acceptable_lag=state.assignment_configs.acceptable_recovery_lag,
        source_racks=source_racks,
        changelog_racks=changelog_racks,
        racks_known=with_racks and (any(source_racks) or any(changelog_racks)),
    )


def _ordered_tasks(task_ids: Iterable[str]) -> tuple[list[str], list[int], list[int]]:
    """Task ids in `task_sort_key` order with their subtopology index and partition, grouping by subtopology
    first (cheaper than a sort key per task)."""
    groups: dict[str, tuple[list[str], list[int]]] = {}
    for t in task_ids:
        sub, _, part = t.rpartition("_")
        ids, parts = groups.get(sub) or groups.setdefault(sub, ([], []))
        ids.append(t)
        parts.append(int(part))
    ordered: list[str] = []
    subtopology: list[int] = []
    partition: list[int] = []
    for index, sub in enumerate(sorted(groups, key=lambda s: task_sort_key(s + "_0"))):
        ids, parts = groups[sub]
        order = sorted(range(len(ids)), key=parts.__getitem__)
        ordered.extend(ids[i] for i in order)
        partition.extend(parts[i] for i in order)
        subtopology.extend([index] * len(ids))
    return ordered, subtopology, partition


def _racks(state: ApplicationState, task_id: str, changelog: bool) -> tuple[frozenset[str], ...]:
    return tuple(tp.rack_ids for tp in state.all_tasks[task_id].topic_partitions
                 if tp.is_changelog == changelog and tp.rack_ids)

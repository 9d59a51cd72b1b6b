"""An index-based view of an `ApplicationState` that the built-in assignors work on.

Tasks are numbered in `task_sort_key` order, processes in process-id order, so every tie broken by index is
deterministic. Lags are kept sparse: a process only lists the stateful tasks it has state for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress, repeat
from operator import attrgetter, ge, lt
from types import MappingProxyType

from .api import ApplicationState, KafkaStreamsState, task_sort_key

_NO_LAGS: Mapping[int, int] = MappingProxyType({})
_IS_STATEFUL = attrgetter("is_stateful")
_DIGITS = list(map(str, range(4096)))  # the usual partition numbers, as in task ids


@dataclass(frozen=True)
class Problem:
    task_ids: list[str]
    subtopology: list[int]               # per task, index into the distinct subtopologies
    partition: list[int]
    stateful: list[bool]
    process_ids: list[str]
    capacity: list[int]
    rack: list[str | None]
    prev_active: list[int]               # per task: previous active process or -1
    prev_standby: Mapping[int, Sequence[int]]  # task -> processes that held it as standby / warm-up (sparse)
    acceptable_lag: int
    source_racks: list[tuple[frozenset[str], ...]]     # per task: replica racks of its known source partitions
    changelog_racks: list[tuple[frozenset[str], ...]]  # same for its changelog partitions
    racks_known: bool                    # some client has a rack and some partition has replica racks
    clients: list[KafkaStreamsState] = field(repr=False, compare=False)  # per process

    @property
    def num_tasks(self) -> int:
        return len(self.task_ids)

    @cached_property
    def index(self) -> dict[str, int]:
        """Task id -> task."""
        return dict(zip(self.task_ids, range(len(self.task_ids))))

    @cached_property
    def tags(self) -> list[Mapping[str, str]]:
        """Per process: its client tags (built on first use)."""
        return list(map(attrgetter("client_tags"), self.clients))

    @cached_property
    def state_lags(self) -> dict[int, dict[int, int]]:
        """Task -> {process: lag} for the processes with local state (sparse; built on first use)."""
        index, stateful = self.index, self.stateful
        lags: dict[int, dict[int, int]] = {}
        for p, client in enumerate(self.clients):
            for t, lag in client.task_lags.items():
                i = index.get(t)
                if i is not None and stateful[i]:
                    lags.setdefault(i, {})[p] = lag
        for i, p in enumerate(self.prev_active):
            if p >= 0 and stateful[i]:
                lags.setdefault(i, {})[p] = 0
        return lags

    @cached_property
    def end_offset(self) -> list[int]:
        """Per task: the lag of a process without state (built on first use)."""
        end_offsets = self.clients[0].end_offsets if self.clients else {}
        return [end_offsets.get(t, 0) if sf else 0 for t, sf in zip(self.task_ids, self.stateful)]

    def owned_first(self, tasks: Iterable[int]) -> list[int]:
        """Previously owned tasks by partition, then subtopology (so that any prefix mixes all subtopologies),
        followed by the other tasks; `tasks` come in index order (a stable sort by partition suffices)."""
        tasks = list(tasks)
        owners = list(map(self.prev_active.__getitem__, tasks))
        owned = sorted(compress(tasks, map(ge, owners, repeat(0))), key=self.partition.__getitem__)
        return owned + list(compress(tasks, map(lt, owners, repeat(0))))

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
    stateful = list(map(_IS_STATEFUL, map(all_tasks.__getitem__, task_ids)))
    states = state.kafka_streams_states
    process_ids = sorted(states)
    clients = list(states.values()) if process_ids == list(states) else list(map(states.__getitem__, process_ids))
    previous_owner: dict[str, int] = {}
    owned = list(map(attrgetter("previous_active_tasks"), clients))
    for p in reversed(list(compress(range(len(clients)), owned))):  # the first process claiming a task wins
        previous_owner.update(dict.fromkeys(owned[p], p))
    prev_active = list(map(previous_owner.get, task_ids, repeat(-1)))
    held = list(map(attrgetter("previous_standby_tasks"), clients))
    holder: dict[str, int] = {}
    for p in compress(range(len(clients)), held):
        holder.update(dict.fromkeys(held[p], p))
    prev_standby: Mapping[int, Sequence[int]]
    if sum(map(len, held)) == len(holder):  # at most one previous holder per task: 1-tuples straight from zip
        standby_holder = list(map(holder.get, task_ids, repeat(-1)))
        held_tasks = list(compress(range(len(task_ids)), map(ge, standby_holder, repeat(0))))
        prev_standby = dict(zip(held_tasks, zip(map(standby_holder.__getitem__, held_tasks))))
    else:
        prev_standby = _previous_standbys(task_ids, held)
    rack = list(map(attrgetter("rack_id"), clients))
    with_racks = rack.count(None) < len(rack)
    source_racks = [_racks(state, t, False) for t in task_ids] if with_racks else [()] * len(task_ids)
    changelog_racks = [_racks(state, t, True) for t in task_ids] if with_racks else [()] * len(task_ids)
    return Problem(
        task_ids=task_ids,
        subtopology=subtopology,
        partition=partition,
        stateful=stateful,
        process_ids=process_ids,
        capacity=list(map(attrgetter("num_processing_threads"), clients)),
        rack=rack,
        prev_active=prev_active,
        prev_standby=prev_standby,
        acceptable_lag=state.assignment_configs.acceptable_recovery_lag,
        source_racks=source_racks,
        changelog_racks=changelog_racks,
        racks_known=with_racks and (any(source_racks) or any(changelog_racks)),
        clients=clients,
    )


def _previous_standbys(task_ids: list[str], held: list[frozenset[str]]) -> dict[int, list[int]]:
    """Task -> the processes (in order) that held it as standby or warm-up."""
    index = dict(zip(task_ids, range(len(task_ids))))
    prev_standby: dict[int, list[int]] = {}
    for p in compress(range(len(held)), held):
        for i in map(index.get, held[p]):
            if i is not None:
                holders = prev_standby.get(i)
                if holders is None:
                    prev_standby[i] = [p]
                else:
                    holders.append(p)
    return prev_standby


def _ordered_tasks(task_ids: Iterable[str]) -> tuple[list[str], list[int], list[int]]:
    """Task ids in `task_sort_key` order with their subtopology index and partition."""
    ids = list(task_ids)
    return _in_canonical_runs(ids) or _ordered_by_group(ids)


def _in_canonical_runs(ids: list[str]) -> tuple[list[str], list[int], list[int]] | None:
    """The usual input without a Python step per task: ids already in order, in runs `<s>_0` .. `<s>_<k-1>`
    of distinct subtopologies; None for any other input."""
    subtopology: list[int] = []
    partition: list[int] = []
    names: list[str] = []
    pos = 0
    while pos < len(ids):
        prefix = ids[pos].rpartition("_")[0] + "_"
        end = len(ids) - pos

        def in_run(k: int) -> bool:
            return k < end and ids[pos + k] == prefix + str(k)

        if not in_run(0):
            return None
        low, high = 0, 1  # in_run(low); find the first k with not in_run(k), galloping then bisecting
        while in_run(high):
            low, high = high, 2 * high
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if in_run(middle) else (low, middle)
        digits = _DIGITS[:high] if high <= len(_DIGITS) else list(map(str, range(high)))
        if ids[pos:pos + high] != list(map(prefix.__add__, digits)):
            return None
        subtopology += [len(names)] * high
        partition += range(high)
        names.append(prefix[:-1])
        pos += high
    if len(set(names)) != len(names) or names != sorted(names, key=lambda s: task_sort_key(s + "_0")):
        return None
    return ids, subtopology, partition


def _ordered_by_group(task_ids: list[str]) -> tuple[list[str], list[int], list[int]]:
    """`_ordered_tasks` for any input, grouping by subtopology first (cheaper than a sort key per task)."""
    groups: dict[str, tuple[list[str], list[int]]] = {}
    for t in task_ids:
        sub, _, part = t.rpartition("_")
        group = groups.get(sub)
        if group is None:
            group = groups[sub] = ([], [])
        group[0].append(t)
        group[1].append(int(part))
    ordered: list[str] = []
    subtopology: list[int] = []
    partition: list[int] = []
    for index, sub in enumerate(sorted(groups, key=lambda s: task_sort_key(s + "_0"))):
        ids, parts = groups[sub]
        if parts != sorted(parts):
            order = sorted(range(len(ids)), key=parts.__getitem__)
            ids, parts = [ids[i] for i in order], [parts[i] for i in order]
        ordered += ids
        partition += parts
        subtopology += [index] * len(ids)
    return ordered, subtopology, partition


def _racks(state: ApplicationState, task_id: str, changelog: bool) -> tuple[frozenset[str], ...]:
    return tuple(tp.rack_ids for tp in state.all_tasks[task_id].topic_partitions
                 if tp.is_changelog == changelog and tp.rack_ids)

"""The KIP-924 pluggable assignor API: read-only application state in, per-client assignments out.

Task ids are strings `"<subtopologyId>_<partition>"`, process ids are strings. Everything is immutable;
`KafkaStreamsAssignment` offers copy-returning `assign_task` / `remove_task` / `with_follow_up_rebalance`.
Warm-ups are an extra `AssignedTaskType.WARMUP` (in Kafka they travel as standbys to the client).
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .errors import TaskAssignmentError

RACK_STRATEGIES = ("none", "min_traffic", "balance_subtopology")


def unchecked(cls: type, **fields: object) -> Any:
    """An instance of one of the frozen dataclasses here from every one of its fields, without the
    generated __init__: the parsers build tens of thousands of them from values they already checked."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def task_sort_key(task_id: str) -> tuple[int, int, str, int]:
    """Numeric subtopologies first (by number), then named ones; then by partition."""
    sub, _, part = task_id.rpartition("_")
    if sub.isdigit():
        return (0, int(sub), "", int(part))
    return (1, 0, sub, int(part))


def sort_task_ids(task_ids: Iterable[str]) -> list[str]:
    return sorted(task_ids, key=task_sort_key)


def subtopology_of(task_id: str) -> str:
    return task_id.rpartition("_")[0]


@dataclass(frozen=True)
class TaskTopicPartition:
    """One input or changelog partition of a task, with the racks of its replicas (None = unknown)."""

    topic: str
    partition: int
    is_changelog: bool
    rack_ids: frozenset[str] | None = None


@dataclass(frozen=True)
class TaskInfo:
    """A task to place: stateful or not, and the partitions it reads (sources) and writes (changelogs)."""

    id: str
    is_stateful: bool
    topic_partitions: tuple[TaskTopicPartition, ...] = ()

    @property
    def subtopology(self) -> str:
        return subtopology_of(self.id)


@dataclass(frozen=True)
class AssignmentConfigs:
    """The streams configs an assignor sees."""

    acceptable_recovery_lag: int = 10_000
    max_warmup_replicas: int = 2
    num_standby_replicas: int = 0
    probing_rebalance_interval_ms: int = 600_000
    rack_aware_assignment_tags: tuple[str, ...] = ()
    rack_aware_traffic_cost: int | None = None
    rack_aware_non_overlap_cost: int | None = None
    rack_aware_assignment_strategy: str = "none"


@dataclass(frozen=True)
class KafkaStreamsState:
    """One Kafka Streams client (process): its threads, rack, tags, previous tasks and lags.

    `task_lags` holds the lags of the stateful tasks the client has local state for (0 for running actives);
    any other stateful task lags by its whole end offset, taken from the shared `end_offsets`.
    """

    process_id: str
    num_processing_threads: int
    rack_id: str | None = None
    client_tags: Mapping[str, str] = field(default_factory=dict)
    previous_active_tasks: frozenset[str] = frozenset()
    previous_standby_tasks: frozenset[str] = frozenset()
    consumer_client_ids: tuple[str, ...] = ()
    task_lags: Mapping[str, int] = field(default_factory=dict)
    end_offsets: Mapping[str, int] = field(default_factory=dict)

    def lag_for(self, task_id: str) -> int:
        lag = self.task_lags.get(task_id)
        return self.end_offsets.get(task_id, 0) if lag is None else lag

    def prev_tasks_by_lag(self) -> list[str]:
        """Previously owned tasks (active or standby), least lag first."""
        owned = self.previous_active_tasks | self.previous_standby_tasks
        return sorted(owned, key=lambda t: (self.lag_for(t), task_sort_key(t)))


@dataclass(frozen=True)
class ApplicationState:
    """All inputs of one assignment: tasks, clients and configs; `now_ms` anchors follow-up deadlines."""

    all_tasks: Mapping[str, TaskInfo]
    kafka_streams_states: Mapping[str, KafkaStreamsState]
    assignment_configs: AssignmentConfigs = AssignmentConfigs()
    now_ms: int = 0

    def stateful_tasks(self) -> list[str]:
        return sort_task_ids(t for t, info in self.all_tasks.items() if info.is_stateful)

    def stateless_tasks(self) -> list[str]:
        return sort_task_ids(t for t, info in self.all_tasks.items() if not info.is_stateful)


class AssignedTaskType(enum.Enum):
    ACTIVE = "active"
    STANDBY = "standby"
    WARMUP = "warmup"


_ROLE_FIELD = {AssignedTaskType.ACTIVE: 1, AssignedTaskType.STANDBY: 2, AssignedTaskType.WARMUP: 3}


class AssignedTask(NamedTuple):
    id: str
    type: AssignedTaskType


class KafkaStreamsAssignment(NamedTuple):
    """The tasks of one client by role and, optionally, when it should trigger a follow-up rebalance."""

    process_id: str
    active_tasks: tuple[str, ...] = ()
    standby_tasks: tuple[str, ...] = ()
    warmup_tasks: tuple[str, ...] = ()
    follow_up_rebalance_deadline_ms: int | None = None

    @classmethod
    def of(cls, process_id: str, tasks: Iterable[AssignedTask] = ()) -> KafkaStreamsAssignment:
        result = cls(process_id)
        for task in tasks:
            result = result.assign_task(task)
        return result

    @property
    def tasks(self) -> Mapping[str, AssignedTask]:
        """Task id -> assigned task (a task listed in several roles shows its last role)."""
        return MappingProxyType({t: AssignedTask(t, kind) for kind in AssignedTaskType for t in self._ids(kind)})

    def _ids(self, kind: AssignedTaskType) -> tuple[str, ...]:
        return self[_ROLE_FIELD[kind]]

    def assign_task(self, task: AssignedTask) -> KafkaStreamsAssignment:
        """A copy with `task` in its role (and in no other role)."""
        trimmed = self.remove_task(task.id)
        field_index = _ROLE_FIELD[task.type]
        return trimmed._replace(**{self._fields[field_index]: (*trimmed[field_index], task.id)})

    def remove_task(self, task_id: str) -> KafkaStreamsAssignment:
        return self._replace(**{self._fields[i]: tuple(t for t in self[i] if t != task_id) for i in (1, 2, 3)})

    def with_follow_up_rebalance(self, deadline_ms: int) -> KafkaStreamsAssignment:
        return self._replace(follow_up_rebalance_deadline_ms=deadline_ms)

    def of_type(self, kind: AssignedTaskType) -> list[str]:
        return sorted(self._ids(kind), key=task_sort_key)


@dataclass(frozen=True)
class TaskAssignment:
    assignment: tuple[KafkaStreamsAssignment, ...]

    def follow_up_requested(self) -> bool:
        return any(a.follow_up_rebalance_deadline_ms is not None for a in self.assignment)


@runtime_checkable
class TaskAssignor(Protocol):
    def assign(self, application_state: ApplicationState) -> TaskAssignment: ...


class AssignmentError(enum.Enum):
    NONE = "NONE"
    ACTIVE_TASK_ASSIGNED_MULTIPLE_TIMES = "ACTIVE_TASK_ASSIGNED_MULTIPLE_TIMES"
    ACTIVE_AND_STANDBY_TASK_ASSIGNED_TO_SAME_KAFKASTREAMS = "ACTIVE_AND_STANDBY_TASK_ASSIGNED_TO_SAME_KAFKASTREAMS"
    INVALID_STANDBY_TASK = "INVALID_STANDBY_TASK"
    MISSING_PROCESS_ID = "MISSING_PROCESS_ID"
    UNKNOWN_PROCESS_ID = "UNKNOWN_PROCESS_ID"
    UNKNOWN_TASK_ID = "UNKNOWN_TASK_ID"


def validate_task_assignment(state: ApplicationState, assignment: TaskAssignment) -> AssignmentError:
    """The first problem of `assignment` against `state`, or `AssignmentError.NONE`."""
    seen_processes = {a.process_id for a in assignment.assignment}
    if any(p not in seen_processes for p in state.kafka_streams_states):
        return AssignmentError.MISSING_PROCESS_ID
    if any(p not in state.kafka_streams_states for p in seen_processes):
        return AssignmentError.UNKNOWN_PROCESS_ID
    tasks = state.all_tasks
    active_owner: dict[str, str] = {}
    for client in assignment.assignment:
        for task_id in client.active_tasks:
            if task_id not in tasks:
                return AssignmentError.UNKNOWN_TASK_ID
            if task_id in active_owner:
                return AssignmentError.ACTIVE_TASK_ASSIGNED_MULTIPLE_TIMES
            active_owner[task_id] = client.process_id
    for client in assignment.assignment:
        for task_id in (*client.standby_tasks, *client.warmup_tasks):
            info = tasks.get(task_id)
            if info is None:
                return AssignmentError.UNKNOWN_TASK_ID
            if not info.is_stateful:
                return AssignmentError.INVALID_STANDBY_TASK
            if active_owner.get(task_id) == client.process_id:
                return AssignmentError.ACTIVE_AND_STANDBY_TASK_ASSIGNED_TO_SAME_KAFKASTREAMS
    return AssignmentError.NONE


def load_assignor(spec: str) -> TaskAssignor:
    """Instantiate a user's assignor from `"package.module:Class"`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise TaskAssignmentError(f"assignor {spec!r} is not of the form 'package.module:Class'")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise TaskAssignmentError(f"cannot load assignor {spec!r}: {exc}") from exc
    assignor = target()
    if not isinstance(assignor, TaskAssignor):
        raise TaskAssignmentError(f"{spec!r} has no assign(application_state) method")
    return assignor

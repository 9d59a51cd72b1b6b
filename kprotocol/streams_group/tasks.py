"""Task sets of a streams group: subtopology id -> partitions, in the three roles of KIP-1071."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

Tasks = Mapping[str, frozenset[int]]
NO_TASKS: Tasks = {}


def tasks_of(pairs: Iterable[tuple[str, Iterable[int]]]) -> dict[str, frozenset[int]]:
    """`{subtopology: partitions}` without empty subtopologies (duplicates merge)."""
    out: dict[str, frozenset[int]] = {}
    for sub, parts in pairs:
        parts = frozenset(parts)
        if parts:
            out[sub] = out.get(sub, frozenset()) | parts
    return out


def from_wire(task_ids: Iterable[Any] | None) -> dict[str, frozenset[int]]:
    """Tasks from a list of generated `TaskIds` structs (None reads as no tasks)."""
    return tasks_of((t.subtopology_id, t.partitions) for t in task_ids or ())


def to_wire(tasks: Tasks, cls: type) -> list[Any]:
    """Tasks as generated `TaskIds` structs, sorted by subtopology and partition."""
    return [cls(subtopology_id=sub, partitions=sorted(tasks[sub])) for sub in sorted(tasks)]


def minus(a: Tasks, b: Tasks) -> dict[str, frozenset[int]]:
    return tasks_of((sub, parts - b.get(sub, frozenset())) for sub, parts in a.items())


def union(a: Tasks, b: Tasks) -> dict[str, frozenset[int]]:
    return tasks_of([*a.items(), *b.items()])


def overlaps(a: Tasks, b: Tasks) -> bool:
    return any(parts & b.get(sub, frozenset()) for sub, parts in a.items())


def contains(outer: Tasks, inner: Tasks) -> bool:
    return all(parts <= outer.get(sub, frozenset()) for sub, parts in inner.items())


def task_ids(tasks: Tasks) -> list[str]:
    """`"<subtopology>_<partition>"` ids, the shared assignor's names."""
    return [f"{sub}_{p}" for sub in sorted(tasks) for p in sorted(tasks[sub])]


class TaskSets(NamedTuple):
    """Active, standby and warm-up tasks of one member."""

    active: Tasks = NO_TASKS
    standby: Tasks = NO_TASKS
    warmup: Tasks = NO_TASKS

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def overlaps(self, other: TaskSets) -> bool:
        return any(overlaps(a, b) for a, b in zip(self, other))

    def union(self, other: TaskSets) -> TaskSets:
        return TaskSets(*(union(a, b) for a, b in zip(self, other)))

    @classmethod
    def from_wire(cls, active: Any, standby: Any, warmup: Any) -> TaskSets:
        return cls(from_wire(active), from_wire(standby), from_wire(warmup))


EMPTY = TaskSets()

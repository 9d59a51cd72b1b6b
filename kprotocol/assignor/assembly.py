"""Turning per-task process indexes into a KIP-924 `TaskAssignment`."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, compress, repeat

import numpy as np

from .api import KafkaStreamsAssignment, TaskAssignment
from .problem import Problem


def to_task_assignment(problem: Problem, active: Sequence[int], standbys: Sequence[Sequence[int]],
                       warmups: Sequence[int] | None = None, deadline_ms: int | None = None) -> TaskAssignment:
    ids, n = problem.task_ids, problem.num_processes
    actives = _group(n, active, ids)
    standby_ids = list(chain.from_iterable(map(repeat, ids, map(len, standbys))))
    standby_groups = _group(n, list(chain.from_iterable(standbys)), standby_ids)
    if warmups:
        has_warmup = [p >= 0 for p in warmups]
        warmup_groups = _group(n, list(compress(warmups, has_warmup)), list(compress(ids, has_warmup)))
    else:
        warmup_groups = [()] * n
    make = tuple.__new__  # KafkaStreamsAssignment(...) without the keyword-handling overhead
    return TaskAssignment(tuple(make(KafkaStreamsAssignment, fields) for fields in zip(
        problem.process_ids, actives, standby_groups, warmup_groups, repeat(deadline_ms))))


def _group(n: int, owners: Sequence[int], tasks: Sequence[str]) -> list[tuple[str, ...]]:
    """Per process, the `tasks` whose owner it is, in their order (one stable sort by owner)."""
    if not owners:
        return [()] * n
    by_owner = np.asarray(owners)
    order = np.argsort(by_owner, kind="stable").tolist()
    ends = np.cumsum(np.bincount(by_owner, minlength=n)).tolist()
    grouped = list(map(tasks.__getitem__, order))
    return [tuple(grouped[start:end]) for start, end in zip([0, *ends], ends)]

"""Isolation of the managed groups from each other inside one migration coordinator.

The coordinator keeps each group in a few maps keyed by group id. A `Snapshot` copies one group's
entries so that a change whose handling raised, or whose records could not be written, is rolled
back; `alone` hides every other group while one group's timers run, so a group whose timers raise
stops nothing else. `Throttle` keeps a repeated log line to one per key and interval.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from compat.classic import ClassicGroup
from compat.coordinator import MigrationCoordinator

# Where the coordinator keeps a group: (attribute path from the coordinator, ...) of maps keyed by group id.
GROUP_MAPS = (("classic",), ("classic_info",), ("streams", "groups"), ("streams", "classic_members"))


def _maps(coordinator: MigrationCoordinator) -> list[tuple[Any, str]]:
    out = []
    for path in GROUP_MAPS:
        owner = coordinator
        for name in path[:-1]:
            owner = getattr(owner, name)
        out.append((owner, path[-1]))
    return out


def group_ids(coordinator: MigrationCoordinator) -> list[str]:
    """Every group the coordinator holds anything of."""
    return sorted({g for owner, name in _maps(coordinator) for g in getattr(owner, name)})


class Snapshot:
    """One group's entries in every map, deep-copied; `restore()` puts them back as they were."""

    _ABSENT = object()

    def __init__(self, coordinator: MigrationCoordinator, group_id: str) -> None:
        self.coordinator, self.group_id = coordinator, group_id
        self.pending_ids = set(coordinator._pending_ids)
        self.entries = [(owner, name, self._copy(getattr(owner, name).get(group_id, self._ABSENT)))
                        for owner, name in _maps(coordinator)]

    @classmethod
    def _copy(cls, entry: Any) -> Any:
        if entry is cls._ABSENT:
            return entry
        return entry.copy() if isinstance(entry, ClassicGroup) else copy.deepcopy(entry)  # the former: faster

    def restore(self) -> None:
        for owner, name, entry in self.entries:
            table = getattr(owner, name)
            if entry is self._ABSENT:
                table.pop(self.group_id, None)
            else:
                table[self.group_id] = entry
        self.coordinator._pending_ids = self.pending_ids
        self.entries = [(o, n, self._copy(e)) for o, n, e in self.entries]  # restorable again


@contextmanager
def alone(coordinator: MigrationCoordinator, group_id: str) -> Iterator[None]:
    """Run with `group_id` the only group the coordinator sees; what happens to it is kept."""
    saved = []
    for owner, name in _maps(coordinator):
        table = getattr(owner, name)
        saved.append((owner, name, table))
        setattr(owner, name, {group_id: table[group_id]} if group_id in table else {})
    try:
        yield
    finally:
        for owner, name, table in saved:
            view = getattr(owner, name)
            setattr(owner, name, table)
            table.pop(group_id, None)
            table.update(view)


class Throttle:
    """`ready(key)` is true at most once per `interval_s` for each key; `suppressed(key)` counts the rest."""

    def __init__(self, interval_s: float = 10.0, max_keys: int = 10_000) -> None:
        self.interval_s, self.max_keys = interval_s, max_keys
        self._last: dict[Any, float] = {}
        self._suppressed: dict[Any, int] = {}

    def ready(self, key: Any) -> bool:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._last) >= self.max_keys:
            self._last.clear()
            self._suppressed.clear()
        self._last[key] = now
        return True

    def suppressed(self, key: Any) -> int:
        """How many times `key` was held back since it last went through (and forget them)."""
        return self._suppressed.pop(key, 0)

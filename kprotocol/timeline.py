"""Snapshot-aware state: dicts, sets and object fields that journal their changes, in the spirit of the
timeline structures of Kafka's coordinator runtime.

A `Journal` belongs to one unit of state (a group). While it is active (`recording(journal)`), every
change to a `TDict`, `TSet`, `TimelineObject` field or `TimelineOrder` appends how to undo it; `undo_to(mark)`
reverts the changes made since `mark` (the newest first), in the cost of what changed. Nothing is recorded
while no journal is active, so state used outside a change costs what a plain dict or field costs.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

ABSENT: Any = object()
Entry = tuple  # (undo function, *its arguments)


class _Active:
    __slots__ = ("journal",)

    def __init__(self) -> None:
        self.journal: list[Entry] | None = None


_STAMPS = itertools.count(1)


def stamp() -> int:
    """A number never handed out before: marks one version of some state, so that what is built of that version
    stays valid when a roll-back brings the state back to it (a counter would repeat its numbers)."""
    return next(_STAMPS)


ACTIVE = _Active()  # the entries of the journal recording now (one thread: the caller's event loop)


class Journal:
    """The undo entries of one unit of state, oldest first."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def mark(self) -> int:
        return len(self.entries)

    def undo_to(self, mark: int, keep: Callable[[Entry], bool] | None = None) -> None:
        """Revert every change since `mark`, newest first; entries `keep` accepts are neither reverted nor
        forgotten (they must concern other keys and fields than the reverted ones)."""
        entries, kept = self.entries, []
        saved, ACTIVE.journal = ACTIVE.journal, None
        try:
            while len(entries) > mark:
                entry = entries.pop()
                if keep is not None and keep(entry):
                    kept.append(entry)
                else:
                    entry[0](*entry[1:])
        finally:
            ACTIVE.journal = saved
        entries.extend(reversed(kept))

    def forget_to(self, mark: int) -> None:
        del self.entries[mark:]


@contextmanager
def recording(journal: Journal | None) -> Iterator[None]:
    """Record changes into `journal` (None: record nothing) for the duration of the block."""
    saved = ACTIVE.journal
    ACTIVE.journal = None if journal is None else journal.entries
    try:
        yield
    finally:
        ACTIVE.journal = saved


def _restore_key(d: dict, key: Any, old: Any, index: int) -> None:
    if old is ABSENT:
        dict.pop(d, key, None)
    elif index < 0 or key in d:
        dict.__setitem__(d, key, old)
    else:  # a deleted key goes back where it was: dicts keep their order
        items = list(dict.items(d))
        items.insert(index, (key, old))
        dict.clear(d)
        dict.update(d, items)


class TDict(dict):
    """A dict whose changes are journaled; reads cost what a dict's cost."""

    __slots__ = ()

    def _record(self, j: list, key: Any) -> None:
        old = dict.get(self, key, ABSENT)
        index = -1
        if old is not ABSENT and key != next(reversed(self)):
            index = list(self).index(key)  # only a deletion needs it (a change keeps the position)
        j.append((_restore_key, self, key, old, index))

    def __setitem__(self, key: Any, value: Any) -> None:
        j = ACTIVE.journal
        if j is not None:
            j.append((_restore_key, self, key, dict.get(self, key, ABSENT), -1))
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        j = ACTIVE.journal
        if j is not None and key in self:
            self._record(j, key)
        dict.__delitem__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        j = ACTIVE.journal
        if j is not None and key in self:
            self._record(j, key)
        return dict.pop(self, key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
            return default
        return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        for key in list(self):
            del self[key]

    def popitem(self) -> tuple[Any, Any]:
        key = next(reversed(self))
        return key, self.pop(key)

    def __ior__(self, other: Any) -> TDict:
        self.update(other)
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (type(self), (), None, None, iter(dict.items(self)))

    def __repr__(self) -> str:
        return dict.__repr__(self)


def _set_remove(s: set, value: Any) -> None:
    set.discard(s, value)


def _set_add(s: set, value: Any) -> None:
    set.add(s, value)


class TSet(set):
    """A set whose changes are journaled."""

    __slots__ = ()

    def add(self, value: Any) -> None:
        j = ACTIVE.journal
        if j is not None and value not in self:
            j.append((_set_remove, self, value))
        set.add(self, value)

    def discard(self, value: Any) -> None:
        j = ACTIVE.journal
        if j is not None and value in self:
            j.append((_set_add, self, value))
        set.discard(self, value)

    def remove(self, value: Any) -> None:
        if value not in self:
            raise KeyError(value)
        self.discard(value)

    def update(self, *others: Iterable[Any]) -> None:
        for other in others:
            for value in other:
                self.add(value)

    def clear(self) -> None:
        for value in list(self):
            self.discard(value)

    def pop(self) -> Any:
        value = next(iter(self))
        self.discard(value)
        return value

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (type(self), (list(set.__iter__(self)),))

    def __repr__(self) -> str:
        return set.__repr__(self)


def restore_field(obj: Any, name: str, old: Any) -> None:
    if old is ABSENT:
        object.__delattr__(obj, name)
    else:
        object.__setattr__(obj, name, old)


class TimelineObject:
    """A mixin whose attribute assignments are journaled (dataclasses included)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        j = ACTIVE.journal
        if j is not None:
            j.append((restore_field, self, name, getattr(self, name, ABSENT)))
        object.__setattr__(self, name, value)


@contextmanager
def savepoint() -> Iterator[Journal]:
    """The journal recording now, or a new one recording for the duration of the block: a step that
    may have to undo its own changes takes a `mark()` of it."""
    if ACTIVE.journal is not None:
        journal = Journal()
        journal.entries = ACTIVE.journal
        yield journal
        return
    journal = Journal()
    with recording(journal):
        yield journal


def record(undo: Callable[..., None], *args: Any) -> None:
    """Journal a change a structure of its own makes: `undo(*args)` reverts it."""
    j = ACTIVE.journal
    if j is not None:
        j.append((undo, *args))


def _restore_deadline(d: DeadlineMap, key: Any, old: Any, index: int) -> None:
    _restore_key(d, key, old, index)
    if old is not ABSENT:
        heapq.heappush(d.heap, (d.deadline(old), key))


def _push_back(d: DeadlineMap, entries: list[tuple[int, Any]]) -> None:
    for entry in entries:
        heapq.heappush(d.heap, entry)


class DeadlineMap(TDict):
    """key -> deadline (`deadline(value)` of the value), journaled, with the earliest found in O(log n): a heap of
    (deadline, key) beside the dict, an entry in it valid while the dict still holds that deadline for the key."""

    __slots__ = ("heap",)

    def __init__(self) -> None:
        super().__init__()
        self.heap: list[tuple[int, Any]] = []

    @staticmethod
    def deadline(value: Any) -> int:
        return value

    def _record(self, j: list, key: Any) -> None:
        TDict._record(self, j, key)
        j[-1] = (_restore_deadline, *j[-1][1:])

    def __setitem__(self, key: Any, value: Any) -> None:
        j = ACTIVE.journal
        if j is not None:
            j.append((_restore_deadline, self, key, dict.get(self, key, ABSENT), -1))
        dict.__setitem__(self, key, value)
        heap = self.heap
        heapq.heappush(heap, (self.deadline(value), key))
        if len(heap) > 2 * len(self) + 64:  # stale entries: rebuilt, O(1) amortized per change
            self.heap = [(self.deadline(v), k) for k, v in dict.items(self)]
            heapq.heapify(self.heap)

    def _valid(self, entry: tuple[int, Any]) -> bool:
        value = dict.get(self, entry[1], ABSENT)
        return value is not ABSENT and self.deadline(value) == entry[0]

    def earliest(self) -> int | None:
        heap = self.heap
        while heap:
            if self._valid(heap[0]):
                return heap[0][0]
            heapq.heappop(heap)
        return None

    def due(self, now: int) -> list[tuple[int, Any]]:
        """(deadline, key) of every entry due at `now`, earliest first (ties by key); the caller removes them."""
        heap, out, seen = self.heap, [], set()
        record(_push_back, self, out)  # journaled first (filled below): a change is never left without its undo
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if entry[1] not in seen and self._valid(entry):
                seen.add(entry[1])
                out.append(entry)
        return out

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (type(self), (), None, None, iter(dict.items(self)))


class EpochDeadlineMap(DeadlineMap):
    """key -> (deadline, epoch)."""

    __slots__ = ()

    @staticmethod
    def deadline(value: Any) -> int:
        return value[0]

"""One managed group's state in one object, and the changes to it that roll back in what they changed.

A `GroupState` holds everything the migration coordinator keeps of a group: the classic group, the
classic members' info and ids inside a streams group, the streams group and the pending member ids,
each of them journaling its changes (kprotocol.timeline) into the group's own `Journal`. A `Change`
opened on a group records what requests and timers change in it until `commit()` forgets it or
`rollback()` reverts it; changes of different groups are independent. `GroupField` shows one field of
every group as the map keyed by group id the coordinators have always used.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from kprotocol.timeline import Journal, TDict, TimelineObject

FIELDS = ("classic", "classic_info", "streams", "classic_members")


class GroupState(TimelineObject):
    """A group's state: each field None while the group has none of it."""

    __slots__ = ("group_id", "classic", "classic_info", "streams", "classic_members", "pending", "info_stamp",
                 "journal", "depth")

    def __init__(self, group_id: str) -> None:
        object.__setattr__(self, "group_id", group_id)
        object.__setattr__(self, "journal", Journal())
        object.__setattr__(self, "depth", 0)  # open changes
        for name in FIELDS:
            object.__setattr__(self, name, None)
        object.__setattr__(self, "pending", TDict())  # member ids handed out by MEMBER_ID_REQUIRED -> expiry
        object.__setattr__(self, "info_stamp", 0)  # unique to `classic_info` as it is (kprotocol.timeline.stamp)

    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in FIELDS) and not self.pending


class Change:
    """The changes to one group since `MigrationCoordinator.begin`: `commit()` keeps them, `rollback()`
    reverts them (each in the cost of what changed); either closes the change."""

    __slots__ = ("_states", "_state", "_mark", "_open")

    def __init__(self, states: dict[str, GroupState], state: GroupState) -> None:
        self._states, self._state, self._mark, self._open = states, state, state.journal.mark(), True
        object.__setattr__(state, "depth", state.depth + 1)

    def commit(self) -> None:
        if self._close() == 0:
            self._state.journal.forget_to(self._mark)
        self._forget_if_empty()

    def rollback(self) -> None:
        self._state.journal.undo_to(self._mark)
        self._close()
        self._forget_if_empty()

    def _close(self) -> int:
        if not self._open:
            raise RuntimeError(f"the change of group {self._state.group_id} is already closed")
        self._open = False
        object.__setattr__(self._state, "depth", self._state.depth - 1)
        return self._state.depth

    def _forget_if_empty(self) -> None:
        state = self._state
        if state.depth == 0 and state.is_empty() and self._states.get(state.group_id) is state:
            del self._states[state.group_id]


class GroupField(MutableMapping):
    """group id -> one field of its `GroupState` (the groups that have it)."""

    __slots__ = ("_states", "_name")

    def __init__(self, states: dict[str, GroupState], name: str) -> None:
        self._states, self._name = states, name

    def __getitem__(self, group_id: str) -> Any:
        state = self._states.get(group_id)
        value = None if state is None else getattr(state, self._name)
        if value is None:
            raise KeyError(group_id)
        return value

    def get(self, group_id: str, default: Any = None) -> Any:
        state = self._states.get(group_id)
        value = None if state is None else getattr(state, self._name)
        return default if value is None else value

    def __contains__(self, group_id: object) -> bool:
        state = self._states.get(group_id)  # type: ignore[call-overload]
        return state is not None and getattr(state, self._name) is not None

    def __setitem__(self, group_id: str, value: Any) -> None:
        state = self._states.get(group_id)
        if state is None:
            state = self._states[group_id] = GroupState(group_id)
        setattr(state, self._name, value)

    def __delitem__(self, group_id: str) -> None:
        if group_id not in self:
            raise KeyError(group_id)
        setattr(self._states[group_id], self._name, None)

    def __iter__(self) -> Iterator[str]:
        return iter([g for g, s in self._states.items() if getattr(s, self._name) is not None])

    def __len__(self) -> int:
        return sum(1 for s in self._states.values() if getattr(s, self._name) is not None)

    def __repr__(self) -> str:
        return f"GroupField({self._name}: {dict(self.items())!r})"

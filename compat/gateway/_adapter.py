"""TEMPORARY: the per-group coordinator interface on today's MigrationCoordinator, until compat/coordinator.py
has it itself (issue 35 item 1). Dropped at merge: `group_api` then returns the coordinator unchanged.

The interface the gateway shell uses: `begin(group_id) -> change` with `change.rollback()` / `change.commit()`,
`poll_group(group_id, now) -> (answers, records, next_deadline or None)`, `group_ids()`, `next_deadline(group_id)`,
`forget(group_id) -> tombstones` (DeleteGroups of an empty group, inside the group's open change).
Here a change is supervisor.Snapshot's deep copy of the group (O(group), not O(what changed)) and a group's
timers run `alone` (the other groups hidden while its poll runs; a poll is synchronous, so no other group
can see that)."""

from __future__ import annotations

from typing import Any

from compat.classic import GroupMetadataKey
from compat.coordinator import MigrationCoordinator
from compat.gateway.supervisor import Snapshot, alone, group_ids
from kprotocol.streams_group import records as rec
from kprotocol.streams_group.records import CoordinatorRecord


def group_api(coordinator: MigrationCoordinator) -> Any:
    """The coordinator itself once it has the per-group interface, else this adapter around it."""
    return coordinator if hasattr(coordinator, "poll_group") else SnapshotGroups(coordinator)


class SnapshotChange:
    """One group's change: rolled back to the copy taken at `begin`."""

    def __init__(self, coordinator: MigrationCoordinator, group_id: str) -> None:
        self.coordinator = coordinator
        self.snapshot = Snapshot(coordinator, group_id)
        self.pending_before = set(coordinator._pending_ids)

    def rollback(self) -> None:
        # The pending member ids are one set for every group: undo what appeared or went since `begin`
        # rather than restoring the whole set (other groups may have changed it meanwhile; their ids are
        # fresh UUIDs, so a rare overlap costs one member a rejoin).
        now = self.coordinator._pending_ids
        added, removed = now - self.pending_before, self.pending_before - now
        self.snapshot.restore()
        self.coordinator._pending_ids = (now - added) | removed

    def commit(self) -> None:
        self.snapshot = None  # type: ignore[assignment]


class SnapshotGroups:
    """The per-group interface over MigrationCoordinator's maps (supervisor.py)."""

    def __init__(self, coordinator: MigrationCoordinator) -> None:
        self.coordinator = coordinator

    def begin(self, group_id: str) -> SnapshotChange:
        return SnapshotChange(self.coordinator, group_id)

    def group_ids(self) -> list[str]:
        return group_ids(self.coordinator)

    def poll_group(self, group_id: str, now: int) -> tuple[list, list, int | None]:
        with alone(self.coordinator, group_id):
            return self.coordinator.poll(now)

    def next_deadline(self, group_id: str) -> int | None:
        with alone(self.coordinator, group_id):
            deadlines = [self.coordinator.streams.next_deadline(),
                         *(g.next_deadline() for g in self.coordinator.classic.values())]
        return min((d for d in deadlines if d is not None), default=None)

    def forget(self, group_id: str) -> list[CoordinatorRecord]:
        """Drop an empty group from the coordinator: the tombstones that say so."""
        coordinator = self.coordinator
        records = []
        if coordinator.classic.pop(group_id, None) is not None:
            records.append(CoordinatorRecord(GroupMetadataKey(group=group_id), None))
        group = coordinator.streams.groups.pop(group_id, None)
        coordinator.classic_info.pop(group_id, None)
        coordinator.streams.classic_members.pop(group_id, None)
        if group is not None and group.exists:
            records += rec.delete_group(group_id, list(group.members))
        return records

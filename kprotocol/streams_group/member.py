"""A streams group member and its reconciliation toward the target assignment (KIP-1071).

A member moves between three states. STABLE: it holds its target at the target epoch.
UNREVOKED_TASKS: it must first give up tasks that leave it (it stays at its epoch until its
heartbeat no longer lists them). UNRELEASED_TASKS: it reached the target epoch but waits for
tasks another member still holds: an active task until nobody runs it, a standby or warm-up
task until no member of its own process holds it in any role.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kprotocol.streams_group.tasks import EMPTY, TaskSets, Tasks, minus, tasks_of

STABLE, UNREVOKED_TASKS, UNRELEASED_TASKS = 1, 2, 3
STATE_NAMES = {STABLE: "STABLE", UNREVOKED_TASKS: "UNREVOKED_TASKS", UNRELEASED_TASKS: "UNRELEASED_TASKS"}

Epochs = Mapping[str, Mapping[int, int]]  # subtopology -> partition -> epoch the active task was assigned at


@dataclass(frozen=True, slots=True)
class Member:
    """What the coordinator knows of one member: metadata (persisted as MemberMetadata) and
    assignment state (persisted as CurrentMemberAssignment)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STABLE
    assigned: TaskSets = EMPTY
    pending_revocation: TaskSets = EMPTY
    active_epochs: Epochs = field(default_factory=dict)

    def metadata(self) -> tuple:
        """The fields of the MemberMetadata record."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.rebalance_timeout_ms,
                self.topology_epoch, self.process_id, self.user_endpoint, self.client_tags)

    def assignment(self) -> tuple:
        """The fields of the CurrentMemberAssignment record."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned, self.pending_revocation,
                self.active_epochs)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch

    def with_epoch(self, epoch: int, **changes) -> Member:
        """A copy at `epoch` whose previous epoch is the current one (as Kafka's member builder does)."""
        return dataclasses.replace(self, previous_member_epoch=self.member_epoch, member_epoch=epoch, **changes)


class Owners:
    """Who holds each task now, by process: the group's view that reconciliation consults."""

    __slots__ = ("active", "standby", "warmup")

    def __init__(self) -> None:
        self.active: dict[tuple[str, int], str] = {}
        self.standby: dict[tuple[str, int], set[str]] = {}
        self.warmup: dict[tuple[str, int], set[str]] = {}

    def add(self, member: Member) -> None:
        for tasks in (member.assigned, member.pending_revocation):
            for sub, parts in tasks.active.items():
                for p in parts:
                    self.active[(sub, p)] = member.process_id
            for role, index in ((tasks.standby, self.standby), (tasks.warmup, self.warmup)):
                for sub, parts in role.items():
                    for p in parts:
                        index.setdefault((sub, p), set()).add(member.process_id)

    def remove(self, member: Member) -> None:
        for tasks in (member.assigned, member.pending_revocation):
            for sub, parts in tasks.active.items():
                for p in parts:
                    if self.active.get((sub, p)) == member.process_id:
                        del self.active[(sub, p)]
            for role, index in ((tasks.standby, self.standby), (tasks.warmup, self.warmup)):
                for sub, parts in role.items():
                    for p in parts:
                        holders = index.get((sub, p))
                        if holders is not None:
                            holders.discard(member.process_id)
                            if not holders:
                                del index[(sub, p)]

    def in_process(self, task: tuple[str, int], process_id: str) -> bool:
        """Whether a member of `process_id` holds `task` as standby or warm-up."""
        return process_id in self.standby.get(task, ()) or process_id in self.warmup.get(task, ())


def reconcile(member: Member, target_epoch: int, target: TaskSets, owners: Owners,
              owned: TaskSets | None) -> Member:
    """The member's next assignment state; `owned` is what its heartbeat reported (None: not reported)."""
    if member.state == STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owners, owned)
    if member.state == UNREVOKED_TASKS:
        if owned is None or owned.overlaps(member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owners, owned)
    return _next(member, member.member_epoch, target_epoch, target, owners, owned)


def _next(member: Member, epoch: int, target_epoch: int, target: TaskSets, owners: Owners,
          owned: TaskSets | None) -> Member:
    process = member.process_id
    active_unreleased: Callable[[tuple[str, int]], bool] = \
        lambda t: t in owners.active or owners.in_process(t, process)
    other_unreleased: Callable[[tuple[str, int]], bool] = \
        lambda t: owners.active.get(t) == process or owners.in_process(t, process)
    kept, revoke, gain, unreleased = [], [], [], False
    for current, wanted, blocked in zip(member.assigned, target, (active_unreleased, other_unreleased,
                                                                    other_unreleased)):
        k = tasks_of((sub, parts & wanted.get(sub, frozenset())) for sub, parts in current.items())
        kept.append(k)
        revoke.append(minus(current, k))
        missing = minus(wanted, k)
        free = tasks_of((sub, (p for p in parts if not blocked((sub, p)))) for sub, parts in missing.items())
        unreleased |= free != missing
        gain.append(free)
    kept_sets, revoke_sets, gain_sets = TaskSets(*kept), TaskSets(*revoke), TaskSets(*gain)
    epochs = {sub: {p: e for p, e in parts.items()} for sub, parts in member.active_epochs.items()}
    if not revoke_sets.is_empty() and (owned is None or owned.overlaps(revoke_sets)):
        return member.with_epoch(epoch, state=UNREVOKED_TASKS, assigned=kept_sets, pending_revocation=revoke_sets,
                                 active_epochs=_epochs_of(epochs, kept_sets.active, revoke_sets.active))
    assigned = kept_sets.union(gain_sets)
    for sub, parts in gain_sets.active.items():
        for p in parts:
            epochs.setdefault(sub, {})[p] = target_epoch
    state = UNRELEASED_TASKS if unreleased else STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned, pending_revocation=EMPTY,
                             active_epochs=_epochs_of(epochs, assigned.active))


def _epochs_of(epochs: dict[str, dict[int, int]], *roles: Tasks) -> dict[str, dict[int, int]]:
    """The epochs of the active tasks in `roles` only."""
    out: dict[str, dict[int, int]] = {}
    for tasks in roles:
        for sub, parts in tasks.items():
            for p in parts:
                out.setdefault(sub, {})[p] = epochs.get(sub, {}).get(p, 0)
    return out

"""A streams group member and its reconciliation toward the target assignment (KIP-1071).

A member moves between three states. STABLE: it holds its target at the target epoch.
UNREVOKED_TASKS: it must first give up tasks that leave it (it stays at its epoch until its
heartbeat no longer lists them). UNRELEASED_TASKS: it reached the target epoch but waits for
tasks another member still holds: an active task until nobody runs it, a standby or warm-up
task until no member of its own process holds it in any role.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from kprotocol.streams_group.tasks import EMPTY, TaskSets, Tasks, tasks_of
from kprotocol.timeline import TDict, TSet

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
        self.active: dict[tuple[str, int], str] = TDict()
        self.standby: dict[tuple[str, int], set[str]] = TDict()
        self.warmup: dict[tuple[str, int], set[str]] = TDict()

    def add(self, member: Member) -> None:
        for tasks in (member.assigned, member.pending_revocation):
            for sub, parts in tasks.active.items():
                for p in parts:
                    self.active[(sub, p)] = member.process_id
            for role, index in ((tasks.standby, self.standby), (tasks.warmup, self.warmup)):
                for sub, parts in role.items():
                    for p in parts:
                        index.setdefault((sub, p), TSet()).add(member.process_id)

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
        if _unreleased(member.pending_revocation, owned):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owners, owned)
    return _next(member, member.member_epoch, target_epoch, target, owners, owned)


def _unreleased(pending: TaskSets, owned: TaskSets | None) -> bool:
    """Revocation is acknowledged only by a heartbeat that reports its tasks without the pending ones."""
    return owned is None or owned.overlaps(pending)


def _next(member: Member, epoch: int, target_epoch: int, target: TaskSets, owners: Owners,
          owned: TaskSets | None) -> Member:
    process, mine = member.process_id, member.assigned

    def other_member_of_process(index: dict, own: Tasks, t: tuple[str, int]) -> bool:
        return process in index.get(t, ()) and t[1] not in own.get(t[0], ())

    def active_blocked(t: tuple[str, int]) -> bool:  # one active owner in the group; no twin on a process
        return t in owners.active or other_member_of_process(owners.standby, mine.standby, t) \
            or other_member_of_process(owners.warmup, mine.warmup, t)

    def standby_blocked(t: tuple[str, int]) -> bool:  # released within the process, own role changes allowed
        return (owners.active.get(t) == process and t[1] not in mine.active.get(t[0], ())) \
            or process in owners.standby.get(t, ()) or other_member_of_process(owners.warmup, mine.warmup, t)

    def warmup_blocked(t: tuple[str, int]) -> bool:
        return owners.active.get(t) == process or other_member_of_process(owners.standby, mine.standby, t) \
            or process in owners.warmup.get(t, ())

    kept, revoke, gain, unreleased = [], [], [], False
    for current, wanted, blocked in zip(mine, target, (active_blocked, standby_blocked, warmup_blocked)):
        k = {sub: set(parts & wanted.get(sub, frozenset())) for sub, parts in current.items()}
        kept.append(k)
        revoke.append({sub: set(parts - k[sub]) for sub, parts in current.items()})
        g = {sub: {p for p in parts - k.get(sub, set()) if not blocked((sub, p))} for sub, parts in wanted.items()}
        unreleased |= any(len(g[sub]) != len(parts - k.get(sub, set())) for sub, parts in wanted.items())
        gain.append(g)
    (kept_a, kept_s, kept_w), (rev_a, rev_s, rev_w), (gain_a, gain_s, gain_w) = kept, revoke, gain
    # Role changes of the member's own tasks take effect at once: active -> standby (the active task is
    # still revoked), standby <-> warm-up (no revocation needed).
    _grant_own(mine.active, gain_s, kept_s)
    for sub, p in _pairs(mine.standby):
        if p in gain_w.get(sub, ()):
            _move(gain_w, kept_w, sub, p)
            rev_s.get(sub, set()).discard(p)
    for sub, p in _pairs(mine.warmup):
        if p in gain_s.get(sub, ()):
            _move(gain_s, kept_s, sub, p)
            rev_w.get(sub, set()).discard(p)
    # A standby or warm-up promoted to active is never revoked; it stays until the active task is granted.
    for role, rev in ((mine.standby, rev_s), (mine.warmup, rev_w)):
        for sub, p in _pairs(role):
            if p in target.active.get(sub, ()):
                rev.get(sub, set()).discard(p)
    pending = TaskSets(tasks_of(rev_a.items()), tasks_of(rev_s.items()), tasks_of(rev_w.items()))
    revoking = not pending.is_empty() and _unreleased(pending, owned)
    for role, kept_role in ((mine.standby, kept_s), (mine.warmup, kept_w)):
        for sub, p in _pairs(role):
            if p in target.active.get(sub, ()) and (revoking or p not in gain_a.get(sub, ())):
                kept_role.setdefault(sub, set()).add(p)
    kept_sets = TaskSets(tasks_of(kept_a.items()), tasks_of(kept_s.items()), tasks_of(kept_w.items()))
    gain_sets = TaskSets(tasks_of(gain_a.items()), tasks_of(gain_s.items()), tasks_of(gain_w.items()))
    if revoking:
        return member.with_epoch(epoch, state=UNREVOKED_TASKS, assigned=kept_sets, pending_revocation=pending,
                                 active_epochs=_epochs_of(member.active_epochs, target_epoch, kept_sets.active,
                                                          pending.active))
    assigned = kept_sets.union(gain_sets)
    state = UNRELEASED_TASKS if unreleased else STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned, pending_revocation=EMPTY,
                             active_epochs=_epochs_of(member.active_epochs, target_epoch, assigned.active))


def _pairs(tasks: Tasks) -> list[tuple[str, int]]:
    return [(sub, p) for sub, parts in tasks.items() for p in parts]


def _move(source: dict[str, set[int]], dest: dict[str, set[int]], sub: str, p: int) -> None:
    source[sub].discard(p)
    dest.setdefault(sub, set()).add(p)


def _grant_own(own_active: Tasks, gain_standby: dict[str, set[int]], kept_standby: dict[str, set[int]]) -> None:
    for sub, p in _pairs(own_active):
        if p in gain_standby.get(sub, ()):
            _move(gain_standby, kept_standby, sub, p)


def _epochs_of(epochs: Epochs, new_epoch: int, *roles: Tasks) -> dict[str, dict[int, int]]:
    """The assignment epochs of the active tasks in `roles`: kept ones keep theirs, new ones get `new_epoch`."""
    out: dict[str, dict[int, int]] = {}
    for tasks in roles:
        for sub, parts in tasks.items():
            for p in parts:
                out.setdefault(sub, {})[p] = epochs.get(sub, {}).get(p, new_epoch)
    return out

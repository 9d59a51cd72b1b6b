"""The `sticky` assignor of Kafka 4.4's broker (`StickyTaskAssignor` of
org.apache.kafka.coordinator.group.streams.assignor), placement for placement.

Its ties fall by Java's orders: its maps of members (by member id) and of processes (by process id, sized
by the number of members, filled by `computeIfAbsent`) iterate in `HashMap` order, and the least loaded
process or member is the head of a `PriorityQueue` heap. Previous owners are what Kafka's
`TargetAssignmentBuilder` hands it: the members' current assignments (not their targets), and the task
offsets they last reported, which rank standby candidates.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from operator import attrgetter, itemgetter

from kprotocol.streams_group.java_order import PriorityQueue, hash_order
from kprotocol.streams_group.member import Member
from kprotocol.streams_group.tasks import TaskSets

Task = tuple[str, int]  # (subtopology id, partition)
_DOUBLE_MAX = 1.7976931348623157e308  # Double.MAX_VALUE


class _Process:
    """The members of one process, their task counts and the tasks given to them (Kafka's `ProcessState`)."""

    __slots__ = ("capacity", "task_count", "load", "counts", "active", "standby", "tasks", "by_load")

    def __init__(self, member_ids: list[str]) -> None:
        self.capacity = len(member_ids)
        self.task_count = 0
        self.load = 0.0
        order = hash_order(member_ids) if len(member_ids) > 1 else member_ids
        self.counts = dict.fromkeys(order, 0)  # member -> tasks, in its HashMap's order
        self.active: dict[str, list[Task]] = {}
        self.standby: dict[str, list[Task]] = {}
        self.tasks: set[Task] = set()
        self.by_load: PriorityQueue[list] | None = None  # [member, count] entries, made again after `add`

    def add(self, member_id: str, task: Task, active: bool) -> int:
        """`task` to `member_id`; its new task count."""
        self.by_load = None
        return self._add(member_id, task, active)

    def add_to_least_loaded(self, task: Task, active: bool) -> int:
        """`task` to the member with the fewest tasks; its new task count."""
        if len(self.counts) == 1:
            return self._add(next(iter(self.counts)), task, active)
        if self.by_load is None:
            self.by_load = PriorityQueue(itemgetter(1), ([m, count] for m, count in self.counts.items()))
        entry = self.by_load.poll()
        entry[1] = self._add(entry[0], task, active)
        self.by_load.add(entry)
        return entry[1]

    def _add(self, member_id: str, task: Task, active: bool) -> int:
        self.task_count += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, []).append(task)
        count = self.counts[member_id] + 1
        self.counts[member_id] = count
        self.load = self.task_count / self.capacity
        return count


def assign(members: Sequence[Member], tasks: Mapping[str, int], stateful: Collection[str], num_standby_replicas: int,
           task_offsets: Mapping[str, Mapping[Task, int]]) -> dict[str, TaskSets]:
    """member id -> its target, for `tasks` (subtopology -> number of tasks); `members` in the order Kafka fills
    its map of them (its table of members, then a joining member)."""
    return _Sticky(members, tasks, stateful, num_standby_replicas, task_offsets).assign()


def _tasks_per_member(tasks: int, members: int) -> int:
    """Java's `tasks / members`, rounded up when the remainder is positive (ints truncate toward zero)."""
    if members == 0:
        return 0
    quotient = abs(tasks) // abs(members) * (1 if (tasks < 0) == (members < 0) else -1)
    return quotient + 1 if tasks - quotient * members > 0 else quotient


def _java_string(text: str) -> bytes:
    """A sort key comparing as Java's `String.compareTo` (UTF-16 code units)."""
    return text.encode("utf-16-be")


class _Sticky:
    """One assignment (Kafka's `LocalState`): the per-member shares, previous owners, and the passes over tasks."""

    def __init__(self, members: Sequence[Member], tasks: Mapping[str, int], stateful: Collection[str],
                 num_standby_replicas: int, task_offsets: Mapping[str, Mapping[Task, int]]) -> None:
        by_id = {m.member_id: m for m in members}
        self.member_ids = hash_order(by_id)
        self.standbys = num_standby_replicas
        self.tasks = tasks
        self.stateful = [sub for sub in tasks if sub in stateful]
        self.active_left = sum(tasks.values())
        self.tasks_left = self.active_left + sum(tasks[sub] for sub in self.stateful) * num_standby_replicas
        self.active_members = self.task_members = len(self.member_ids)
        self.active_per_member = _tasks_per_member(self.active_left, self.active_members)
        self.tasks_per_member = _tasks_per_member(self.tasks_left, self.task_members)
        by_process: dict[str, list[str]] = {}
        for member_id in self.member_ids:
            by_process.setdefault(by_id[member_id].process_id, []).append(member_id)
        order = hash_order((by_id[m].process_id for m in self.member_ids), len(self.member_ids), compute_if_absent=True)
        self.processes = {pid: _Process(by_process[pid]) for pid in order}
        self.process_of = {m: self.processes[by_id[m].process_id] for m in self.member_ids}
        self.previous_active: dict[Task, str] = {}
        candidates: dict[Task, list[tuple[int, int, str]]] = {}  # (not a previous standby, -offset, member)
        for member_id in self.member_ids:
            member, offsets = by_id[member_id], task_offsets.get(member_id, {})
            for sub, parts in member.assigned.active.items():
                for p in parts:
                    self.previous_active[(sub, p)] = member_id
            standby = member.assigned.standby
            for sub, parts in standby.items():
                for p in parts:
                    candidates.setdefault((sub, p), []).append((0, -offsets.get((sub, p), 0), member_id))
            for (sub, p), offset in offsets.items():
                if p not in standby.get(sub, ()):
                    candidates.setdefault((sub, p), []).append((1, -offset, member_id))
        self.previous_standby = {task: [c[2] for c in sorted(ranked, key=itemgetter(0, 1))]
                                 for task, ranked in candidates.items()}

    def assign(self) -> dict[str, TaskSets]:
        self._assign_active()
        if self.standbys > 0:
            self._assign_standby()
        out = {}
        for member_id in self.member_ids:
            process = self.process_of[member_id]
            out[member_id] = TaskSets(_compact(process.active.get(member_id, ())),
                                      _compact(process.standby.get(member_id, ())))
        return out

    def _assign_active(self) -> None:
        names = {sub: _java_string(sub) for sub in self.tasks}
        left = []
        for task in sorted(((sub, p) for sub, n in self.tasks.items() for p in range(n)),
                           key=lambda t: (t[1], names[t[0]])):
            member_id = self.previous_active.get(task)
            if member_id is not None and self.process_of[member_id].counts[member_id] < self.active_per_member:
                self._placed_active(self.process_of[member_id].add(member_id, task, True))
            else:
                left.append(task)
        rest = []
        for task in left:
            member_id = self._least_loaded_previous(self.previous_standby.get(task, ()), None)
            if member_id is not None and self.process_of[member_id].counts[member_id] < self.active_per_member:
                self._placed_active(self.process_of[member_id].add(member_id, task, True))
            else:
                rest.append(task)
        rest.sort(key=lambda t: (names[t[0]], t[1]))
        by_load = PriorityQueue(attrgetter("load"), self.processes.values())
        for task in rest:
            process = by_load.poll()
            self._placed_active(process.add_to_least_loaded(task, True))
            by_load.add(process)

    def _assign_standby(self) -> None:
        names = {sub: _java_string(sub) for sub in self.stateful}
        to_least_loaded: list[tuple[Task, int]] = []  # (task, replicas still to place)
        for task in sorted(((sub, p) for sub in self.stateful for p in range(self.tasks[sub])),
                           key=lambda t: (t[1], names[t[0]]), reverse=True):
            for i in range(self.standbys):
                member_id = self.previous_active.get(task)
                if member_id is not None:
                    process = self.process_of[member_id]
                    if task not in process.tasks and process.counts[member_id] < self.tasks_per_member:
                        self._placed(process.add(member_id, task, False))
                        continue
                member_id = self._least_loaded_previous(self.previous_standby.get(task, ()), task)
                if member_id is not None and self.process_of[member_id].counts[member_id] < self.tasks_per_member:
                    self._placed(self.process_of[member_id].add(member_id, task, False))
                    continue
                to_least_loaded.append((task, self.standbys - i))
                break
        to_least_loaded.sort(key=lambda entry: (names[entry[0][0]], entry[0][1]), reverse=True)
        by_load = PriorityQueue(attrgetter("load"), self.processes.values())
        for task, replicas in to_least_loaded:
            for _ in range(replicas):
                if not self._standby_to_least_loaded(by_load, task):
                    break  # Kafka logs that there is not enough capacity for the standby replicas

    def _standby_to_least_loaded(self, by_load: PriorityQueue[_Process], task: Task) -> bool:
        """`task` as a standby to the least loaded process without it; the processes taken out go back last
        taken first."""
        taken, found = [], False
        while (process := by_load.poll()) is not None:
            taken.append(process)
            if task not in process.tasks:
                self._placed(process.add_to_least_loaded(task, False))
                found = True
                break
        for process in reversed(taken):
            by_load.add(process)
        return found

    def _least_loaded_previous(self, member_ids: Sequence[str], standby: Task | None) -> str | None:
        """The first of `member_ids` (ranked) unless a later one's process and member both carry strictly less;
        for a standby, members whose process has the task are skipped."""
        best, best_process, best_member = None, _DOUBLE_MAX, _DOUBLE_MAX
        for member_id in member_ids:
            process = self.process_of[member_id]
            if standby is not None and standby in process.tasks:
                continue
            count = process.counts[member_id]
            if best is not None and not (process.load < best_process and count < best_member):
                continue
            best, best_process, best_member = member_id, process.load, count
        return best

    def _placed_active(self, count: int) -> None:
        """A member reached `count` tasks with an active one: once at the per-member share, the share of the
        others is computed again without it."""
        if count == self.active_per_member:
            self.active_members -= 1
            self.active_left -= count
            self.active_per_member = _tasks_per_member(self.active_left, self.active_members)
        self._placed(count)

    def _placed(self, count: int) -> None:
        if count == self.tasks_per_member:
            self.task_members -= 1
            self.tasks_left -= count
            self.tasks_per_member = _tasks_per_member(self.tasks_left, self.task_members)


def _compact(tasks: Collection[Task]) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for sub, p in tasks:
        out.setdefault(sub, set()).add(p)
    return {sub: frozenset(parts) for sub, parts in out.items()}

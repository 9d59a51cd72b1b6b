"""The neutral scenario JSON (see the shared assignor README) in and out: validation, lags, members."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .api import (RACK_STRATEGIES, ApplicationState, AssignmentConfigs, KafkaStreamsState, TaskInfo,
                  TaskTopicPartition, unchecked)
from .errors import ScenarioError

ROLES = ("active", "standby", "warmup")
_NOTHING: Mapping[str, Any] = MappingProxyType({})  # shared by every client without tags or lags


@dataclass(frozen=True)
class Member:
    member_id: str
    process_id: str
    active: tuple[str, ...]
    standby: tuple[str, ...]
    warmup: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    assignor: str
    state: ApplicationState
    members: tuple[Member, ...]


def _count(configs: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = configs.get(key, default)
    if value is None:
        return default
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        raise ScenarioError(f"config {key} must be a non-negative integer, got {value!r}")
    return value


MAX_TASKS = 1_000_000  # far beyond any Streams application; refuses absurd sizes before allocating them
MAX_REPLICAS = 1_000    # standby and warm-up replicas


def parse_configs(raw: Any) -> AssignmentConfigs:
    if not isinstance(raw, dict):
        raise ScenarioError("configs must be an object")
    strategy = raw.get("rack.aware.assignment.strategy") or "none"
    if strategy not in RACK_STRATEGIES:
        raise ScenarioError(f"unknown rack.aware.assignment.strategy {strategy!r}")
    tags = raw.get("rack.aware.assignment.tags") or []
    if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise ScenarioError("rack.aware.assignment.tags must be a list of strings")
    for name in ("num.standby.replicas", "max.warmup.replicas"):
        value = _count(raw, name, 0)
        if value > MAX_REPLICAS:
            raise ScenarioError(f"{name} {value} is absurd (at most {MAX_REPLICAS})")
    return AssignmentConfigs(
        acceptable_recovery_lag=_count(raw, "acceptable.recovery.lag", 10_000),
        max_warmup_replicas=_count(raw, "max.warmup.replicas", 2),
        num_standby_replicas=_count(raw, "num.standby.replicas", 0),
        probing_rebalance_interval_ms=_count(raw, "probing.rebalance.interval.ms", 600_000),
        rack_aware_assignment_tags=tuple(tags),
        rack_aware_traffic_cost=_count(raw, "rack.aware.assignment.traffic_cost", None),
        rack_aware_non_overlap_cost=_count(raw, "rack.aware.assignment.non_overlap_cost", None),
        rack_aware_assignment_strategy=strategy,
    )


def _partition_racks(raw: Any) -> dict[str, list[frozenset[str] | None]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError("topic_partition_racks must be an object")
    racks: dict[str, list[frozenset[str] | None]] = {}
    for topic, per_partition in raw.items():
        if not isinstance(per_partition, list):
            raise ScenarioError(f"topic_partition_racks[{topic!r}] must be a list")
        racks[topic] = []
        for replicas in per_partition:
            if not (replicas is None or isinstance(replicas, list) and all(isinstance(r, str) for r in replicas)):
                raise ScenarioError(f"topic_partition_racks[{topic!r}] entries must be lists of rack ids")
            racks[topic].append(frozenset(replicas) if replicas else None)
    return racks


def parse_tasks(raw: Any, racks: dict[str, list[frozenset[str] | None]]) -> dict[str, TaskInfo]:
    if not isinstance(raw, list):
        raise ScenarioError("subtopologies must be a list")
    tasks: dict[str, TaskInfo] = {}
    seen: set[str] = set()
    for i, sub in enumerate(raw):
        if not isinstance(sub, dict):
            raise ScenarioError(f"subtopologies[{i}] must be an object")
        sid = sub.get("id")
        if not (isinstance(sid, str) and sid != ""):
            raise ScenarioError(f"subtopologies[{i}] needs a non-empty string id")
        if sid in seen:
            raise ScenarioError(f"duplicate subtopology id {sid!r}")
        seen.add(sid)
        count = sub.get("partitions")
        if not (isinstance(count, int) and not isinstance(count, bool) and count >= 0):
            raise ScenarioError(f"subtopology {sid!r}: partitions must be a non-negative integer, got {count!r}")
        if len(tasks) + count > MAX_TASKS:
            raise ScenarioError(f"subtopology {sid!r}: {len(tasks) + count} tasks in all is absurd "
                                f"(at most {MAX_TASKS})")
        sources, changelogs = sub.get("source_topics") or [], sub.get("changelog_topics") or []
        if not all(isinstance(t, str) for t in [*sources, *changelogs]):
            raise ScenarioError(f"subtopology {sid!r}: topic names must be strings")
        stateful = sub.get("stateful", bool(changelogs))
        if not isinstance(stateful, bool):
            raise ScenarioError(f"subtopology {sid!r}: stateful must be a boolean")
        topics = [(topic, is_changelog, racks.get(topic, ())) for topics, is_changelog
                  in ((sources, False), (changelogs, True)) for topic in topics]
        for p in range(count):
            task_id = f"{sid}_{p}"
            if task_id in tasks:
                raise ScenarioError(f"task id {task_id!r} is defined twice")
            tasks[task_id] = unchecked(_ScenarioTask, id=task_id, is_stateful=stateful, _topics=(topics, p))
    return tasks


class _ScenarioTask(TaskInfo):
    """A TaskInfo whose topic partitions are built when first read: the built-in assignors read them only
    for rack awareness, and a scenario can hold up to a million tasks."""

    @property  # type: ignore[override]
    def topic_partitions(self) -> tuple[TaskTopicPartition, ...]:
        known = self.__dict__.get("topic_partitions")
        if known is None:
            topics, p = self.__dict__["_topics"]
            known = self.__dict__["topic_partitions"] = tuple(
                unchecked(TaskTopicPartition, topic=topic, partition=p, is_changelog=is_changelog,
                        rack_ids=racks[p] if p < len(racks) else None) for topic, is_changelog, racks in topics)
        return known

    @topic_partitions.setter
    def topic_partitions(self, value: tuple[TaskTopicPartition, ...]) -> None:
        self.__dict__["topic_partitions"] = value

    def __eq__(self, other: object) -> bool:  # equal to the plain TaskInfo of the same fields
        if not isinstance(other, TaskInfo):
            return NotImplemented
        return (self.id, self.is_stateful, self.topic_partitions) == (other.id, other.is_stateful,
                                                                      other.topic_partitions)

    __hash__ = TaskInfo.__hash__

    def __repr__(self) -> str:
        return f"TaskInfo(id={self.id!r}, is_stateful={self.is_stateful!r}, topic_partitions={self.topic_partitions!r})"


def _task_list(member: dict, key: str, tasks: Mapping[str, TaskInfo]) -> tuple[str, ...]:
    values = member.get(key)
    if not values:
        return ()
    if not isinstance(values, list):
        raise ScenarioError(f"member {member['member_id']!r}: {key} must be a list")
    if not all(map(tasks.__contains__, values)):
        unknown = next(t for t in values if t not in tasks)
        raise ScenarioError(f"member {member['member_id']!r}: unknown task id {unknown!r} in {key}")
    return tuple(values)


LATEST_OFFSET = -2  # Kafka's offset sum of a task the member runs as active: caught up


def _offsets(member: dict, key: str, tasks: Mapping[str, TaskInfo]) -> dict[str, int]:
    """Reported offsets by task; negative sums other than LATEST_OFFSET mean "unknown" and are dropped."""
    values = member.get(key) or {}
    if not values:
        return {}
    if not isinstance(values, dict):
        raise ScenarioError(f"member {member['member_id']!r}: {key} must be an object")
    offsets = {}
    for t, offset in values.items():
        if t not in tasks:
            raise ScenarioError(f"member {member['member_id']!r}: unknown task id {t!r} in {key}")
        integral = isinstance(offset, (int, float)) and not isinstance(offset, bool) and float(offset).is_integer()
        if not integral:
            raise ScenarioError(f"member {member['member_id']!r}: {key}[{t!r}] must be an integer, got {offset!r}")
        if offset >= 0 or offset == LATEST_OFFSET and key == "task_offsets":
            offsets[t] = int(offset)
    return offsets


def parse_scenario(raw: Any, now_ms: int = 0) -> Scenario:
    if not isinstance(raw, dict):
        raise ScenarioError("a scenario must be a JSON object")
    assignor = raw.get("assignor", "highly_available")
    if not (isinstance(assignor, str) and assignor != ""):
        raise ScenarioError("assignor must be a non-empty string")
    configs = parse_configs(raw.get("configs") or {})
    tasks = parse_tasks(raw.get("subtopologies"), _partition_racks(raw.get("topic_partition_racks")))
    raw_members = raw.get("members")
    if not (isinstance(raw_members, list) and raw_members):
        raise ScenarioError("members must be a non-empty list")
    members: list[Member] = []
    member_of: dict[str, Member] = {}
    by_process: dict[str, list[dict]] = {}
    for i, m in enumerate(raw_members):
        if not isinstance(m, dict):
            raise ScenarioError(f"members[{i}] must be an object")
        mid, pid = m.get("member_id"), m.get("process_id")
        if not (isinstance(mid, str) and mid != ""):
            raise ScenarioError(f"members[{i}] needs a non-empty string member_id")
        if not (isinstance(pid, str) and pid != ""):
            raise ScenarioError(f"member {mid!r} needs a non-empty string process_id")
        if mid in member_of:
            raise ScenarioError(f"duplicate member id {mid!r}")
        get = m.get  # the calls below only when there is something to check (most lists are empty)
        member_of[mid] = unchecked(Member, member_id=mid, process_id=pid,
                                 active=_task_list(m, "active", tasks) if get("active") else (),
                                 standby=_task_list(m, "standby", tasks) if get("standby") else (),
                                 warmup=_task_list(m, "warmup", tasks) if get("warmup") else ())
        members.append(member_of[mid])
        by_process.setdefault(pid, []).append(m)
    offsets = {m["member_id"]: _offsets(m, "task_offsets", tasks) for m in raw_members if m.get("task_offsets")}
    ends = {m["member_id"]: _offsets(m, "task_end_offsets", tasks) for m in raw_members if m.get("task_end_offsets")}
    end_offset = _end_offsets(offsets, ends)
    states = {}
    for pid, raw_group in by_process.items():
        group = [member_of[m["member_id"]] for m in raw_group]
        states[pid] = _client_state(pid, raw_group, group, tasks, offsets, end_offset)
    state = ApplicationState(MappingProxyType(tasks), MappingProxyType(states), configs, now_ms)
    return Scenario(assignor, state, tuple(members))


def _end_offsets(offsets: dict[str, dict[str, int]], ends: dict[str, dict[str, int]]) -> dict[str, int]:
    """Largest reported end offset per task, else largest reported offset (README rule)."""
    end: dict[str, int] = {}
    for per_member in offsets.values():
        for t, o in per_member.items():
            end[t] = max(end.get(t, 0), o)
    reported: dict[str, int] = {}
    for per_member in ends.values():
        for t, o in per_member.items():
            reported[t] = max(reported.get(t, 0), o)
    end.update(reported)
    return end


def _client_state(pid: str, raw_group: list[dict], group: list[Member], tasks: Mapping[str, TaskInfo],
                  offsets: dict[str, dict[str, int]], end_offset: dict[str, int]) -> KafkaStreamsState:
    rack, tags = None, {}
    for m in raw_group:  # the first rack and the first value of each tag key win
        if rack is None:
            rack = m.get("rack")
        raw_tags = m.get("client_tags")
        if raw_tags:
            if not isinstance(raw_tags, dict):
                raise ScenarioError(f"member {m['member_id']!r}: client_tags must be an object")
            tags = {**raw_tags, **tags}
    if not (rack is None or isinstance(rack, str)):
        raise ScenarioError(f"process {pid!r}: rack must be a string or null")
    if len(group) == 1:
        only = group[0]
        active = frozenset(only.active)
        standby = frozenset((*only.standby, *only.warmup)) - active if only.standby or only.warmup else frozenset()
    else:
        active = frozenset(t for m in group for t in m.active)
        standby = frozenset(t for m in group for t in (*m.standby, *m.warmup)) - active
    lags: dict[str, int] = {}
    for m in group:
        for t, o in offsets.get(m.member_id, _NOTHING).items():
            if tasks[t].is_stateful:
                lag = 0 if o == LATEST_OFFSET else max(0, end_offset.get(t, 0) - o)
                lags[t] = min(lags.get(t, lag), lag)
    for t in active:
        if tasks[t].is_stateful:
            lags[t] = 0
    return unchecked(
        KafkaStreamsState,
        process_id=pid, num_processing_threads=len(group), rack_id=rack,
        client_tags=MappingProxyType(tags) if tags else _NOTHING,
        previous_active_tasks=active, previous_standby_tasks=standby,
        consumer_client_ids=(group[0].member_id,) if len(group) == 1 else tuple(sorted(m.member_id for m in group)),
        task_lags=MappingProxyType(lags) if lags else _NOTHING, end_offsets=end_offset)

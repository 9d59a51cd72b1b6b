"""Is a streams group where an operator may take the next step? The runbook's check between steps.

A group is settled when it is Stable, every member is at the target assignment epoch holding
exactly its target, and every task of the topology is active on exactly one member. `unsettled`
lists what is not (who is behind, which task is unowned or doubled), from a StreamsGroupDescribe
answer and the partition counts of the topology's source topics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kprotocol.errors import error_text

STABLE = "Stable"
GROUP_ID_NOT_FOUND = 69


def _tasks(ids: Any) -> set[tuple[str, int]]:
    return {(t.subtopology_id, p) for t in ids or () for p in t.partitions}


def _name(task: tuple[str, int]) -> str:
    return f"{task[0]}_{task[1]}"


def topology_tasks(group: Any, partitions: Mapping[str, int]) -> set[tuple[str, int]] | None:
    """Every task of the group's topology (a subtopology has as many as its largest source topic has
    partitions), or None when a source topic's partition count is unknown."""
    if group.topology is None:
        return None
    tasks = set()
    for s in group.topology.subtopologies:
        counts = [partitions.get(t) for t in s.source_topics]
        counts += [t.partitions if t.partitions > 0 else partitions.get(t.name) for t in s.repartition_source_topics]
        if not counts or any(c is None for c in counts):
            return None
        tasks |= {(s.subtopology_id, p) for p in range(max(counts))}
    return tasks


def source_topics(group: Any) -> set[str]:
    """The topics whose partition counts `topology_tasks` needs."""
    if group.topology is None:
        return set()
    return {t for s in group.topology.subtopologies for t in
            [*s.source_topics, *(r.name for r in s.repartition_source_topics if r.partitions <= 0)]}


def unsettled(group: Any, partitions: Mapping[str, int]) -> list[str]:
    """Why `group` (a StreamsGroupDescribe DescribedGroup) is not settled; empty when it is."""
    if group.error_code:
        return [f"group {group.group_id}: {error_text(group.error_code, group.error_message)}"]
    reasons = []
    if group.group_state != STABLE:
        reasons.append(f"group state is {group.group_state}, not {STABLE} (group epoch {group.group_epoch}, "
                       f"target assignment epoch {group.assignment_epoch})")
    owners: dict[tuple[str, int], list[str]] = {}
    for m in sorted(group.members, key=lambda m: m.member_id):
        who = f"member {m.member_id} ({'classic' if m.is_classic else 'streams'}, process {m.process_id})"
        if m.member_epoch != group.assignment_epoch:
            reasons.append(f"{who} is at epoch {m.member_epoch}, the target assignment epoch is {group.assignment_epoch}")
        for role in ("active", "standby", "warmup"):
            held = _tasks(getattr(m.assignment, f"{role}_tasks"))
            wanted = _tasks(getattr(m.target_assignment, f"{role}_tasks"))
            if held - wanted:
                reasons.append(f"{who} still holds {role} tasks {', '.join(map(_name, sorted(held - wanted)))} "
                               "it must give up")
            if wanted - held:
                reasons.append(f"{who} has yet to take {role} tasks {', '.join(map(_name, sorted(wanted - held)))}")
        for task in _tasks(m.assignment.active_tasks):
            owners.setdefault(task, []).append(m.member_id)
    expected = topology_tasks(group, partitions)
    if expected is None:
        reasons.append("the topology's tasks are not known yet (topology not configured or source topics missing)")
        expected = set()
    for task in sorted(expected - owners.keys()):
        reasons.append(f"task {_name(task)} is active on no member")
    for task, members in sorted(owners.items()):
        if len(members) > 1:
            reasons.append(f"task {_name(task)} is active on {len(members)} members: {', '.join(members)}")
        if expected and task not in expected:
            reasons.append(f"task {_name(task)} is active on {members[0]} but is not a task of the topology")
    return reasons


def wait_settled(describe: Callable[[], tuple[Any, Mapping[str, int]]], timeout_s: float,
                 interval_s: float = 1.0, check: Callable[[Any, Mapping[str, int]], list[str]] = unsettled) \
        -> tuple[bool, list[str], float]:
    """Call `describe()` (a described group and its topics' partition counts) until `check` finds the
    group settled or `timeout_s` passes: (settled, the last reasons, seconds waited)."""
    start = time.monotonic()
    while True:
        reasons = check(*describe())
        waited = time.monotonic() - start
        if not reasons or waited >= timeout_s:
            return not reasons, reasons, waited
        time.sleep(min(interval_s, max(0.0, timeout_s - waited)))


def classic_unsettled(group: Any, partitions: Mapping[str, int]) -> list[str]:
    """Why a classic group (a DescribeGroups DescribedGroup; before the first streams-protocol member)
    is not settled: it must be Stable, every member synced (holding its assignment of the current
    generation) and every partition of its members' subscribed topics (source and repartition topics:
    one per task) assigned to exactly one member."""
    from kprotocol.registry import message_class

    subscription, assignment = message_class("ConsumerProtocolSubscription"), message_class("ConsumerProtocolAssignment")
    reasons = [] if group.group_state == STABLE else [f"group state is {group.group_state}, not {STABLE}"]
    owners: dict[tuple[str, int], list[str]] = {}
    topics: set[str] = set()
    for m in group.members:
        if group.group_state == STABLE and not m.member_assignment:
            reasons.append(f"member {m.member_id} has no assignment of the current generation (not synced)")
        try:
            topics.update(_consumer_message(subscription, m.member_metadata).topics)
            for tp in (_consumer_message(assignment, m.member_assignment).assigned_partitions
                       if m.member_assignment else ()):
                for p in tp.partitions:
                    owners.setdefault((tp.topic, p), []).append(m.member_id)
        except ValueError as exc:
            reasons.append(f"member {m.member_id}: its subscription or assignment does not decode ({exc})")
    for topic in sorted(topics):
        if topic not in partitions:
            reasons.append(f"topic {topic} is not known to the brokers yet")
            continue
        for p in range(partitions[topic]):
            held = owners.get((topic, p), [])
            if len(held) != 1:
                reasons.append(f"partition {topic}-{p} is assigned to {len(held)} members{': ' if held else ''}"
                               + ", ".join(held))
    return reasons


def _consumer_message(cls: Any, data: bytes) -> Any:
    if len(data) < 2:
        raise ValueError("empty")
    version = int.from_bytes(data[:2], "big", signed=True)
    low, high = cls.valid_versions
    return cls.decode(data[2:], max(low, min(version, high)))


def describe_settled(conn: Any, group_id: str, timeout_s: float) -> tuple[bool, list[str], float]:
    """`wait_settled` over a kprotocol Connection to a broker or the gateway: StreamsGroupDescribe (or,
    for a group that is still classic, DescribeGroups), then Metadata for the partition counts."""
    from kprotocol.registry import message_class

    streams_cls, classic_cls = message_class("StreamsGroupDescribeRequest"), message_class("DescribeGroupsRequest")
    metadata_cls = message_class("MetadataRequest")

    def counts(topics: set[str]) -> dict[str, int]:
        if not topics:
            return {}
        answer = conn.send(metadata_cls(topics=[metadata_cls.MetadataRequestTopic(name=t) for t in sorted(topics)]))
        return {t.name: len(t.partitions) for t in answer.topics if t.error_code == 0}

    def describe() -> tuple[Any, dict[str, int]]:
        group = conn.send(streams_cls(group_ids=[group_id])).groups[0]
        if group.error_code == GROUP_ID_NOT_FOUND:
            classic = conn.send(classic_cls(groups=[group_id])).groups[0]
            if classic.error_code == 0 and classic.group_state not in ("Dead", "Empty"):
                return classic, counts(_subscribed(classic))
        return group, counts(source_topics(group) if not group.error_code else set())

    def check(group: Any, partitions: Mapping[str, int]) -> list[str]:
        return unsettled(group, partitions) if hasattr(group, "assignment_epoch") else \
            classic_unsettled(group, partitions)

    return wait_settled(describe, timeout_s, check=check)


def _subscribed(group: Any) -> set[str]:
    from kprotocol.registry import message_class

    topics: set[str] = set()
    for m in group.members:
        if group.group_state == STABLE and not m.member_assignment:
            reasons.append(f"member {m.member_id} has no assignment of the current generation (not synced)")
        try:
            topics.update(_consumer_message(message_class("ConsumerProtocolSubscription"), m.member_metadata).topics)
        except ValueError:
            pass
    return topics

"""Classic Kafka Streams members in streams-group terms, and back.

A classic member speaks through its consumer-protocol subscription (SubscriptionInfo userdata,
versions 1-11) and is answered with a consumer-protocol assignment whose AssignmentInfo it can
read: active tasks aligned with its sorted partitions, standby tasks (warm-ups included, as the
classic protocol has no warm-ups) with their partitions, and the partitions of every endpoint.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kprotocol.errors import TruncatedError
from kprotocol.registry import message_class
from kprotocol.streams import AssignmentInfo, HostInfo, SubscriptionInfo, TaskId, TopicPartition
from kprotocol.streams.model import NO_NEXT_REBALANCE
from kprotocol.streams_group.member import Member
from kprotocol.streams_group.tasks import TaskSets, Tasks, tasks_of

Subscription, Assignment = message_class("ConsumerProtocolSubscription"), message_class("ConsumerProtocolAssignment")
_VERSION = struct.Struct(">h")
RUNNING_ACTIVE = -2  # the offset sum of a task a member runs as active


@dataclass(frozen=True)
class ClassicSubscription:
    """What a classic Streams member's JoinGroup metadata says."""

    version: int                      # consumer-protocol version
    subscription: Any                 # ConsumerProtocolSubscription
    info: SubscriptionInfo

    @property
    def process_id(self) -> str:
        return str(self.info.process_id)

    @property
    def user_endpoint(self) -> tuple[str, int] | None:
        endpoint = self.info.user_end_point
        if not endpoint or ":" not in endpoint:
            return None
        host, _, port = endpoint.rpartition(":")
        return host, int(port)

    @property
    def task_offsets(self) -> dict[tuple[str, int], int]:
        """Offset sums of the tasks with local state (running actives excluded: they are caught up)."""
        return {(str(s.task.subtopology), s.task.partition): s.offset_sum
                for s in self.info.task_offset_sums if s.offset_sum >= 0}


def decode_subscription(metadata: bytes) -> ClassicSubscription:
    if len(metadata) < _VERSION.size:
        raise TruncatedError(f"subscription metadata of {len(metadata)} bytes has no version", 0,
                             "ConsumerProtocolSubscription.version")
    (version,) = _VERSION.unpack_from(metadata)
    low, high = Subscription.valid_versions
    subscription = Subscription.decode(metadata[2:], max(low, min(version, high)))
    return ClassicSubscription(version, subscription, SubscriptionInfo.decode(subscription.user_data or b""))


def owned_active_tasks(subscription: Any, topology: Any) -> dict[str, frozenset[int]]:
    """The active tasks behind the partitions a cooperative member reports it still owns."""
    by_topic: dict[str, list[str]] = {}
    for s in topology.subtopologies:
        for topic in [*s.source_topics, *(t.name for t in s.repartition_source_topics)]:
            by_topic.setdefault(topic, []).append(s.subtopology_id)
    pairs = [(sub, tp.partitions) for tp in subscription.owned_partitions or () for sub in by_topic.get(tp.topic, ())]
    return tasks_of(pairs)


def assigned_tasks(assignment: bytes) -> TaskSets:
    """The tasks of a classic assignment (ConsumerProtocolAssignment + AssignmentInfo)."""
    if not assignment:
        return TaskSets()
    (version,) = _VERSION.unpack_from(assignment)
    low, high = Assignment.valid_versions
    message = Assignment.decode(assignment[2:], max(low, min(version, high)))
    info = AssignmentInfo.decode(message.user_data or b"")
    active = tasks_of((str(t.subtopology), [t.partition]) for t in info.active_tasks)
    standby = tasks_of((str(t.subtopology), [t.partition]) for t, _ in info.standby_tasks)
    return TaskSets(active, standby)


def task_partitions(tasks: Tasks, topology: Any, partition_counts: Mapping[str, int]) -> list[tuple[str, int, TaskId]]:
    """(topic, partition, task) of every input partition of `tasks`, in Kafka Streams' partition order."""
    subtopologies = {s.subtopology_id: s for s in topology.subtopologies}
    out = []
    for sub, parts in tasks.items():
        s = subtopologies.get(sub)
        if s is None:
            continue
        topics = [*s.source_topics, *(t.name for t in s.repartition_source_topics)]
        for p in parts:
            out += [(topic, p, TaskId(int(sub), p)) for topic in topics if p < partition_counts.get(topic, 0)]
    return sorted(out, key=lambda x: (x[0], x[1]))


Hosts = tuple[tuple[Any, ...], tuple[Any, ...]]  # (partitions by host, standby partitions by host)


def host_partitions(endpoints: Iterable[Member], topology: Any, partition_counts: Mapping[str, int]) -> Hosts:
    """The partitions of every endpoint, active and standby (warm-ups included), as an AssignmentInfo lists
    them: the same for every classic member of the group (built once per change of the members)."""
    by_host, standby_by_host = [], []
    for other in endpoints:
        if other.user_endpoint is None:
            continue
        host = HostInfo(*other.user_endpoint)
        by_host.append((host, tuple(TopicPartition(t, p) for t, p, _ in
                                    task_partitions(other.assigned.active, topology, partition_counts))))
        others = tasks_of([*other.assigned.standby.items(), *other.assigned.warmup.items()])
        standby_by_host.append((host, tuple(TopicPartition(t, p) for t, p, _ in
                                            task_partitions(others, topology, partition_counts))))
    return tuple(by_host), tuple(standby_by_host)


def assignment_info(member: Member, subscription: ClassicSubscription, topology: Any,
                    partition_counts: Mapping[str, int], endpoints: Iterable[Member] | Hosts,
                    commonly_supported_version: int, next_rebalance_ms: int = NO_NEXT_REBALANCE) -> AssignmentInfo:
    """What a classic member is told in its AssignmentInfo: its current tasks (warm-ups as standbys,
    the classic protocol has none) and the partitions of every endpoint (`endpoints`: the members, or
    their `host_partitions`)."""
    active = task_partitions(member.assigned.active, topology, partition_counts)
    standby_tasks = tasks_of([*member.assigned.standby.items(), *member.assigned.warmup.items()])
    standby: dict[TaskId, list[TopicPartition]] = {}
    for topic, p, task in task_partitions(standby_tasks, topology, partition_counts):
        standby.setdefault(task, []).append(TopicPartition(topic, p))
    if not isinstance(endpoints, tuple):
        endpoints = host_partitions(endpoints, topology, partition_counts)
    by_host, standby_by_host = endpoints
    version = subscription.info.version
    return AssignmentInfo(
        version=version, commonly_supported_version=min(commonly_supported_version, version),
        active_tasks=tuple(task for _, _, task in active),
        standby_tasks=tuple((task, tuple(tps)) for task, tps in sorted(standby.items())),
        partitions_by_host=by_host, standby_partitions_by_host=standby_by_host,
        next_rebalance_ms=next_rebalance_ms)


def classic_assignment(info: AssignmentInfo, subscription: ClassicSubscription, topology: Any,
                       partition_counts: Mapping[str, int]) -> bytes:
    """The SyncGroup assignment carrying `info`: the active tasks' partitions and the userdata, in the
    consumer-protocol version the member subscribed with."""
    partitions: dict[str, list[int]] = {}
    active = tasks_of((str(t.subtopology), [t.partition]) for t in info.active_tasks)
    for topic, p, _ in task_partitions(active, topology, partition_counts):
        partitions.setdefault(topic, []).append(p)
    low, high = Assignment.valid_versions
    consumer_version = max(low, min(subscription.version, high))
    message = Assignment(assigned_partitions=[Assignment.TopicPartition(topic=t, partitions=ps)
                                              for t, ps in partitions.items()], user_data=info.encode())
    return _VERSION.pack(consumer_version) + message.encode(consumer_version)

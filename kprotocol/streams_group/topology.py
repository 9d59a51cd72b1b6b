"""A streams group's topology and its configuration against the topics the cluster has.

The topology is kept as the StreamsGroupTopology record value. `configure` decides the partition
counts of repartition and changelog topics, the number of tasks of each subtopology, which
internal topics are missing and which status (MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS,
INCORRECTLY_PARTITIONED_TOPICS) the heartbeat reports, as Kafka's group coordinator does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kprotocol.registry import message_class
from kprotocol.streams_group.errors import STREAMS_INVALID_TOPOLOGY, UNKNOWN_SERVER_ERROR, CoordinatorError
from kprotocol.streams_group.java_order import hash_order

TopologyValue = message_class("StreamsGroupTopologyValue")
Heartbeat = message_class("StreamsGroupHeartbeatRequest")
STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS, MISSING_INTERNAL_TOPICS, \
    SHUTDOWN_APPLICATION, ASSIGNMENT_DELAYED = range(6)


def from_request(topology: Any) -> Any:
    """The StreamsGroupTopology record value of a heartbeat's topology."""
    return _convert(topology, TopologyValue, TopologyValue, TopologyValue.TopicConfig)


def to_request(value: Any) -> Any:
    """A heartbeat topology equal to a stored StreamsGroupTopology record value."""
    return _convert(value, Heartbeat, Heartbeat.Topology, Heartbeat.KeyValue)


def _convert(topology: Any, owner: Any, root: Any, config: Any) -> Any:
    """`topology` copied field by field into `root`, the structs taken from `owner` (record and request
    topologies have the same fields; their topic configs are TopicConfig and KeyValue)."""
    def info(t: Any) -> Any:
        return owner.TopicInfo(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                               topic_configs=[config(key=c.key, value=c.value) for c in t.topic_configs])

    return root(epoch=topology.epoch, subtopologies=[owner.Subtopology(
        subtopology_id=s.subtopology_id, source_topics=s.source_topics, source_topic_regex=s.source_topic_regex,
        state_changelog_topics=[info(t) for t in s.state_changelog_topics],
        repartition_sink_topics=s.repartition_sink_topics,
        repartition_source_topics=[info(t) for t in s.repartition_source_topics],
        copartition_groups=[owner.CopartitionGroup(
            source_topics=g.source_topics, source_topic_regex=g.source_topic_regex,
            repartition_source_topics=g.repartition_source_topics)
                            for g in s.copartition_groups]) for s in topology.subtopologies])


INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def validate_names(topology: Any) -> None:
    """Kafka's first check of a heartbeat's topology: no internal topics, only legal topic names."""
    names: dict[str, None] = {}
    for s in topology.subtopologies:
        names.update(dict.fromkeys(s.source_topics))
        names.update(dict.fromkeys(s.repartition_sink_topics))
        names.update(dict.fromkeys(t.name for t in s.repartition_source_topics))
        names.update(dict.fromkeys(t.name for t in s.state_changelog_topics))
    internal = [n for n in names if n in INTERNAL_TOPICS]
    if internal:
        raise CoordinatorError(STREAMS_INVALID_TOPOLOGY, f"Use of Kafka internal topics {','.join(internal)} in a "
                                                         "Kafka Streams topology is prohibited.")
    invalid = [n for n in names if n in (".", "..") or not _LEGAL_TOPIC.fullmatch(n)]
    if invalid:
        raise CoordinatorError(STREAMS_INVALID_TOPOLOGY, f"Topic names {','.join(invalid)} are not valid topic names.")


def same_topology(a: Any, b: Any) -> bool:
    """Equal epoch and subtopologies, whatever the order of the subtopologies."""
    return a.epoch == b.epoch and {s.subtopology_id: s for s in a.subtopologies} == \
        {s.subtopology_id: s for s in b.subtopologies}


def required_topics(topology: Any) -> set[str]:
    """Every topic the topology reads or writes that the coordinator checks."""
    out: set[str] = set()
    for s in topology.subtopologies:
        out.update(s.source_topics)
        out.update(t.name for t in s.repartition_source_topics)
        out.update(t.name for t in s.state_changelog_topics)
    return out


def summarize(topics: Iterable[str]) -> str:
    topics = list(topics)
    if not topics:
        return "<none>"
    more = f" and {len(topics) - 3} additional topics" if len(topics) > 3 else ""
    return ", ".join(topics[:3]) + more


@dataclass(frozen=True)
class InternalTopic:
    """A repartition or changelog topic the application needs (replication factor -1: the broker's default)."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Configured:
    """The outcome of configuring a topology: tasks per subtopology when it could be configured,
    the internal topics to create, and the status to report (code, detail) if any."""

    epoch: int
    tasks: Mapping[str, int] | None
    partitions: Mapping[str, int] = field(default_factory=dict)
    to_create: Mapping[str, InternalTopic] = field(default_factory=dict)
    status: tuple[int, str] | None = None

    @property
    def is_ready(self) -> bool:
        return self.tasks is not None and self.status is None


class _TopicError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = (status, detail)


def configure(topology: Any, topics: Mapping[str, int]) -> Configured:
    """Configure `topology` against `topics` (name -> partition count)."""
    for s in topology.subtopologies:  # Kafka resolves co-partition indexes first and fails without a message
        for g in s.copartition_groups:
            if any(not 0 <= i < len(s.source_topics) for i in g.source_topics) or \
                    any(not 0 <= i < len(s.repartition_source_topics) for i in g.repartition_source_topics):
                raise CoordinatorError(UNKNOWN_SERVER_ERROR)
    try:
        missing = sorted({t for s in topology.subtopologies for t in s.source_topics if t not in topics})
        if missing:
            raise _TopicError(MISSING_SOURCE_TOPICS, f"Source topics {summarize(missing)} are missing.")
        decided = _decide_partitions(topology, topics)
        count = lambda t: topics.get(t, decided.get(t))  # noqa: E731
        tasks = {s.subtopology_id: max([count(t) for t in s.source_topics]
                                       + [count(t.name) for t in s.repartition_source_topics] or [0])
                 for s in topology.subtopologies}
        internal: dict[str, InternalTopic] = {}
        for s in topology.subtopologies:
            for t in [*s.repartition_source_topics, *s.state_changelog_topics]:
                internal[t.name] = InternalTopic(t.name, t.partitions or decided[t.name], t.replication_factor or -1,
                                                 tuple((c.key, c.value) for c in t.topic_configs))
        for name in list(internal):
            if name in topics:
                expected = internal.pop(name).partitions
                if topics[name] != expected:
                    raise _TopicError(INCORRECTLY_PARTITIONED_TOPICS, f"Existing topic {name} has different number "
                                      f"of partitions: expected {expected}, found {topics[name]}")
        to_create = {name: internal[name] for name in hash_order(internal)}
        status = (MISSING_INTERNAL_TOPICS, "Internal topics are missing: " + summarize(to_create)) \
            if to_create else None
        return Configured(topology.epoch, tasks, decided, to_create, status)
    except _TopicError as exc:
        return Configured(topology.epoch, None, status=exc.status)


def _decide_partitions(topology: Any, topics: Mapping[str, int]) -> dict[str, int]:
    """Partition counts of the internal topics: repartition topics from their writers' inputs
    (Kafka's fix-point iteration), co-partitioned groups made equal, changelog topics one
    partition per task."""
    decided = {t.name: t.partitions for s in topology.subtopologies for t in s.repartition_source_topics
               if t.partitions != 0}
    needed = True
    while needed:
        needed = progress = False
        for s in topology.subtopologies:
            for sink in s.repartition_sink_topics:
                if sink in decided:
                    continue
                counts = [decided[t.name] for t in s.repartition_source_topics if t.name in decided] + \
                    [topics[t] for t in s.source_topics if t in topics]
                if counts:
                    decided[sink] = max(counts)
                    progress = True
                else:
                    needed = True
        if needed and not progress:
            raise CoordinatorError(STREAMS_INVALID_TOPOLOGY, "Failed to compute number of partitions for all "
                                   "repartition topics. There may be loops in the topology that cannot be resolved.")
    if any(t.name not in decided for s in topology.subtopologies for t in s.repartition_source_topics):
        raise CoordinatorError(STREAMS_INVALID_TOPOLOGY, "Failed to compute number of partitions for all "
                               "repartition topics, because a repartition source topic is never used as a sink topic.")
    repartition = {t.name for s in topology.subtopologies for t in s.repartition_source_topics}
    if any(decided[name] < 0 for name in repartition):
        raise CoordinatorError(UNKNOWN_SERVER_ERROR)  # Kafka fails on a negative partition count without a message
    for s in topology.subtopologies:
        for group in s.copartition_groups:
            members = [s.source_topics[i] for i in group.source_topics] + \
                [s.repartition_source_topics[i].name for i in group.repartition_source_topics]
            _copartition(members, repartition, topics, decided)
    for s in topology.subtopologies:
        inputs = [topics[t] for t in s.source_topics if t in topics] + \
            [decided[t.name] for t in s.repartition_source_topics]
        if not inputs:
            raise CoordinatorError(STREAMS_INVALID_TOPOLOGY, f"No source topics found for subtopology "
                                                             f"{s.subtopology_id}")
        for t in s.state_changelog_topics:
            decided[t.name] = t.partitions or max(inputs)
    return {name: n for name, n in decided.items() if name in repartition or name in _changelogs(topology)}


def _changelogs(topology: Any) -> set[str]:
    return {t.name for s in topology.subtopologies for t in s.state_changelog_topics}


def _copartition(group: list[str], repartition: set[str], topics: Mapping[str, int], decided: dict[str, int]) -> None:
    external = {t: topics[t] for t in group if t not in repartition}
    internal = [t for t in group if t in repartition]
    if external:
        if len(set(external.values())) > 1:
            listing = ", ".join(f"{t}={n}" for t, n in sorted(external.items()))
            raise _TopicError(INCORRECTLY_PARTITIONED_TOPICS,
                              f"Following topics do not have the same number of partitions: [{{{listing}}}]")
        n = next(iter(external.values()))
    else:
        n = max(decided.get(t, 0) for t in internal)
    for t in internal:
        if decided.setdefault(t, n) != n:
            raise _TopicError(INCORRECTLY_PARTITIONED_TOPICS, f"Number of partitions [{decided[t]}] of repartition "
                              f"topic [{t}] doesn't match number of partitions [{n}] of the source topic.")


def describe(topology: Any, configured: Configured | None, cls: Any) -> Any:
    """The StreamsGroupDescribe topology: partition counts filled in once the topology is configured."""
    ready = configured is not None and configured.is_ready and configured.epoch == topology.epoch
    counts = configured.partitions if ready else {}

    def info(t: Any) -> Any:
        return cls.TopicInfo(name=t.name, partitions=counts.get(t.name, t.partitions),
                             replication_factor=t.replication_factor,
                             topic_configs=[cls.KeyValue(key=c.key, value=c.value) for c in t.topic_configs])

    order = hash_order if ready else sorted
    subs = sorted(topology.subtopologies, key=lambda s: s.subtopology_id)
    return cls.Topology(epoch=topology.epoch, subtopologies=[cls.Subtopology(
        subtopology_id=s.subtopology_id, source_topics=order(s.source_topics),
        repartition_sink_topics=order(s.repartition_sink_topics),
        state_changelog_topics=[info(t) for t in _by_name(s.state_changelog_topics, order)],
        repartition_source_topics=[info(t) for t in _by_name(s.repartition_source_topics, order)]) for s in subs])


def _by_name(infos: list[Any], order) -> list[Any]:
    by = {t.name: t for t in infos}
    return [by[name] for name in order(by)]


def stateful_subtopologies(topology: Any) -> set[str]:
    return {s.subtopology_id for s in topology.subtopologies if s.state_changelog_topics}

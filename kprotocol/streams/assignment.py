"""AssignmentInfo: the userdata of a Kafka Streams member's SyncGroup assignment (versions 1-11)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import count

from construct import ConstructError

from kprotocol.errors import DecodeError, TruncatedError, UnsupportedVersionError
from kprotocol.streams.errors import InvalidVersionError, NamedTopologyError
from kprotocol.streams.layouts import ASSIGNMENT
from kprotocol.streams.model import (
    LATEST_SUPPORTED_VERSION,
    MIN_NAMED_TOPOLOGY_VERSION,
    NO_NEXT_REBALANCE,
    UNKNOWN_VERSION,
    HostInfo,
    TaskId,
    TopicPartition,
    render_host_map,
    render_tps,
)

_VERSION = struct.Struct(">i")

TopicPartitions = tuple[TopicPartition, ...]
HostMap = tuple[tuple[HostInfo, TopicPartitions], ...]


@dataclass(frozen=True, slots=True)
class AssignmentInfo:
    """Decoded or hand-built AssignmentInfo. Collections keep wire order, duplicates included.

    `topic_dictionary` ((index, topic) pairs, v5+) is the one read from the wire; when None the encoder
    numbers the host-map topics 0..n-1 in order of first appearance.
    """

    version: int
    commonly_supported_version: int = LATEST_SUPPORTED_VERSION
    active_tasks: tuple[TaskId, ...] = ()
    standby_tasks: tuple[tuple[TaskId, TopicPartitions], ...] = ()
    partitions_by_host: HostMap = ()
    standby_partitions_by_host: HostMap = ()
    err_code: int = 0
    next_rebalance_ms: int = NO_NEXT_REBALANCE
    topic_dictionary: tuple[tuple[int, str], ...] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.version <= LATEST_SUPPORTED_VERSION:
            raise InvalidVersionError(
                f"version must be between 1 and {LATEST_SUPPORTED_VERSION}; was: {self.version}", "version"
            )
        # Plain values (lists, bare tuples) become the value types; decoded input is already in shape.
        active = self.active_tasks
        if type(active) is not tuple or not all(type(t) is TaskId for t in active):
            object.__setattr__(self, "active_tasks", tuple(TaskId(*t) for t in active))
        standby = self.standby_tasks
        if type(standby) is not tuple or not all(type(e) is tuple and type(e[0]) is TaskId for e in standby):
            object.__setattr__(self, "standby_tasks", tuple((TaskId(*t), _tps(tps)) for t, tps in standby))
        for name in ("partitions_by_host", "standby_partitions_by_host"):
            hosts = getattr(self, name)
            if type(hosts) is not tuple or not all(type(e) is tuple and type(e[0]) is HostInfo for e in hosts):
                object.__setattr__(self, name, tuple((HostInfo(*h), _tps(tps)) for h, tps in hosts))
        if self.topic_dictionary is not None and type(self.topic_dictionary) is not tuple:
            object.__setattr__(self, "topic_dictionary", tuple((i, t) for i, t in self.topic_dictionary))

    @classmethod
    def decode(cls, data: bytes, *, supported_version: int = LATEST_SUPPORTED_VERSION) -> AssignmentInfo:
        """Decode as Kafka does; `supported_version` (at most 11) emulates the decoder of an older release."""
        supported_version = min(supported_version, LATEST_SUPPORTED_VERSION)
        data = bytes(data)
        if len(data) < 4:
            raise TruncatedError(f"need a 4-byte version, got {len(data)} byte(s)", 0, "version")
        version = _VERSION.unpack_from(data)[0]
        if not 1 <= version <= supported_version:
            raise UnsupportedVersionError(
                f"Unable to decode assignment data: used version: {version}; "
                f"latest supported version: {supported_version}",
                0,
                "version",
            )
        try:
            parsed = ASSIGNMENT[version].parse(data)
        except ConstructError as exc:
            raise DecodeError(str(exc)) from None
        return cls(**_content(parsed))

    def encode(self) -> bytes:
        """The bytes at `self.version`."""
        version = self.version
        if version < MIN_NAMED_TOPOLOGY_VERSION:
            tasks = [*self.active_tasks, *(task for task, _ in self.standby_tasks)]
            if any(task.named_topology for task in tasks):
                raise NamedTopologyError(
                    f"Named topologies are not compatible with protocol version {version}", "active_tasks"
                )
        fields = {
            "version": version,
            "commonly_supported_version": self.commonly_supported_version,
            "active_tasks": self.active_tasks,
            "standby_tasks": self.standby_tasks,
            "partitions_by_host": self.partitions_by_host,
            "err_code": self.err_code,
            "next_rebalance_ms": self.next_rebalance_ms,
        }
        if version >= 5:
            host_maps = [self.partitions_by_host] + ([self.standby_partitions_by_host] if version >= 6 else [])
            dictionary, index_of = _dictionary(self.topic_dictionary, host_maps)
            fields["topic_dictionary"] = dictionary
            fields["partitions_by_host"] = _to_indexes(self.partitions_by_host, index_of)
            if version >= 6:
                fields["standby_partitions_by_host"] = _to_indexes(self.standby_partitions_by_host, index_of)
        return ASSIGNMENT[version].build(fields)

    @property
    def layout_version(self) -> int:
        """The earliest version with this version's byte layout (v7-9 and v10-11 are identical)."""
        return {8: 7, 9: 7, 11: 10}.get(self.version, self.version)

    def to_fields(self) -> dict:
        """The getter values rendered as in the shared vectors' `fields`."""
        standby = {str(task): tps for task, tps in self.standby_tasks}
        return {
            "version": self.version,
            "commonlySupportedVersion": self.commonly_supported_version,
            "activeTasks": [str(task) for task in self.active_tasks],
            "standbyTasks": [[task, render_tps(standby[task])] for task in sorted(standby)],
            "partitionsByHost": render_host_map(self.partitions_by_host),
            "standbyPartitionByHost": render_host_map(self.standby_partitions_by_host),
            "errCode": self.err_code,
            "nextRebalanceMs": self.next_rebalance_ms,
        }


def _tps(tps: object) -> TopicPartitions:
    return tuple(TopicPartition(t, p) for t, p in tps)


def _content(parsed: dict) -> dict:
    """Dataclass fields from a parsed layout; v5+ host maps resolve indexes (unknown index: topic None)."""
    content = {
        key: parsed[key]
        for key in ("version", "err_code", "next_rebalance_ms")
        if key in parsed
    }
    content["commonly_supported_version"] = parsed.get("commonly_supported_version", UNKNOWN_VERSION)
    content["active_tasks"] = tuple(parsed["active_tasks"])
    content["standby_tasks"] = tuple((task, tuple(tps)) for task, tps in parsed["standby_tasks"])
    if "topic_dictionary" in parsed:
        dictionary = tuple(parsed["topic_dictionary"])
        topic = dict(dictionary).get
        content["topic_dictionary"] = dictionary
        new = tuple.__new__  # TopicPartition without a Python-level __new__ call: this loop is hot
        for key in ("partitions_by_host", "standby_partitions_by_host"):
            content[key] = tuple(
                (host, tuple([new(TopicPartition, (topic(index), p)) for index, p in refs]))
                for host, refs in parsed.get(key, ())
            )
    elif "partitions_by_host" in parsed:
        content["partitions_by_host"] = tuple((host, tuple(tps)) for host, tps in parsed["partitions_by_host"])
    return content


def _dictionary(
    given: tuple[tuple[int, str], ...] | None, host_maps: list[HostMap]
) -> tuple[list[tuple[int, str]], dict[str | None, int]]:
    """The dictionary to write and topic -> index; topics it lacks get fresh indexes at the end."""
    dictionary = list(given or ())
    resolved = dict(dictionary)
    index_of: dict[str | None, int] = {}
    for index, topic in dictionary:
        if resolved[index] == topic:
            index_of.setdefault(topic, index)
    fresh = (i for i in count() if i not in resolved)
    for host_map in host_maps:
        for _, tps in host_map:
            for topic, _ in tps:
                if topic not in index_of:
                    index_of[topic] = next(fresh)
                    if topic is not None:  # None: an index absent from the dictionary decodes to null
                        dictionary.append((index_of[topic], topic))
    return dictionary, index_of


def _to_indexes(host_map: HostMap, index_of: dict[str | None, int]) -> list:
    return [(host, [(index_of[topic], p) for topic, p in tps]) for host, tps in host_map]

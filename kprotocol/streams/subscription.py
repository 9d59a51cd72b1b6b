"""SubscriptionInfo: the userdata of a Kafka Streams member's JoinGroup subscription (versions 1-11)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby

from construct import ConstructError

from kprotocol.errors import DecodeError, InvalidValueError, TruncatedError, UnsupportedVersionError
from kprotocol.streams.errors import InvalidVersionError, NamedTopologyError
from kprotocol.streams.layouts import SUBSCRIPTION
from kprotocol.streams.model import (
    EARLIEST_PROBEABLE_VERSION,
    LATEST_OFFSET,
    LATEST_SUPPORTED_VERSION,
    MIN_NAMED_TOPOLOGY_VERSION,
    UNKNOWN_OFFSET_SUM,
    UNKNOWN_VERSION,
    TaskId,
    TaskOffsetSum,
)

ZERO_UUID = uuid.UUID(int=0)
_HEADER = struct.Struct(">ii")
_VERSION = struct.Struct(">i")


class DuplicateClientTagError(InvalidValueError):
    """A client tag key repeats: the bytes decode, but Kafka's `clientTags()` getter fails."""


def version_problem(version: int, latest: int) -> str | None:
    """Kafka's check of (version, latestSupportedVersion), or None when they are acceptable."""
    if latest == UNKNOWN_VERSION:
        if version in (1, 2):
            return None
        return (
            "Only versions 1 and 2 are expected to use an UNKNOWN (-1) latest supported version. "
            f"Got {version}."
        )
    if 1 <= version <= latest:
        return None
    return f"version must be between 1 and {latest}; was: {version}"


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """Decoded or hand-built SubscriptionInfo. `task_offset_sums` keeps wire order and duplicates.

    v1-6 carry tasks rather than sums: tasks at -2 (running active) go to prevTasks, every other task to
    standbyTasks, so those versions decode prev tasks as -2 and standby tasks as -3.
    Lists given for collections are turned into tuples.
    """

    version: int
    latest_supported_version: int = LATEST_SUPPORTED_VERSION
    process_id: uuid.UUID = ZERO_UUID
    task_offset_sums: tuple[TaskOffsetSum, ...] = ()
    user_end_point: str | None = None
    unique_field: int = 0
    error_code: int = 0
    client_tags: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # Plain values (lists, bare tuples) become the value types; decoded input is already in shape.
        sums = self.task_offset_sums
        if type(sums) is not tuple or not all(type(s) is TaskOffsetSum and type(s[0]) is TaskId for s in sums):
            sums = tuple(TaskOffsetSum(TaskId(*task), offset) for task, offset in sums)
            object.__setattr__(self, "task_offset_sums", sums)
        if type(self.client_tags) is not tuple:
            object.__setattr__(self, "client_tags", tuple((k, v) for k, v in self.client_tags))
        problem = version_problem(self.version, self.latest_supported_version)
        if problem:
            raise InvalidVersionError(problem, "version")
        if self.version < MIN_NAMED_TOPOLOGY_VERSION and any(s.task.named_topology for s in sums):
            raise NamedTopologyError(
                "Named topologies are not compatible with older protocol versions", "task_offset_sums"
            )

    @classmethod
    def decode(cls, data: bytes, *, supported_version: int = LATEST_SUPPORTED_VERSION) -> SubscriptionInfo:
        """Decode as Kafka does; `supported_version` (at most 11) emulates the decoder of an older release."""
        supported_version = min(supported_version, LATEST_SUPPORTED_VERSION)
        data = bytes(data)
        if len(data) < 4:
            raise TruncatedError(f"need a 4-byte version, got {len(data)} byte(s)", 0, "version")
        version = _VERSION.unpack_from(data)[0]
        if version > supported_version:
            return cls._probe(data, version, supported_version)
        layout = SUBSCRIPTION[version if 1 <= version <= LATEST_SUPPORTED_VERSION else 1]
        try:
            parsed = layout.parse(data)
        except ConstructError as exc:
            raise DecodeError(str(exc)) from None
        latest = parsed.get("latest_supported_version", UNKNOWN_VERSION)
        problem = version_problem(version, latest)
        if problem:
            raise UnsupportedVersionError(problem, 0, "version")
        return cls(version, latest, **_content(version, parsed))

    @classmethod
    def _probe(cls, data: bytes, version: int, supported: int) -> SubscriptionInfo:
        """A version newer than the decoder's: only the 8-byte header is read."""
        if supported < EARLIEST_PROBEABLE_VERSION:
            message = f"unable to decode subscription data: version={version}"
            raise UnsupportedVersionError(message, 0, "version")
        if len(data) < 8:
            raise TruncatedError("need the 8-byte version probing header", 4, "latest_supported_version")
        latest = _HEADER.unpack_from(data)[1]
        problem = version_problem(version, latest)
        if problem:
            raise UnsupportedVersionError(problem, 4, "latest_supported_version")
        return cls(version, latest)

    def encode(self) -> bytes:
        """The bytes at `self.version` (1-11)."""
        version = self.version
        if version > LATEST_SUPPORTED_VERSION:
            raise InvalidVersionError(
                f"Should never try to encode a SubscriptionInfo with version [{version}] > "
                f"LATEST_SUPPORTED_VERSION [{LATEST_SUPPORTED_VERSION}]",
                "version",
            )
        sums = self.task_offset_sums
        fields: dict = {
            "version": version,
            "latest_supported_version": self.latest_supported_version,
            "process_id": self.process_id,
            "user_end_point": self.user_end_point,
            "unique_field": self.unique_field,
            "error_code": self.error_code,
            "client_tags": self.client_tags,
        }
        if version <= 6:
            fields["prev_tasks"] = [s.task for s in sums if s.offset_sum == LATEST_OFFSET]
            fields["standby_tasks"] = [s.task for s in sums if s.offset_sum != LATEST_OFFSET]
        elif version <= 9:
            fields["task_offset_sums"] = group_sums(sums)
        else:
            fields["task_offset_sums"] = sums
        return SUBSCRIPTION[version].build(fields)

    @property
    def layout_version(self) -> int | None:
        """The earliest version with this version's byte layout; None for a header-only (probed) decode."""
        if self.version > LATEST_SUPPORTED_VERSION:
            return None
        return 3 if 3 <= self.version <= 6 else self.version

    def offset_sums(self) -> dict[TaskId, int]:
        """Kafka's `taskOffsetSums()`: later entries win; an empty topology name means none."""
        return {_unnamed_if_empty(s.task): s.offset_sum for s in self.task_offset_sums}

    def to_fields(self) -> dict:
        """The getter values rendered as in the shared vectors' `fields`."""
        merged = {str(task): offset for task, offset in self.offset_sums().items()}
        if self.version <= 6:
            prev = {str(s.task) for s in self.task_offset_sums if s.offset_sum == LATEST_OFFSET}
            standby = {str(s.task) for s in self.task_offset_sums if s.offset_sum != LATEST_OFFSET}
        else:
            prev = {task for task, offset in merged.items() if offset == LATEST_OFFSET}
            standby = merged.keys() - prev
        return {
            "version": self.version,
            "latestSupportedVersion": self.latest_supported_version,
            "processId": str(self.process_id),
            "prevTasks": sorted(prev),
            "standbyTasks": sorted(standby),
            "taskOffsetSums": [[task, merged[task]] for task in sorted(merged)],
            "userEndPoint": self.user_end_point or None,
            "uniqueField": self.unique_field,
            "errorCode": self.error_code,
            "clientTags": self._rendered_tags(),
        }

    def _rendered_tags(self) -> list[list[str]]:
        seen: dict[str, str] = {}
        for i, (key, value) in enumerate(self.client_tags):
            if key in seen:
                raise DuplicateClientTagError(
                    f"Duplicate key {key} (attempted merging values {seen[key]} and {value})",
                    path=f"client_tags[{i}].key",
                )
            seen[key] = value
        return [[k, seen[k]] for k in sorted(seen)]


def _unnamed_if_empty(task: TaskId) -> TaskId:
    return task if task.named_topology or task.named_topology is None else task._replace(named_topology=None)


def group_sums(sums: Iterable[TaskOffsetSum]) -> list[tuple[int, list[tuple[int, int]]]]:
    """The v7-9 grouped form: consecutive entries of one subtopology form a group (order kept)."""
    return [
        (group, [(s.task.partition, s.offset_sum) for s in entries])
        for group, entries in groupby(sums, key=lambda s: s.task.subtopology)
    ]


def _content(version: int, parsed: dict) -> dict:
    """Dataclass fields from a parsed layout; absent fields keep their defaults."""
    content = {key: parsed[key] for key in ("process_id", "unique_field", "error_code") if key in parsed}
    content["user_end_point"] = parsed.get("user_end_point")
    if version <= 6:
        prev = [TaskOffsetSum(task, LATEST_OFFSET) for task in parsed["prev_tasks"]]
        standby = [TaskOffsetSum(task, UNKNOWN_OFFSET_SUM) for task in parsed["standby_tasks"]]
        content["task_offset_sums"] = tuple(prev + standby)
    elif version <= 9:
        content["task_offset_sums"] = tuple(
            TaskOffsetSum(TaskId(group, partition), offset)
            for group, partitions in parsed["task_offset_sums"]
            for partition, offset in partitions
        )
    else:
        content["task_offset_sums"] = tuple(parsed["task_offset_sums"])
    content["client_tags"] = tuple(parsed.get("client_tags", ()))
    return content

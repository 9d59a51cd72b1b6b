"""Value types shared by SubscriptionInfo and AssignmentInfo, and the `fields` rendering helpers."""

from __future__ import annotations

import re
from typing import NamedTuple

LATEST_SUPPORTED_VERSION = 11
EARLIEST_PROBEABLE_VERSION = 3
MIN_NAMED_TOPOLOGY_VERSION = 10
LATEST_OFFSET = -2
UNKNOWN_OFFSET_SUM = -3
UNKNOWN_VERSION = -1
NO_NEXT_REBALANCE = (1 << 63) - 1

_TASK_TEXT = re.compile(r"(?:(.*)__)?(-?\d+)_(-?\d+)", re.S)


class TaskId(NamedTuple):
    """A Streams task; an empty or null `named_topology` means the task has none."""

    subtopology: int
    partition: int
    named_topology: str | None = None

    def __str__(self) -> str:
        if self.named_topology:
            return f"{self.named_topology}__{self.subtopology}_{self.partition}"
        return f"{self.subtopology}_{self.partition}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """Inverse of `str()`: "1_2" or "topology__1_2"."""
        match = _TASK_TEXT.fullmatch(text)
        if match is None:
            raise ValueError(f"not a task id: {text!r}")
        name, sub, part = match.groups()
        return cls(int(sub), int(part), name)


class TopicPartition(NamedTuple):
    """A topic partition; `topic` is None for an unknown AssignmentInfo dictionary index."""

    topic: str | None
    partition: int


class HostInfo(NamedTuple):
    """A Streams application server endpoint."""

    host: str
    port: int


class TaskOffsetSum(NamedTuple):
    """A task and its offset sum (-2 running active, -3 unknown standby offset)."""

    task: TaskId
    offset_sum: int


def tp_sort_key(tp: TopicPartition) -> tuple[bool, str, int]:
    return (tp.topic is None, tp.topic or "", tp.partition)


def render_tps(tps: object) -> list[dict]:
    """A topic-partition set rendered as a sorted, de-duplicated list."""
    return [{"topic": t, "partition": p} for t, p in sorted(set(tps), key=tp_sort_key)]


def render_host_map(entries: tuple[tuple[HostInfo, tuple[TopicPartition, ...]], ...]) -> list:
    """A host map (later key wins) rendered as `[[{host, port}, [tp...]], ...]` sorted by host."""
    merged = dict(entries)
    return [[{"host": h, "port": p}, render_tps(merged[(h, p)])] for h, p in sorted(merged)]

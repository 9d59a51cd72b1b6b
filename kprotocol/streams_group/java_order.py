"""The iteration order of Java's `HashMap`/`HashSet` of strings, where Kafka's messages expose it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def java_string_hash(text: str) -> int:
    """`String.hashCode()` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def hash_order(names: Iterable[str]) -> list[str]:
    """`names` in the order a `HashSet` filled in that order iterates them (no tree bins: < 8 per bucket)."""
    unique = list(dict.fromkeys(names))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = java_string_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(unique, key=bucket)  # stable: insertion order within a bucket


_FIBONACCI = -7046029254386353131  # the multiplier of Kafka's BaseHashTable.findSlot


class TimelineOrder:
    """The iteration order of Kafka's `TimelineHashMap` keyed by strings or ints (its `BaseHashTable`): a slot
    per key from the high bits of a Fibonacci hash, colliding keys kept in insertion order and iterated
    last first; the table doubles when more than 3/4 full (counting the key being added), never shrinks."""

    __slots__ = ("slots",)

    def __init__(self) -> None:
        self.slots: list[list[str | int]] = [[], []]

    def copy(self) -> TimelineOrder:
        other = TimelineOrder()
        other.slots = [list(s) for s in self.slots]
        return other

    def _slot(self, key: str | int) -> int:
        shift = 65 - len(self.slots).bit_length()
        code = java_string_hash(key) if isinstance(key, str) else key  # Integer.hashCode is the value
        return ((code * _FIBONACCI) & 0xFFFFFFFFFFFFFFFF) >> shift

    def add(self, key: str | int) -> None:
        if key in self.slots[self._slot(key)]:
            return
        size = sum(len(s) for s in self.slots)
        if (size + 1) * 0.75 > len(self.slots):
            old, self.slots = self.slots, [[] for _ in range(2 * len(self.slots))]
            for keys in old:
                for k in keys:
                    self.slots[self._slot(k)].append(k)
        self.slots[self._slot(key)].append(key)

    def remove(self, key: str | int) -> None:
        keys = self.slots[self._slot(key)]
        if key in keys:
            keys.remove(key)

    def __bool__(self) -> bool:
        return any(self.slots)

    def __iter__(self) -> Iterator[str | int]:
        return (k for keys in self.slots for k in reversed(keys))

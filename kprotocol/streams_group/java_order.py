"""Java's `HashMap`/`HashSet` of strings and `PriorityQueue`: their orders, where Kafka's messages or its
tie-breaking expose them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any, Generic, TypeVar

from kprotocol.timeline import record

T = TypeVar("T")
_MIN_TREEIFY_CAPACITY = 64  # a smaller HashMap doubles rather than make a tree of a long chain


@lru_cache(maxsize=1 << 16)
def java_string_hash(text: str) -> int:
    """`String.hashCode()` over UTF-16 code units, as a signed 32-bit int (cached: member ids and names recur)."""
    if text.isascii():
        units: Iterable[int] = text.encode()
    else:
        data = text.encode("utf-16-be")
        units = (data[i] << 8 | data[i + 1] for i in range(0, len(data), 2))
    h = 0
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def hash_order(keys: Iterable[str], initial_capacity: int = 16, *, compute_if_absent: bool = False) -> list[str]:
    """The distinct `keys` in the order a `HashMap` (or `HashSet`) made by `new HashMap<>(initial_capacity)` iterates
    them once given them in that order by `put` (or, `compute_if_absent`, by `computeIfAbsent`).

    The table is a power of two at least `initial_capacity`; it doubles when it holds more than 3/4 of it (`put`
    checks after adding a key, `computeIfAbsent` before each call, even for a key it has) and, below 64 buckets,
    when a bucket's chain grows to 9 keys (8 by `computeIfAbsent`). A bucket iterates its keys in insertion order
    (`computeIfAbsent` adds at the head: newest first) through every doubling. Tree bins (a chain that long in a
    table of 64 buckets or more) are not emulated."""
    initial = 1 if initial_capacity <= 1 else 1 << (initial_capacity - 1).bit_length()
    spread: dict[str, int] = {}  # key -> its spread hash, in insertion order
    capacity = 0
    chains: list[int] = []  # keys per bucket

    def grow() -> None:
        nonlocal capacity, chains
        capacity = capacity * 2 if capacity else initial
        chains = [0] * capacity
        for h in spread.values():
            chains[h & (capacity - 1)] += 1

    treeify = 8 if compute_if_absent else 9
    for key in keys:
        if not capacity or (compute_if_absent and len(spread) > capacity * 3 // 4):
            grow()
        if key in spread:
            continue
        h = java_string_hash(key) & 0xFFFFFFFF
        spread[key] = h = h ^ (h >> 16)
        chains[h & (capacity - 1)] += 1
        if chains[h & (capacity - 1)] >= treeify and capacity < _MIN_TREEIFY_CAPACITY:
            grow()
        if not compute_if_absent and len(spread) > capacity * 3 // 4:
            grow()
    newest_first = -1 if compute_if_absent else 1
    order = sorted(enumerate(spread.items()), key=lambda e: (e[1][1] & (capacity - 1), newest_first * e[0]))
    return [key for _, (key, _) in order]


class PriorityQueue(Generic[T]):
    """`java.util.PriorityQueue` ordered by `key` (a comparator comparing keys): the same binary heap, so the same
    element comes out first among equal keys. An element's key is read when it is added: like Java's heap, the
    queue must not hold an element while its key changes (poll it, change it, add it again)."""

    __slots__ = ("_heap", "_keys", "_key")

    def __init__(self, key: Callable[[T], Any], items: Iterable[T] = ()) -> None:
        self._heap: list[T] = []
        self._keys: list[Any] = []
        self._key = key
        for item in items:  # addAll: one offer after the other
            self.add(item)

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, item: T) -> None:
        heap, keys, item_key = self._heap, self._keys, self._key(item)
        k = len(heap)
        heap.append(item)
        keys.append(item_key)
        while k > 0:
            parent = (k - 1) >> 1
            if not item_key < keys[parent]:
                break
            heap[k], keys[k] = heap[parent], keys[parent]
            k = parent
        heap[k], keys[k] = item, item_key

    def poll(self) -> T | None:
        heap, keys = self._heap, self._keys
        if not heap:
            return None
        head, last, last_key = heap[0], heap.pop(), keys.pop()
        n = len(heap)
        if n:
            k, half = 0, n >> 1
            while k < half:
                child = 2 * k + 1
                if child + 1 < n and keys[child + 1] < keys[child]:
                    child += 1
                if not keys[child] < last_key:  # the element is <= the smaller child: it stays here
                    break
                heap[k], keys[k] = heap[child], keys[child]
                k = child
            heap[k], keys[k] = last, last_key
        return head


def _restore_slots(order: TimelineOrder, slots: list[list[str | int]]) -> None:
    order.slots = slots


def _unadd(order: TimelineOrder, keys: list[str | int]) -> None:
    keys.pop()
    order.size -= 1


def _unremove(order: TimelineOrder, keys: list[str | int], index: int, key: str | int) -> None:
    keys.insert(index, key)
    order.size += 1


_FIBONACCI = -7046029254386353131  # the multiplier of Kafka's BaseHashTable.findSlot


class TimelineOrder:
    """The iteration order of Kafka's `TimelineHashMap` keyed by strings or ints (its `BaseHashTable`): a slot
    per key from the high bits of a Fibonacci hash, colliding keys kept in insertion order and iterated
    last first; the table doubles when more than 3/4 full (counting the key being added), never shrinks.
    Every put checks the size first, a put that replaces an existing key too."""

    __slots__ = ("slots", "size")

    def __init__(self) -> None:
        self.slots: list[list[str | int]] = [[], []]
        self.size = 0

    def _slot(self, key: str | int) -> int:
        shift = 65 - len(self.slots).bit_length()
        code = java_string_hash(key) if isinstance(key, str) else key  # Integer.hashCode is the value
        return ((code * _FIBONACCI) & 0xFFFFFFFFFFFFFFFF) >> shift

    def add(self, key: str | int) -> None:
        """A put of `key` (new or not)."""
        if (self.size + 1) * 0.75 > len(self.slots):
            record(_restore_slots, self, self.slots)  # the old lists are left as they were
            old, self.slots = self.slots, [[] for _ in range(2 * len(self.slots))]
            for keys in old:
                for k in keys:
                    self.slots[self._slot(k)].append(k)
        keys = self.slots[self._slot(key)]
        if key not in keys:
            record(_unadd, self, keys)  # journaled first: a change is never left without its undo
            keys.append(key)
            self.size += 1

    def remove(self, key: str | int) -> None:
        keys = self.slots[self._slot(key)]
        if key in keys:
            index = keys.index(key)
            record(_unremove, self, keys, index, key)
            del keys[index]
            self.size -= 1

    def __bool__(self) -> bool:
        return self.size > 0

    def __iter__(self) -> Iterator[str | int]:
        return (k for keys in self.slots for k in reversed(keys))

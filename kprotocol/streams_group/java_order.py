"""The iteration order of Java's `HashMap`/`HashSet` of strings, where Kafka's messages expose it."""

from __future__ import annotations

from collections.abc import Iterable


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

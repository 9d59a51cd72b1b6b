"""Record batch read/write throughput of kprotocol, with kafka-python's reader on the same bytes,
and `__consumer_offsets` record decoding on the bundled fixture.

    python bench/records.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable

from kafka.record import MemoryRecords

from kprotocol.coordinator_topics import decode_record
from kprotocol.records import Compression, Header, Record, read_batches, read_segment, write_batch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "offsets" / "00000000000000000000.log"


def _rates(fns: list[Callable[[], object]], seconds: float, rounds: int = 5) -> list[float]:
    """Calls per second of each function, the best of `rounds` rounds taken in turn, so that a
    noisy neighbour slowing the machine for a while does not decide a comparison."""
    best = [0.0] * len(fns)
    for fn in fns:
        fn()
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            runs, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds / rounds:
                fn()
                runs += 1
            best[i] = max(best[i], runs / elapsed)
    return best


def _kafka_python(data: bytes) -> int:
    records, count = MemoryRecords(data), 0
    while records.has_next():
        count += sum(1 for _ in records.next_batch())
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0)
    seconds = parser.parse_args().seconds
    records = [Record(i, 1_700_000_000_000 + i, b"key-%d" % i, bytes(100 + i % 50),
                      (Header("trace", b"%08d" % i),)) for i in range(1000)]
    print(f"{'case':<34}{'kprotocol read':>16}{'kafka-python':>14}{'kprotocol write':>17}  (records/s)")
    for codec in Compression:
        data = write_batch(records, compression=codec)
        read, theirs, write = (rate * len(records) for rate in _rates([
            lambda: list(read_batches(data)), lambda: _kafka_python(data),
            lambda: write_batch(records, compression=codec)], seconds))
        print(f"{'v2 1000 records, ' + codec.label:<34}{read:>16,.0f}{theirs:>14,.0f}{write:>17,.0f}")
    batches = list(read_segment(FIXTURE))
    pairs = [(r.key, r.value) for b in batches if not b.is_control for r in b.records]
    (rate,) = _rates([lambda: [decode_record(k, v) for k, v in pairs]], seconds)
    rate *= len(pairs)
    print(f"{'__consumer_offsets fixture records':<34}{rate:>16,.0f}  decoded/s with nested userdata")


if __name__ == "__main__":
    main()

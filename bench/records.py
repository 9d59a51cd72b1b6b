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

from kprotocol.coordinator import decode_record
from kprotocol.records import Compression, Header, Record, read_batches, read_segment, write_batch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "offsets" / "00000000000000000000.log"


def _rate(fn: Callable[[], object], seconds: float) -> float:
    fn()
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        runs += 1
    return runs / (time.perf_counter() - start)


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
        read = _rate(lambda: list(read_batches(data)), seconds) * len(records)
        theirs = _rate(lambda: _kafka_python(data), seconds) * len(records)
        write = _rate(lambda: write_batch(records, compression=codec), seconds) * len(records)
        print(f"{'v2 1000 records, ' + codec.label:<34}{read:>16,.0f}{theirs:>14,.0f}{write:>17,.0f}")
    batches = list(read_segment(FIXTURE))
    pairs = [(r.key, r.value) for b in batches if not b.is_control for r in b.records]
    rate = _rate(lambda: [decode_record(k, v) for k, v in pairs], seconds) * len(pairs)
    print(f"{'__consumer_offsets fixture records':<34}{rate:>16,.0f}  decoded/s with nested userdata")


if __name__ == "__main__":
    main()

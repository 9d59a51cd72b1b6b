"""The gateway's state: its coordinator records, kept as a Kafka log segment (`kprotocol offsets decode`
reads it like a `__consumer_offsets` partition)."""

from __future__ import annotations

import time
from pathlib import Path

from kprotocol.records import Record, RecordBatch, read_segment, write_batch
from kprotocol.streams_group.records import CoordinatorRecord

SEGMENT = Path("__consumer_offsets-0") / "00000000000000000000.log"


class StateLog:
    def __init__(self, directory: Path | str) -> None:
        self.path = Path(directory) / SEGMENT
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.next_offset = 0

    def load(self) -> list[tuple[bytes, bytes | None]]:
        """Every record so far, as (key, value) bytes in log order (a torn tail is dropped)."""
        out: list[tuple[bytes, bytes | None]] = []
        if self.path.exists():
            for entry in read_segment(self.path):
                if isinstance(entry, RecordBatch):
                    out += [(r.key, r.value) for r in entry.records if r.key is not None]
                    self.next_offset = entry.last_offset + 1
        return out

    def append(self, records: list[CoordinatorRecord]) -> None:
        if not records:
            return
        now = int(time.time() * 1000)
        batch = []
        for record in records:
            key, value = record.encode()
            batch.append(Record(offset=self.next_offset, timestamp=now, key=key, value=value))
            self.next_offset += 1
        with self.path.open("ab") as log:
            log.write(write_batch(batch))
            log.flush()

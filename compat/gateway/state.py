"""The gateway's state: its coordinator records, kept as a Kafka log segment (`kprotocol offsets decode`
reads it like a `__consumer_offsets` partition) or in a compacted topic of the upstream cluster."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from pathlib import Path

from kprotocol.records import Record, RecordBatch, read_batches, read_segment, write_batch
from kprotocol.registry import message_class
from kprotocol.streams_group.records import CoordinatorRecord

SEGMENT = Path("__consumer_offsets-0") / "00000000000000000000.log"
log = logging.getLogger("kprotocol.gateway")
RETRIABLE = {3, 5, 6}  # unknown topic or partition, leader not available, not leader (a topic just created)


class StateLog:
    """The records in one log segment under `directory`. A write is whole or absent: one that fails
    (ENOSPC, EIO, a read-only disk) is cut off again, so the next one follows the last good batch.
    `append` blocks (encoding, write, fsync): the gateway runs it off the event loop, one at a time."""

    BLOCKING = True

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.path = self.directory / SEGMENT
        self.next_offset = 0
        self._size: int | None = None  # bytes of whole batches in the file

    def load(self) -> list[tuple[bytes, bytes | None]]:
        """Every record so far, as (key, value) bytes in log order. A torn tail (a crash mid-write) is
        cut off quietly; damage before it is skipped with a warning naming its position and what it cost."""
        if self.directory.exists() and not self.directory.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file, not a directory")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab"):
            pass  # writable (a read-only directory fails here, at start, not at the first change)
        out: list[tuple[bytes, bytes | None]] = []
        problems: list[list] = []  # [problem, last offset before it, first offset after it]
        last_offset = -1
        for entry in read_segment(self.path):
            if isinstance(entry, RecordBatch):
                if problems and problems[-1][2] is None:
                    problems[-1][2] = entry.base_offset  # the first offset after the damage
                out += [(r.key, r.value) for r in entry.records if r.key is not None]
                self.next_offset = entry.last_offset + 1
                last_offset = entry.last_offset
            else:
                problems.append([entry, last_offset, None])
        for problem, before, after in problems:
            if after is None and problem.kind == "truncated":  # the tail of an interrupted write
                log.info("state log %s: cut off %d bytes of an unfinished write at position %d (%s)", self.path,
                         problem.length, problem.position, problem.kind)
            else:
                log.warning("state log %s: %d damaged bytes at position %d skipped (%s): records at offsets "
                            "%d..%d dropped, every later record kept", self.path, problem.length,
                            problem.position, problem.message, before + 1,
                            after - 1 if after is not None else before + 1)
        if problems and problems[-1][2] is None:
            with self.path.open("r+b") as handle:
                handle.truncate(problems[-1][0].position)
        self._size = self.path.stat().st_size
        return out

    def append(self, records: list[CoordinatorRecord]) -> None:
        """Write and fsync one batch; on failure the file is cut back and the error raised."""
        if not records:
            return
        now = int(time.time() * 1000)
        batch = [Record(offset=self.next_offset + i, timestamp=now, key=k, value=v)
                 for i, (k, v) in enumerate(r.encode() for r in records)]
        data = write_batch(batch)
        self._known_size()
        try:
            with self.path.open("ab") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError:
            try:
                if self.path.exists() and self.path.stat().st_size > self._size:
                    os.truncate(self.path, self._size)
            except OSError:
                pass  # cut back by the next load, which drops a torn tail
            raise
        self._size += len(data)
        self.next_offset += len(batch)

    def _known_size(self) -> int:
        if self._size is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._size = self.path.stat().st_size if self.path.exists() else 0
        return self._size

    def mark(self) -> tuple[int, int]:
        """Where the log ends now, for `cut_back`."""
        return self._known_size(), self.next_offset

    def cut_back(self, mark: tuple[int, int]) -> None:
        """Drop what was appended since `mark` (a write its writers were told failed)."""
        size, offset = mark
        os.truncate(self.path, size)
        self._size, self.next_offset = size, offset


class StateTopic:
    """The same records in a compacted topic of the upstream cluster (one partition), for gateways
    without a durable local disk. Written with acks=all before anyone hears of a change."""

    PRODUCE_VERSION, FETCH_VERSION = 12, 12  # the last versions that name topics
    MAX_BATCH_BYTES = 1_000_000  # one produce's records, under the broker's default message.max.bytes (1048588)

    def __init__(self, upstream, topic: str) -> None:
        self.upstream, self.topic = upstream, topic
        self.path = f"{topic}-0 on the upstream cluster"

    async def load(self) -> list[tuple[bytes, bytes | None]]:
        create = message_class("CreateTopicsRequest")
        await self.upstream.bootstrap.send(create(topics=[create.CreatableTopic(
            name=self.topic, num_partitions=1, replication_factor=-1,
            configs=[create.CreatableTopicConfig(name="cleanup.policy", value="compact")])], timeout_ms=30_000))
        fetch = message_class("FetchRequest")
        out: list[tuple[bytes, bytes | None]] = []
        offset, deadline = 0, time.monotonic() + 30
        while True:
            leader = await self.upstream.leader(self.topic, 0)  # one broker of several leads the partition
            response = await leader.send(fetch(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20, isolation_level=0, session_epoch=-1,
                topics=[fetch.FetchTopic(topic=self.topic, partitions=[fetch.FetchPartition(
                    partition=0, fetch_offset=offset, partition_max_bytes=8 << 20)])]), self.FETCH_VERSION)
            part = response.responses[0].partitions[0]
            if part.error_code in RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # a new topic's leader is still being elected
                continue
            if part.error_code:
                raise ConnectionError(f"fetching {self.topic}: error {part.error_code}")
            batches = list(read_batches(part.records or b""))
            for batch in batches:
                out += [(r.key, r.value) for r in batch.records if r.key is not None]
                offset = batch.last_offset + 1
            if not batches or offset >= part.high_watermark:
                return out

    async def append(self, records: list[CoordinatorRecord]) -> None:
        if not records:
            return
        batch = await asyncio.to_thread(_encode, records)  # a large group's record: off the event loop
        produce = message_class("ProduceRequest")
        request = produce(acks=-1, timeout_ms=30_000, topic_data=[produce.TopicProduceData(
            name=self.topic, partition_data=[produce.PartitionProduceData(index=0, records=batch)])])
        deadline = time.monotonic() + 30
        while True:
            leader = await self.upstream.leader(self.topic, 0)
            response = await leader.send(request, self.PRODUCE_VERSION)
            error = response.responses[0].partition_responses[0].error_code
            if error in RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            if error:
                raise ConnectionError(f"writing {self.topic}: error {error}")
            return


def _encode(records: list[CoordinatorRecord]) -> bytes:
    """One record batch of `records` (offsets from 0: the broker assigns them)."""
    now = int(time.time() * 1000)
    return write_batch([Record(offset=i, timestamp=now, key=k, value=v)
                        for i, (k, v) in enumerate(r.encode() for r in records)])

"""The gateway's state: its coordinator records, kept as a Kafka log segment (`kprotocol offsets decode`
reads it like a `__consumer_offsets` partition) or in a compacted topic of the upstream cluster."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kprotocol.records import Record, RecordBatch, read_batches, read_segment, write_batch
from kprotocol.registry import message_class
from kprotocol.streams_group.records import CoordinatorRecord

SEGMENT = Path("__consumer_offsets-0") / "00000000000000000000.log"
RETRIABLE = {3, 5, 6}  # unknown topic or partition, leader not available, not leader (a topic just created)


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


class StateTopic:
    """The same records in a compacted topic of the upstream cluster (one partition), for gateways
    without a durable local disk. Written with acks=all before anyone hears of a change."""

    PRODUCE_VERSION, FETCH_VERSION = 12, 12  # the last versions that name topics

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
            response = await self.upstream.bootstrap.send(fetch(
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
        now = int(time.time() * 1000)
        batch = write_batch([Record(offset=i, timestamp=now, key=k, value=v)
                             for i, (k, v) in enumerate(r.encode() for r in records)])
        produce = message_class("ProduceRequest")
        request = produce(acks=-1, timeout_ms=30_000, topic_data=[produce.TopicProduceData(
            name=self.topic, partition_data=[produce.PartitionProduceData(index=0, records=batch)])])
        deadline = time.monotonic() + 30
        while True:
            response = await self.upstream.bootstrap.send(request, self.PRODUCE_VERSION)
            error = response.responses[0].partition_responses[0].error_code
            if error in RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            if error:
                raise ConnectionError(f"writing {self.topic}: error {error}")
            return

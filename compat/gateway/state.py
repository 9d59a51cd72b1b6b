"""The gateway's state: its coordinator records, kept as a Kafka log segment (`kprotocol offsets decode`
reads it like a `__consumer_offsets` partition) or in a compacted topic of the upstream cluster."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import struct
import time
from pathlib import Path
from typing import Any

from kprotocol.coordinator_topics.record_types import record_types
from kprotocol.errors import DecodeError, TruncatedError, error_name
from kprotocol.records import Record, RecordBatch, read_segment, write_batch
from kprotocol.records.reader import batch_extent, read_batch
from kprotocol.registry import message_class
from kprotocol.streams_group import records as rec
from kprotocol.streams_group.records import CoordinatorRecord

SEGMENT = Path("__consumer_offsets-0") / "00000000000000000000.log"
log = logging.getLogger("kprotocol.gateway")
RETRIABLE = {3, 5, 6}  # unknown topic or partition, leader not available, not leader (a topic just created)
OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC, TOPIC_ALREADY_EXISTS = 1, 3, 36
TOPIC_RESOURCE, EARLIEST = 2, -2  # DescribeConfigs' resource type of a topic; ListOffsets' earliest timestamp
# The state topic's configs: compacted, its active segment rolled often enough for compaction to keep it small.
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": str(3_600_000), "segment.bytes": str(64 << 20)}
MAX_SEGMENT_MS, MAX_SEGMENT_BYTES = 86_400_000, 256 << 20  # the most an existing topic may have
MAX_FETCH_BYTES = 1 << 30  # a fetch grown to hold one batch whole, at most


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


class StateTopicError(Exception):
    """The state topic cannot hold the state as it is (wrong configs, cannot be created): one line to fix it."""


class StateTopicGone(ConnectionError):
    """The state topic was deleted while the gateway ran: never re-created behind the operator's back."""


class StateTopic:
    """The same records in a compacted topic of the upstream cluster (one partition), for gateways
    without a durable local disk. Written with acks=all before anyone hears of a change.

    `load` creates the topic with `TOPIC_CONFIGS` when it is missing (never through auto-creation: every
    Metadata asks with allow_auto_topic_creation=false) and refuses one whose configs cannot keep the state
    (`StateTopicError`, one line naming each config and the fix). It reads from the log start offset to the
    last stable offset in fetches of at most `fetch_max_bytes` (a fetch ending mid-batch is fetched on from
    that batch), keeping only each key's latest value as compaction does: memory is bounded by the live state.
    Records it cannot read (a newer gateway's value version, a damaged key) are skipped and reported in one line."""

    PRODUCE_VERSION, FETCH_VERSION = 12, 12  # the last versions that name topics
    MAX_BATCH_BYTES = 1_000_000  # one produce's records, under the broker's default message.max.bytes (1048588)
    FETCH_MAX_BYTES = 8 << 20

    def __init__(self, upstream, topic: str) -> None:
        self.upstream, self.topic = upstream, topic
        self.path = f"{topic}-0 on the upstream cluster"
        self.fetch_max_bytes = self.FETCH_MAX_BYTES
        self.skipped: list[int] = []  # offsets of the records the last load could not read
        self.loaded_bytes = 0  # bytes fetched by the last load
        self._gone = False  # the topic was found deleted (said again when it exists again)

    async def load(self) -> list[tuple[bytes, bytes | None]]:
        await self._ensure_topic()
        return await self._read()

    # --- the topic and its configs -------------------------------------------------------------------------

    async def _metadata(self) -> tuple[Any, int]:
        """The topic's metadata (never auto-created) and the number of brokers in the cluster."""
        request = message_class("MetadataRequest")
        response = await self.upstream.bootstrap.send(request(
            topics=[request.MetadataRequestTopic(name=self.topic)], allow_auto_topic_creation=False))
        return response.topics[0], len(response.brokers)

    async def _ensure_topic(self) -> None:
        deadline, created = time.monotonic() + 30, False
        while True:
            found, brokers = await self._metadata()
            if found.error_code == UNKNOWN_TOPIC and not created:
                await self._create(brokers)
                created = True
                continue
            if (found.error_code in RETRIABLE or not found.partitions) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # a new topic's leader is still being elected
                continue
            if found.error_code:
                raise StateTopicError(f"topic {self.topic}: {error_name(found.error_code)}")
            break
        replication = min((len(p.replica_nodes) for p in found.partitions), default=0)
        await self._check_configs(replication, brokers)

    async def _create(self, brokers: int) -> None:
        replication = min(3, max(brokers, 1))
        configs = {**TOPIC_CONFIGS, "min.insync.replicas": str(max(1, replication - 1))}
        create = message_class("CreateTopicsRequest")
        response = await self.upstream.bootstrap.send(create(topics=[create.CreatableTopic(
            name=self.topic, num_partitions=1, replication_factor=replication, assignments=[],
            configs=[create.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])], timeout_ms=30_000))
        result = response.topics[0]
        if result.error_code not in (0, TOPIC_ALREADY_EXISTS):  # another gateway may have just made it
            raise StateTopicError(f"cannot create topic {self.topic}: {error_name(result.error_code)}"
                                  f"{': ' + result.error_message if result.error_message else ''}")
        if result.error_code == 0:
            log.info("created state topic %s: replication factor %d, %s", self.topic, replication,
                     ", ".join(f"{k}={v}" for k, v in configs.items()))

    async def _check_configs(self, replication: int, brokers: int) -> None:
        describe = message_class("DescribeConfigsRequest")
        response = await self.upstream.bootstrap.send(describe(resources=[describe.DescribeConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=self.topic, configuration_keys=None)],
            include_synonyms=False, include_documentation=False))
        result = response.results[0]
        if result.error_code:
            log.warning("state topic %s: its configs cannot be checked (%s): give the gateway's principal "
                        "DescribeConfigs on it", self.topic, error_name(result.error_code))
            return
        wrong = config_problems({c.name: c.value for c in result.configs}, replication, brokers)
        if not wrong:
            return
        host, port = self.upstream.bootstrap.address
        said = "; ".join(f"{name} is {found}, needs {wanted}" for name, found, wanted in wrong)
        configs = ",".join(f"{name}={wanted}" for name, _, wanted in wrong if name != REPLICATION)
        fix = [f"kafka-configs.sh --bootstrap-server {host}:{port} --alter --entity-type topics "
               f"--entity-name {self.topic} --add-config {configs}"] if configs else []
        fix += [f"kafka-reassign-partitions.sh to {wanted} replicas"
                for name, _, wanted in wrong if name == REPLICATION]
        raise StateTopicError(f"topic {self.topic} cannot keep the state: {said}; fix: {' and '.join(fix)}")

    # --- reading -----------------------------------------------------------------------------------------

    async def _log_start(self, leader: Any) -> int:
        request = message_class("ListOffsetsRequest")
        deadline = time.monotonic() + 30
        while True:
            response = await leader.send(request(replica_id=-1, isolation_level=1, topics=[
                request.ListOffsetsTopic(name=self.topic, partitions=[request.ListOffsetsPartition(
                    partition_index=0, timestamp=EARLIEST, current_leader_epoch=-1)])]))
            part = response.topics[0].partitions[0]
            if part.error_code in RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            if part.error_code:
                raise ConnectionError(f"log start offset of {self.topic}: {error_name(part.error_code)}")
            return part.offset

    async def _read(self) -> list[tuple[bytes, bytes | None]]:
        fetch = message_class("FetchRequest")
        leader = await self.upstream.leader(self.topic, 0)
        latest: dict[bytes, bytes | None] = {}  # each key's latest value, in the order of those values
        self.skipped, reasons = [], []
        aborted: set[int] = set()  # producers whose open transaction was aborted
        offset = start = await self._log_start(leader)
        max_bytes, deadline = self.fetch_max_bytes, time.monotonic() + 30
        self.loaded_bytes = 0
        while True:
            response = await leader.send(fetch(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=1, session_epoch=-1,
                topics=[fetch.FetchTopic(topic=self.topic, partitions=[fetch.FetchPartition(
                    partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])]), self.FETCH_VERSION)
            part = response.responses[0].partitions[0]
            if part.error_code == OFFSET_OUT_OF_RANGE:  # records deleted below it meanwhile
                offset = await self._log_start(leader)
                continue
            if part.error_code in RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            if part.error_code:
                raise ConnectionError(f"fetching {self.topic}: {error_name(part.error_code)}")
            end = part.last_stable_offset if part.last_stable_offset >= 0 else part.high_watermark
            data = part.records or b""
            if offset >= end or not data:
                break
            self.loaded_bytes += len(data)
            pending = sorted(part.aborted_transactions or [], key=lambda a: a.first_offset)
            pos = whole = 0
            while pos < len(data):
                try:
                    size = batch_extent(data, pos)
                except TruncatedError:
                    break  # the fetch ended mid-batch: the next one starts at that batch
                except DecodeError as exc:  # no length to skip by: nothing after it can be read
                    raise StateTopicError(f"topic {self.topic}: undecodable data at offset {offset}: {exc}") from None
                whole += 1
                try:
                    batch = read_batch(data, pos)
                except DecodeError as exc:
                    first, last = _batch_offsets(data, pos)
                    self.skipped += range(first, last + 1)
                    reasons.append(f"offset {first}: {exc}")
                    offset, pos = last + 1, pos + size
                    continue
                while pending and pending[0].first_offset <= batch.last_offset:
                    aborted.add(pending.pop(0).producer_id)
                if batch.is_control:
                    aborted.discard(batch.producer_id)
                elif not (batch.is_transactional and batch.producer_id in aborted):
                    for record in batch.records:
                        self._keep(latest, record, reasons)
                offset, pos = batch.last_offset + 1, pos + size
            if not whole:  # a batch larger than the limit (brokers before KIP-74 do not return it whole)
                if max_bytes >= MAX_FETCH_BYTES:
                    raise StateTopicError(f"topic {self.topic}: a batch at offset {offset} larger than "
                                          f"{MAX_FETCH_BYTES} bytes")
                max_bytes *= 2
        if self.skipped:
            log.warning("state topic %s: %d records the gateway cannot read skipped (first at offsets %s; %s): "
                        "written by a newer gateway or damaged, they stay in the topic", self.topic,
                        len(self.skipped), ", ".join(map(str, self.skipped[:5])), reasons[0])
        log.info("state topic %s: offsets %d..%d read (%d bytes), %d live records", self.topic, start, offset - 1,
                 self.loaded_bytes, len(latest))
        return list(latest.items())

    def _keep(self, latest: dict[bytes, bytes | None], record: Record, reasons: list[str]) -> None:
        """`record` as each key's latest value, if the gateway can read it."""
        problem = unreadable(record.key, record.value)
        if problem is not None:
            self.skipped.append(record.offset)
            reasons.append(f"offset {record.offset}: {problem}")
            return
        latest.pop(record.key, None)  # re-inserted last: the order of a compacted log
        latest[record.key] = record.value

    # --- writing -----------------------------------------------------------------------------------------

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
            if error == UNKNOWN_TOPIC:
                await self._still_there()
            if error in RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                continue
            if error:
                raise ConnectionError(f"writing {self.topic}: {error_name(error)}")
            if self._gone:
                self._gone = False
                log.warning("state topic %s exists again: it holds only the changes from now on; every group's "
                            "state is whole in it again once each group has changed", self.topic)
            return

    async def _still_there(self) -> None:
        """Raises `StateTopicGone` when the topic was deleted: it is not created again (the gateway logs the
        first failing write once, with this reason)."""
        found, _ = await self._metadata()
        if found.error_code != UNKNOWN_TOPIC:
            return  # a partition moving: retried
        self._gone = True
        raise StateTopicGone(f"state topic {self.topic} was deleted; the gateway does not create it again, the "
                             "groups' state lives in this process only: create it, or restart the gateway on a "
                             "state topic")


REPLICATION = "replication factor"


def config_problems(configs: dict[str, str | None], replication: int, brokers: int) -> list[tuple[str, str, str]]:
    """(config, its value, the value it needs) of each config of a state
    topic that cannot keep the state: not compacted only, segments rolled too rarely for compaction to keep it
    small, min.insync.replicas that loses acknowledged writes or refuses every write, too few replicas."""
    wrong: list[tuple[str, str, str]] = []
    policy = configs.get("cleanup.policy") or ""
    if {p.strip() for p in policy.split(",")} != {"compact"}:
        wrong.append(("cleanup.policy", policy, "compact"))
    for name, most in (("segment.ms", MAX_SEGMENT_MS), ("segment.bytes", MAX_SEGMENT_BYTES)):
        value = configs.get(name)
        if value is not None and int(value) > most:
            wrong.append((name, value, TOPIC_CONFIGS[name]))
    isr, wanted = configs.get("min.insync.replicas"), max(1, replication - 1)
    if isr is not None and not min(wanted, 2) <= int(isr) <= replication:
        wrong.append(("min.insync.replicas", isr, str(wanted)))
    if replication < min(3, brokers):
        wrong.append((REPLICATION, str(replication), str(min(3, brokers))))
    return wrong


def unreadable(key: bytes | None, value: bytes | None) -> str | None:
    """Why the gateway cannot read the record (key, value), or None when it can."""
    if key is None or len(key) < 2:
        return f"a key of {len(key or b'')} bytes"
    if record_types().get(int.from_bytes(key[:2], "big")) is None:
        return f"unknown record type {int.from_bytes(key[:2], 'big')}"
    try:
        rec.decode(key, value)
    except (DecodeError, ValueError, KeyError, IndexError, struct.error) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _batch_offsets(data: bytes, pos: int) -> tuple[int, int]:
    """The first and last offsets of the batch at `pos` (from its header, whatever its records hold)."""
    (base,) = struct.unpack_from(">q", data, pos)
    if data[pos + 16] == 2:
        return base, base + struct.unpack_from(">i", data, pos + 23)[0]
    return base, base


def _encode(records: list[CoordinatorRecord]) -> bytes:
    """One record batch of `records` (offsets from 0: the broker assigns them)."""
    now = int(time.time() * 1000)
    return write_batch([Record(offset=i, timestamp=now, key=k, value=v)
                        for i, (k, v) in enumerate(r.encode() for r in records)])

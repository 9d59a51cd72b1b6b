"""Group commit of the state writes: the records of every change waiting while a write is in flight go out in
the next single append (the state log: one write and one fsync; the state topic: one produce, as many as its
batch size limit needs). Records are encoded, written and fsynced off the event loop. Nobody hears of success
before the append is durable; an append that fails or outlasts the time-out fails every change in it (each
writer rolls its group back).

A state-log append that outlasts the time-out is cut back from the file once it returns, so the log never
holds a change its writers were told failed; the next append waits for it. A state-topic produce that outlasts
it is abandoned (its connection closed): it may still land, and the group's later records supersede it
(a group's records carry whole values)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kprotocol.streams_group.records import CoordinatorRecord


log = logging.getLogger("kprotocol.gateway")
RECORD_OVERHEAD = 32  # a record's own bytes in a batch beyond its key and value, at most (varints, attributes)


@dataclass(frozen=True)
class EncodedRecord:
    """A record encoded once, off the event loop: `encode()` gives its bytes as CoordinatorRecord's does."""

    group_id: str
    key: bytes
    value: bytes | None

    def encode(self) -> tuple[bytes, bytes | None]:
        return self.key, self.value

    @property
    def size(self) -> int:
        return len(self.key) + len(self.value or b"") + RECORD_OVERHEAD


def encoded(records: list[CoordinatorRecord]) -> list[EncodedRecord]:
    return [EncodedRecord(r.group_id, *r.encode()) for r in records]


@dataclass(eq=False)
class _Waiting:
    records: list[CoordinatorRecord]
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class GroupCommit:
    """`await write(records)`: returns once they are durable, raises when their append failed or timed out."""

    def __init__(self, state: Any, timeout_s: float = 10.0) -> None:
        self.state, self.timeout_s = state, timeout_s
        self.max_bytes: int | None = getattr(state, "MAX_BATCH_BYTES", None)  # one append's limit, if any
        self.appends = 0  # appends made (one per batch)
        self._queue: list[_Waiting] = []
        self._writer: asyncio.Task | None = None

    async def write(self, records: list[CoordinatorRecord]) -> None:
        waiting = _Waiting(list(records))
        waiting.future.add_done_callback(_retrieve)  # a writer cancelled meanwhile leaves no unread error
        self._queue.append(waiting)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())
        try:
            await asyncio.wait_for(asyncio.shield(waiting.future), self.timeout_s)
        except asyncio.TimeoutError:
            if waiting in self._queue:  # still waiting for an earlier append: never written, nothing to undo
                self._queue.remove(waiting)
                raise
            await waiting.future  # in flight: its append decides, within the time-out of its start

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                records = await asyncio.to_thread(lambda: [encoded(w.records) for w in batch])
            except Exception as exc:  # a record that does not encode: a bug, its writers hear of it
                _settle(batch, exc)
                continue
            started = time.monotonic()
            for chunk in self._chunks(batch, records):
                if time.monotonic() - started > self.timeout_s:  # after an append that took its whole time-out
                    _settle([batch[i] for i in chunk], asyncio.TimeoutError("state write not started in time"))
                    continue
                try:
                    await self._append([r for i in chunk for r in records[i]], [batch[i] for i in chunk])
                except Exception as exc:
                    _settle([batch[i] for i in chunk], exc)
                else:
                    _settle([batch[i] for i in chunk], None)

    def _chunks(self, batch: list[_Waiting], records: list[list[EncodedRecord]]) -> list[list[int]]:
        """The writers of `batch` (indexes) in appends within `max_bytes`; a writer larger than that goes alone."""
        if self.max_bytes is None:
            return [list(range(len(batch)))]
        chunks: list[list[int]] = []
        size = 0
        for i, each in enumerate(records):
            more = sum(r.size for r in each)
            if not chunks or size + more > self.max_bytes:
                chunks.append([])
                size = 0
            chunks[-1].append(i)
            size += more
        return chunks

    async def _append(self, records: list[EncodedRecord], batch: list[_Waiting]) -> None:
        self.appends += 1
        if not getattr(self.state, "BLOCKING", False):
            await asyncio.wait_for(self.state.append(records), self.timeout_s)
            return
        mark = self.state.mark()
        task = asyncio.ensure_future(asyncio.to_thread(self.state.append, records))
        done, _ = await asyncio.wait({task}, timeout=self.timeout_s)
        if task in done:
            task.result()
            return
        _settle(batch, asyncio.TimeoutError(f"state write not done in {self.timeout_s:.1f} s"))
        try:
            await task  # the file is written by one append at a time: the next waits for this one
        except OSError:
            return  # failed and cut back by the append itself
        try:
            self.state.cut_back(mark)
        except OSError as exc:
            log.error("state log %s: an append that outlasted its time-out could not be cut back (%s): a restart "
                      "replays changes its groups were told failed", self.state.path, exc)


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _settle(batch: list[_Waiting], error: BaseException | None) -> None:
    for waiting in batch:
        if not waiting.future.done():
            if error is None:
                waiting.future.set_result(None)
            else:
                waiting.future.set_exception(error)

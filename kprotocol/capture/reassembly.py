"""Offline TCP reassembly of one direction of a connection, sans-IO: segments in, bytes out.

Stream offsets count from the byte after the SYN when the SYN was captured, else from the
lowest sequence number seen first. Retransmissions and overlaps keep the first copy; segments
that arrive early wait until the bytes before them come; a hole that is never filled becomes a
`StreamGap` (when the stream ends, or once more than `max_pending` bytes wait behind it).
Sequence numbers wrap around 2^32; offsets do not.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from kprotocol.capture.segments import FLAG_SYN, TcpSegment

SEQ_SPACE = 1 << 32
DEFAULT_MAX_PENDING = 16 << 20


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """Contiguous bytes at `offset` of the stream, carried by packet `frame` captured at `time`."""

    offset: int
    data: bytes
    frame: int
    time: float


@dataclass(frozen=True, slots=True)
class StreamGap:
    """`length` bytes at `offset` that were never captured."""

    offset: int
    length: int


Event = StreamChunk | StreamGap


class Direction:
    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self.max_pending = max_pending
        self.base: int | None = None   # the sequence number of offset 0
        self.next = 0                  # the offset of the next byte to deliver
        self.pending: dict[int, StreamChunk] = {}
        self.pending_heap: list[int] = []  # the pending offsets, smallest first
        self.pending_bytes = 0

    def _offset(self, seq: int) -> int:
        """The stream offset of `seq`: the one nearest to the next expected byte (wrap-around safe)."""
        assert self.base is not None
        expected = (self.base + self.next) % SEQ_SPACE
        delta = (seq - expected + SEQ_SPACE // 2) % SEQ_SPACE - SEQ_SPACE // 2
        return self.next + delta

    def segment(self, segment: TcpSegment) -> list[Event]:
        """Feed one captured segment of this direction; return what is now contiguous."""
        if self.base is None:
            self.base = (segment.seq + 1) % SEQ_SPACE if segment.flags & FLAG_SYN else segment.seq
            if not segment.payload:
                return []
        if not segment.payload:
            return []
        offset = self._offset(segment.seq)
        chunk = StreamChunk(offset, segment.payload, segment.number, segment.time)
        if offset + len(chunk.data) <= self.next:
            return []  # a retransmission of delivered bytes
        if offset > self.next:
            if offset not in self.pending:  # the first copy wins
                self.pending[offset] = chunk
                heapq.heappush(self.pending_heap, offset)
                self.pending_bytes += len(chunk.data)
            return self._overflow() if self.pending_bytes > self.max_pending else []
        return self._deliver(chunk)

    def _deliver(self, chunk: StreamChunk) -> list[Event]:
        out: list[Event] = []
        while chunk is not None:
            skip = self.next - chunk.offset
            if skip < len(chunk.data):
                data = chunk.data[skip:] if skip > 0 else chunk.data
                out.append(StreamChunk(self.next, data, chunk.frame, chunk.time))
                self.next += len(data)
            chunk = self._take_ready()
        return out

    def _take_ready(self) -> StreamChunk | None:
        """A pending chunk that now starts at or before the next offset, dropping those fully covered."""
        while self.pending_heap and self.pending_heap[0] <= self.next:
            chunk = self.pending.pop(heapq.heappop(self.pending_heap))
            self.pending_bytes -= len(chunk.data)
            if chunk.offset + len(chunk.data) > self.next:
                return chunk
        return None

    def _overflow(self) -> list[Event]:
        """Too much waits behind a hole: give the hole up as a gap and go on."""
        first = self.pending_heap[0]
        gap = StreamGap(self.next, first - self.next)
        self.next = first
        return [gap, *self._deliver(self._take_ready())]  # type: ignore[arg-type]

    def finish(self) -> list[Event]:
        """The stream ended: every hole before bytes still waiting becomes a gap."""
        out: list[Event] = []
        while self.pending:
            out += self._overflow()
        return out

"""Kafka frames out of one reassembled direction of a connection, sans-IO.

Feed `StreamChunk`s and `StreamGap`s (from `reassembly.Direction`) in stream order; get `Frame`s
and `Lost` byte ranges back. The 4-byte size prefixes are followed while the framer is in sync.
A frame that overlaps a gap is returned with `gap=True` and the bytes before the gap, once its
known end has passed (its last packet is the last one carrying any of its bytes); framing goes on
at that end. When a size prefix itself is lost (or the capture starts mid-stream),
the framer resynchronises: it tries each offset with a validator that says whether a complete,
decodable frame starts there (see `exchanges` for the request and response validators).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kprotocol.capture.reassembly import StreamChunk, StreamGap
from kprotocol.runtime.primitives import I32

MAX_FRAME = 100 * 1024 * 1024      # Kafka's default socket.request.max.bytes
MAX_RESYNC_WAIT = 16 * 1024 * 1024  # a candidate frame larger than this is not waited for while resynchronising
VALID, INVALID, MORE = 1, 0, -1     # validator answers: a frame starts here, none does, bytes are missing
EMPTY = "frame of size 0 (no header)"
ZEROS = re.compile(b"\\x00+")

Validator = Callable[[bytearray, int], int]


class Frame(NamedTuple):
    """One size-prefixed frame at stream `offset`. `data` holds the prefix and the body; for a frame
    cut by a gap or by the end of the capture, only the bytes captured before the cut. (A tuple:
    a stream of tiny frames makes millions.)"""

    offset: int
    size: int
    data: bytes
    first: int      # number of the packet carrying the first byte
    last: int       # number of the packet carrying the last captured byte
    time: float     # capture time of that last packet
    gap: bool = False
    truncated: bool = False
    after_resync: bool = False


@dataclass(frozen=True, slots=True)
class Lost:
    """`length` bytes at `offset` that belong to no frame found (skipped to resynchronise), or
    `count` frames of size 0 in a row (`EMPTY`), the last at `last_offset`."""

    offset: int
    length: int
    reason: str
    count: int = 1
    last_offset: int | None = None


class Framer:
    def __init__(self, validate: Validator, synced: bool = True, max_frame: int = MAX_FRAME) -> None:
        self.validate = validate
        self.synced = synced
        self.max_frame = max_frame
        self.buf = bytearray()
        self.start = 0                 # stream offset of buf[0]
        self.marks: deque[tuple[int, int, float]] = deque()  # (end offset, packet number, time) per chunk
        self.skip_to: int | None = None  # the known end of a frame cut by a gap
        self.gapped: Frame | None = None  # that frame, returned once the bytes up to its end have passed
        self.resynced = not synced
        self.lost = 0                  # bytes dropped while resynchronising, not yet reported

    def chunk(self, chunk: StreamChunk) -> list[Frame | Lost]:
        data, offset = chunk.data, chunk.offset
        out: list[Frame | Lost] = []
        if self.skip_to is not None:
            if offset < self.skip_to:
                self._carried(chunk)
            if offset + len(data) <= self.skip_to:
                return out
            data, offset, self.skip_to = data[self.skip_to - offset:], self.skip_to, None
            out += self._release()
        if not self.buf:
            self.start = offset
        self.buf += data
        self.marks.append((offset + len(data), chunk.frame, chunk.time))
        return out + self._frames()

    def gap(self, gap: StreamGap) -> list[Frame | Lost]:
        out: list[Frame | Lost] = []
        gap_end = gap.offset + gap.length
        if self.skip_to is not None:
            if gap_end <= self.skip_to:
                return out
            self.skip_to = None
            out += self._release()
            self._unsync()
        elif self.synced and len(self.buf) >= 4:
            frame = self._partial(gap=True)
            frame_end = frame.offset + 4 + frame.size
            if gap_end < frame_end:  # later packets carry the rest of it
                self.skip_to, self.gapped = frame_end, frame
            else:
                out.append(frame)
                if gap_end > frame_end:
                    self._unsync()
        else:
            self._drop(len(self.buf))
            out += self._report_lost("lost with a gap in the capture")
            self._unsync()
        self.buf.clear()
        self.marks.clear()
        self.start = gap_end
        return out

    def finish(self) -> list[Frame | Lost]:
        """The stream ended: a partial frame is returned truncated, unframed bytes as lost."""
        out = self._release()
        if self.synced and len(self.buf) >= 4:
            out.append(self._partial(truncated=True))
            self.buf.clear()
        else:
            self._drop(len(self.buf))
        out += self._report_lost("not framed when the capture ended")
        return out

    # ------------------------------------------------------------------ internals

    def _carried(self, chunk: StreamChunk) -> None:
        """`chunk` carries bytes of the frame cut by a gap: its packet is that frame's last so far."""
        if self.gapped is not None:
            self.gapped = self.gapped._replace(last=chunk.frame, time=chunk.time)

    def _release(self) -> list[Frame | Lost]:
        frame, self.gapped = self.gapped, None
        return [] if frame is None else [frame]

    def _unsync(self) -> None:
        self.synced = False
        self.resynced = True

    def _frames(self) -> list[Frame | Lost]:
        out: list[Frame | Lost] = []
        buf = self.buf
        while True:
            if self.synced:
                if len(buf) < 4:
                    return out
                (size,) = I32.unpack_from(buf, 0)
                if size <= 0 or size > self.max_frame:
                    if size:
                        self._unsync()
                    else:
                        out.append(self._empty())
                    continue
                if len(buf) < 4 + size:
                    return out
                out.append(self._cut(4 + size))
            elif not self._resync(out):
                return out

    def _empty(self) -> Lost:
        """The frames of size 0 the buffer starts with, at once (a stream of zeros is millions)."""
        count = (ZEROS.match(self.buf).end()) // 4  # type: ignore[union-attr]
        start, length = self.start, 4 * count
        del self.buf[:length]
        self.start += length
        marks = self.marks
        while marks and marks[0][0] <= self.start:
            marks.popleft()
        self.resynced = False
        return Lost(start, length, EMPTY, count, self.start - 4)

    def _resync(self, out: list[Frame | Lost]) -> bool:
        """Scan for the next valid frame start; True when found (the buffer then starts with it)."""
        buf, pos = self.buf, 0
        while len(buf) - pos >= 4:
            verdict = self.validate(buf, pos)
            if verdict == MORE and len(buf) - pos < MAX_RESYNC_WAIT:
                break
            if verdict == VALID:
                self._drop(pos)
                out += self._report_lost("skipped to resynchronise")
                self.synced = True
                return True
            pos += 1
        self._drop(pos)
        return False

    def _drop(self, count: int) -> None:
        if count <= 0:
            return
        del self.buf[:count]
        self.start += count
        self.lost += count
        marks = self.marks
        while marks and marks[0][0] <= self.start:
            marks.popleft()

    def _report_lost(self, reason: str) -> list[Frame | Lost]:
        if not self.lost:
            return []
        lost = Lost(self.start - self.lost, self.lost, reason)
        self.lost = 0
        return [lost]

    def _packets(self, end: int) -> tuple[int, int, float]:
        """First and last packet numbers of the bytes before stream offset `end`, and the last one's time."""
        marks = self.marks
        mark = marks[0]
        if mark[0] > end:  # within the first packet
            return mark[1], mark[1], mark[2]
        first = mark[1]
        while marks[0][0] < end:
            marks.popleft()
        _, last, time = marks[0]
        if marks[0][0] == end:
            marks.popleft()
        return first, last, time

    def _cut(self, length: int) -> Frame:
        first, last, time = self._packets(self.start + length)
        frame = Frame(self.start, length - 4, bytes(self.buf[:length]), first, last, time,
                      after_resync=self.resynced)
        del self.buf[:length]
        self.start += length
        self.resynced = False
        return frame

    def _partial(self, gap: bool = False, truncated: bool = False) -> Frame:
        (size,) = I32.unpack_from(self.buf, 0)
        first, last, time = self._packets(self.start + len(self.buf))
        frame = Frame(self.start, size, bytes(self.buf), first, last, time, gap=gap, truncated=truncated,
                      after_resync=self.resynced)
        self.resynced = False
        return frame

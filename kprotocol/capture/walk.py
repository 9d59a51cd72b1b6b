"""TCP segments of a capture file: the compiled walk over its regular packets, the Python readers for
everything else.

    walk = Walk(stream, problems)        # or Walk(stream, problems, split)
    for item in walk:                    # TcpSegment or SegmentProblem, in capture order
        ...
    walk.packets                         # packets read so far

The result is `tcp_segments(read_packets(stream, problems, split))`, item for item. `_walk.walk` runs
over a buffer of the file and stops before any block it does not take as regular (section and
interface blocks, damage, a packet that is not plain TCP); the Python readers (files.py and
segments.py, the reference) read that one block, and the walk goes on after it. Streams that cannot
seek, and installs without the compiled extension, are read by the Python readers alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

from kprotocol.capture.files import CaptureError, Split, open_capture, packets_from
from kprotocol.capture.segments import SegmentProblem, TcpSegment, tcp_segments

try:
    if os.environ.get("KPROTOCOL_PURE_PYTHON"):
        raise ImportError("disabled by KPROTOCOL_PURE_PYTHON")
    from kprotocol.capture import _walk
except ImportError:  # pure-Python installs read captures with the Python readers
    _walk = None  # type: ignore[assignment]

CHUNK = 4 << 20


class Walk:
    """The TCP segments of a capture stream (or of one `split` of it); iterate once."""

    def __init__(self, stream: BinaryIO, problems: list[CaptureError] | None = None,
                 split: Split | None = None) -> None:
        self.stream = stream
        self.problems = problems
        self.end = None if split is None else split.end
        self.first = 0 if split is None else split.number
        self.kind, self.at = open_capture(stream, split)

    @property
    def packets(self) -> int:
        return self.at.number - self.first

    def __iter__(self) -> Iterator[TcpSegment | SegmentProblem]:
        if _walk is None or not self.stream.seekable():
            return tcp_segments(packets_from(self.stream, self.kind, self.at, self.end, self.problems))
        return self._walk()

    def _walk(self) -> Iterator[TcpSegment | SegmentProblem]:
        stream, kind, at, end = self.stream, self.kind, self.at, self.end
        big = (kind.order if kind.pcap else at.order) == ">"
        buffer, base = b"", at.offset  # buffer holds the file's bytes from offset base
        at.pending = b""  # the Python readers read it again after a seek
        eof = False
        while end is None or at.offset < end:
            stop = 1 << 62 if end is None else end - base
            interfaces = tuple(at.interfaces)
            segments, position, at.number, last, status = _walk.walk(
                buffer, at.offset - base, stop, kind.pcap, big, kind.link_type, kind.unit, kind.limit,
                interfaces, at.number, TcpSegment)
            at.offset = base + position
            if last is not None:
                at.last_time = last
            yield from segments
            if status == _walk.MORE and not eof:
                stream.seek(base + len(buffer))
                more = stream.read(max(CHUNK, len(buffer) - (at.offset - base)))
                buffer, base, eof = buffer[at.offset - base:] + more, at.offset, not more
                continue
            if status == _walk.DONE:
                break
            start = at.offset  # irregular, or the truncated end: the Python readers take one block
            stream.seek(start)
            yield from tcp_segments(packets_from(stream, kind, at, start + 1, self.problems))
            if at.offset == start:
                break  # nothing more to read
            big = (kind.order if kind.pcap else at.order) == ">"
            buffer, base, eof = b"", at.offset, False


__all__ = ["Walk"]

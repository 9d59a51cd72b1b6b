"""TCP segments of a capture file: the compiled walk over its regular packets, the Python readers for
everything else.

    walk = Walk(stream, problems)        # or Walk(stream, problems, split)
    for item in walk:                    # TcpSegment or SegmentProblem, in capture order
        ...
    walk.packets                         # packets read so far
    Walk(stream, problems, sharing=sharing(k, n, ports))  # process k of n: its connections' segments

The result is `tcp_segments(read_packets(stream, problems, split))`, item for item. `_walk.walk` runs
over a buffer of the file (the file mapped into memory, or read in chunks) and stops before any block
it does not take as regular (section and interface blocks, damage, a packet that is not plain TCP);
the Python readers (files.py and segments.py, the reference) read that one block, and the walk goes
on after it. Streams that cannot seek, and installs without the compiled extension, are read by the
Python readers alone.

`sharing(k, n, ports)` shares the Kafka connections of a capture out among n processes that each
read it whole: a port pair (either direction) seen for the first time goes to the process with the
fewest payload bytes so far. Every process counts every segment alike, so all agree without talking,
and the compiled walk drops the other processes' segments before they become Python objects.
"""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from kprotocol.capture.files import PAST_END, CaptureError, Packet, Split, open_capture, packets_from
from kprotocol.capture.segments import SegmentProblem, TcpSegment, tcp_segments

try:
    if os.environ.get("KPROTOCOL_PURE_PYTHON"):
        raise ImportError("disabled by KPROTOCOL_PURE_PYTHON")
    from kprotocol.capture import _walk
except ImportError:  # pure-Python installs read captures with the Python readers
    _walk = None  # type: ignore[assignment]

CHUNK = 4 << 20
MAX_SHARES = 64
OPENING_WEIGHT = 4096  # bytes a port pair counts for when it is given to a process


class Sharing:
    """Process k of n's share of a capture's Kafka connections (`_walk.Sharing`, in Python)."""

    def __init__(self, k: int, n: int, ports: Iterable[int]) -> None:
        if not 0 <= k < n <= MAX_SHARES:
            raise ValueError(f"sharing: process k of n needs 0 <= k < n <= {MAX_SHARES}")
        self.k, self.n, self.ports = k, n, frozenset(ports)
        self.loads = [0] * n
        self.owners: dict[tuple[int, int], int] = {}

    def keeps(self, sport: int, dport: int, length: int) -> bool:
        """Whether a segment between these ports is this process's, counting its payload `length`."""
        if sport not in self.ports and dport not in self.ports:
            return False
        pair = (sport, dport) if sport < dport else (dport, sport)
        owner = self.owners.get(pair)
        if owner is None:
            owner = self.owners[pair] = min(range(self.n), key=self.loads.__getitem__)
            self.loads[owner] += OPENING_WEIGHT
        self.loads[owner] += length
        return owner == self.k


def sharing(k: int, n: int, ports: Iterable[int]) -> Sharing:
    """Process k of n's share of the connections on `ports` (compiled where the extension is)."""
    return Sharing(k, n, ports) if _walk is None else _walk.Sharing(k, n, tuple(ports))  # type: ignore[return-value]


def shared(items: Iterable[TcpSegment | SegmentProblem], share: Sharing) -> Iterator[TcpSegment | SegmentProblem]:
    """The items that are `share`'s: its segments, and every problem."""
    for item in items:
        if isinstance(item, SegmentProblem) or share.keeps(item.sport, item.dport, len(item.payload)):
            yield item


class Walk:
    """The TCP segments of a capture stream (or of one `split` of it); iterate once."""

    def __init__(self, stream: BinaryIO, problems: list[CaptureError] | None = None,
                 split: Split | None = None, sharing: Sharing | None = None) -> None:
        self.stream = stream
        self.problems = problems
        self.sharing = sharing
        self.end = None if split is None else split.end
        self.first = 0 if split is None else split.number
        self.kind, self.at = open_capture(stream, split)

    @property
    def packets(self) -> int:
        return self.at.number - self.first

    def __iter__(self) -> Iterator[TcpSegment | SegmentProblem]:
        if _walk is None or not self.stream.seekable():
            return self._python(packets_from(self.stream, self.kind, self.at, self.end, self.problems))
        return self._walk()

    def _python(self, packets: Iterable[Packet]) -> Iterator[TcpSegment | SegmentProblem]:
        items = tcp_segments(packets)
        return items if self.sharing is None else shared(items, self.sharing)

    def _walk(self) -> Iterator[TcpSegment | SegmentProblem]:
        stream, kind, at, end = self.stream, self.kind, self.at, self.end
        big = (kind.order if kind.pcap else at.order) == ">"
        mapped = _mapped(stream)
        try:
            # buffer holds the file's bytes from offset base: all of them when the file is mapped
            buffer, base, eof = (mapped, 0, True) if mapped is not None else (b"", at.offset, False)
            at.pending = b""  # the Python readers read it again after a seek
            while end is None or at.offset < end:
                stop = at.offset - base + CHUNK  # a call gives at most about CHUNK bytes of segments
                if end is not None:
                    stop = min(stop, end - base)
                segments, position, at.number, last, status = _walk.walk(
                    buffer, at.offset - base, stop, kind.pcap, big, kind.link_type, kind.unit, kind.limit,
                    at.interfaces, at.number, TcpSegment, self.sharing)
                at.offset = base + position
                if last is not None:
                    at.last_time = last
                yield from segments
                if status == _walk.DONE:
                    continue
                if status == _walk.MORE and not eof:
                    stream.seek(base + len(buffer))
                    more = stream.read(max(CHUNK, len(buffer) - (at.offset - base)))
                    buffer, base, eof = buffer[at.offset - base:] + more, at.offset, not more
                    continue
                start = at.offset  # irregular, or the truncated end: the Python readers take one block
                stream.seek(start)
                yield from self._python(packets_from(stream, kind, at, start + 1, self.problems))
                if at.offset in (start, PAST_END):
                    break  # nothing more to read, or nothing plausible after damage
                big = (kind.order if kind.pcap else at.order) == ">"
                if mapped is None:
                    buffer, base, eof = b"", at.offset, False
        finally:
            if mapped is not None:
                mapped.close()


def _mapped(stream: BinaryIO) -> mmap.mmap | None:
    """The whole file behind `stream`, mapped read-only (no copy through read buffers); None when it
    cannot be (not a file, empty)."""
    try:
        mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    if hasattr(mmap, "MADV_SEQUENTIAL"):
        mapped.madvise(mmap.MADV_SEQUENTIAL)
    return mapped


__all__ = ["Sharing", "Walk", "shared", "sharing"]

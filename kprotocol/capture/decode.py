"""`decode_capture`: a pcap/pcapng file to paired Kafka exchanges, streamed in bounded memory.

    result = decode_capture("x.pcapng", ports=(9092,))
    for exchange in result:        # ordered by connection (first packet), then request order
        exchange.to_json()
    result.orphans, result.problems  # complete once iteration has ended

Exchanges of the connection that started first are yielded as they complete; those of later
connections wait until every earlier connection has ended, in memory up to `SPILL_AFTER` per
connection and in a temporary file beyond that, so memory does not grow with the capture.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

from kprotocol.capture.exchanges import Connection, Exchange, Orphan, StreamProblem
from kprotocol.capture.files import CaptureError
from kprotocol.capture.segments import FLAG_SYN, SegmentProblem, TcpSegment
from kprotocol.capture.walk import Walk, shared, sharing

DEFAULT_PORTS = (9092,)
SPILL_AFTER = 512
CLOSE_AFTER = 64  # packets to wait after a close for late (reordered) segments of the connection
ACK = 0x10
DETECT_APIS = (18, 3)  # ApiVersions, Metadata: what every client sends first

Key = tuple[str, int, str, int]


@dataclass(frozen=True, slots=True)
class PacketProblem:
    """A packet or a stretch of the file that could not be read."""

    packet: int | None
    reason: str
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"packet": self.packet, "offset": self.offset, "reason": self.reason}


Problem = PacketProblem | StreamProblem


@dataclass(slots=True)
class _Pending:
    """Exchanges of a connection that is not first in line yet."""

    connection: Connection
    held: list[Exchange] = field(default_factory=list)
    spill: IO[bytes] | None = None
    confirmed: bool = True  # with detection: the connection proved to carry Kafka
    closed_at: int | None = None  # the packet that closed it
    finished: bool = False
    rejected: bool = False  # with detection: its first exchange was not Kafka

    def hold(self, exchanges: list[Exchange]) -> None:
        self.held += exchanges
        if len(self.held) > SPILL_AFTER:
            if self.spill is None:
                self.spill = tempfile.TemporaryFile()
            for exchange in self.held:  # frames only: decoding them again is cheaper than pickling bodies
                pickle.dump(exchange.without_bodies(), self.spill, pickle.HIGHEST_PROTOCOL)
            self.held.clear()

    def release(self) -> Iterator[Exchange]:
        if self.spill is not None:
            self.spill.seek(0)
            while True:
                try:
                    exchange = pickle.load(self.spill)
                except EOFError:
                    break
                yield exchange.redecoded()
            self.spill.close()
            self.spill = None
        yield from self.held
        self.held.clear()


class CaptureDecode:
    """The exchanges of one capture; iterate once. `orphans` and `problems` fill in as it goes.

    `share=(k, n)` decodes only the connections of process k of n reading the same capture (see
    `kprotocol.capture.walk.sharing`: the processes agree without talking); `releasing` is the first
    packet of the connection whose exchanges `marked()` is giving, so the outputs of all n merge
    into one process's order. The packet-level problems are process 0's."""

    def __init__(self, source: str | os.PathLike[str] | BinaryIO | Iterable[TcpSegment | SegmentProblem],
                 ports: Iterable[int] = DEFAULT_PORTS, detect: bool = False, share: tuple[int, int] = (0, 1)) -> None:
        if detect and share[1] > 1:
            raise ValueError("detection decides connections by their content: it cannot be shared")
        self.source = source
        self.ports = frozenset(ports)
        self.detect = detect
        self.share = share
        self.orphans: list[Orphan] = []
        self.problems: list[Problem] = []
        self.packets = 0
        self.connections = 0
        self.releasing = -1

    def __iter__(self) -> Iterator[Exchange]:
        for exchange in self.marked():
            if exchange is not None:
                yield exchange

    def marked(self) -> Iterator[Exchange | None]:
        """The exchanges with a None after the last exchange of each connection this process decodes."""
        if isinstance(self.source, (str, os.PathLike)):
            with open(self.source, "rb", buffering=1 << 20) as stream:
                yield from self._decode(self._segments(stream))
        elif hasattr(self.source, "read"):
            yield from self._decode(self._segments(self.source))  # type: ignore[arg-type]
        elif self.share[1] > 1:
            yield from self._decode(shared(self.source, sharing(*self.share, self.ports)))  # type: ignore[arg-type]
        else:
            yield from self._decode(self.source)  # type: ignore[arg-type]

    def _decode(self, items: Iterable[TcpSegment | SegmentProblem]) -> Iterator[Exchange | None]:
        table: dict[Key, _Pending] = {}     # both orientations of each open connection's key
        ended: set[Key] = set()
        line: deque[_Pending] = deque()     # connections in first-packet order
        closing: deque[_Pending] = deque()  # closed (FIN both ways, or RST), finished a little later
        for item in items:
            # Finish connections closed more than CLOSE_AFTER packets ago, whatever the packets between
            # (a process decoding a share of the connections does not see all of them).
            while closing and closing[0].closed_at + CLOSE_AFTER < item.number:  # type: ignore[operator]
                done = closing.popleft()
                self._finish(done)
                for k in ((*done.connection.client, *done.connection.server),
                          (*done.connection.server, *done.connection.client)):
                    if table.get(k) is done:
                        del table[k]
                    ended.add(k)
            if isinstance(item, SegmentProblem):
                if self.share[0] == 0:
                    self.problems.append(PacketProblem(item.number, item.message))
                continue
            key = (item.src, item.sport, item.dst, item.dport)
            pending = table.get(key)
            if pending is not None and pending.connection.closed and _opens(item):  # the 4-tuple reused
                self._finish(pending)
                pending = None
            if pending is None:
                if key in ended and not _opens(item):
                    continue
                pending = self._open(item)
                if pending is None:
                    continue
                table[key] = table[(item.dst, item.dport, item.src, item.sport)] = pending
                line.append(pending)
            if not pending.rejected:
                self._collect(pending, pending.connection.segment(item))
            if pending.connection.closed and pending.closed_at is None:
                pending.closed_at = item.number
                closing.append(pending)
            head = line[0] if line else None
            if head is not None and (head.held or head.finished or head.spill is not None):
                yield from self._flush(line)
        for pending in line:
            self._finish(pending)
        yield from self._flush(line)

    def _finish(self, pending: _Pending) -> None:
        if not pending.finished:
            pending.finished = True
            pending.connection.closed = True
            if not pending.rejected:
                self._collect(pending, pending.connection.finish())

    def _segments(self, stream: BinaryIO) -> Iterator[TcpSegment | SegmentProblem]:
        damage: list[CaptureError] = []
        walk = None
        try:
            walk = Walk(stream, damage, sharing=sharing(*self.share, self.ports) if self.share[1] > 1 else None)
            yield from walk
        except CaptureError as exc:
            damage.append(exc)
        self.packets = walk.packets if walk is not None else 0
        if self.share[0] == 0:
            self.problems += (PacketProblem(None, str(exc), exc.offset) for exc in damage)

    def _open(self, segment: TcpSegment) -> _Pending | None:
        syn = _opens(segment)
        if syn or segment.dport in self.ports:
            client, server = (segment.src, segment.sport), (segment.dst, segment.dport)
        elif segment.sport in self.ports:
            client, server = (segment.dst, segment.dport), (segment.src, segment.sport)
        elif self.detect and segment.flags & FLAG_SYN:  # a SYN-ACK: the sender is the server
            client, server = (segment.dst, segment.dport), (segment.src, segment.sport)
        else:
            return None
        if server[1] not in self.ports and not self.detect:
            return None
        self.connections += 1
        pending = _Pending(Connection(client, server, segment.number, synced=bool(segment.flags & FLAG_SYN)))
        pending.confirmed = server[1] in self.ports
        return pending

    def _collect(self, pending: _Pending, exchanges: list[Exchange]) -> None:
        if not pending.confirmed and exchanges:
            first = exchanges[0]
            if first.api_key in DETECT_APIS and first.request is not None and first.response is not None:
                pending.confirmed = True
            else:
                pending.rejected = True  # not Kafka: stop decoding it
                pending.connection.closed = True
                pending.held.clear()
                return
        pending.hold(exchanges)

    def _flush(self, line: deque[_Pending]) -> Iterator[Exchange | None]:
        while line:
            head = line[0]
            self.releasing = head.connection.first_packet
            if head.confirmed:
                yield from head.release()
            if not head.finished:
                return
            line.popleft()
            if head.confirmed:
                self.orphans += head.connection.orphans
                self.problems += head.connection.problems
            yield None


def _opens(segment: TcpSegment) -> bool:
    """A SYN without ACK: the client opening a connection."""
    return bool(segment.flags & FLAG_SYN) and not segment.flags & ACK


def decode_segments(segments: Iterable[TcpSegment | SegmentProblem], ports: Iterable[int] = DEFAULT_PORTS,
                    *, detect: bool = False) -> CaptureDecode:
    """The exchanges of TCP segments in capture order (for a caller that reads packets itself, such
    as a Spark task holding the segments of a few connections)."""
    return CaptureDecode(segments, ports, detect)


def decode_capture(source: str | os.PathLike[str] | BinaryIO, ports: Iterable[int] = DEFAULT_PORTS,
                   *, detect: bool = False) -> CaptureDecode:
    """The Kafka exchanges of a capture file (a path or a binary file object).

    `ports` are the broker ports carrying Kafka; with `detect=True`, connections on any other port
    whose SYN was captured are decoded too when their first exchange is a valid ApiVersions or
    Metadata request with its response."""
    return CaptureDecode(source, ports, detect)


__all__ = ["CaptureDecode", "PacketProblem", "decode_capture", "decode_segments"]

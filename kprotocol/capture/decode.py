"""`decode_capture`: a pcap/pcapng file to paired Kafka exchanges, streamed in bounded memory.

    result = decode_capture("x.pcapng", ports=(9092,))
    for exchange in result:        # ordered by connection (first packet), then request order
        exchange.to_json()
    result.orphans, result.problems  # complete once iteration has ended

Exchanges of the connection that started first are yielded as they complete; those of later
connections wait until every earlier connection has ended, in memory up to `SPILL_AFTER` per
connection and in a temporary file beyond that, so memory does not grow with the capture.

A connection is settled (its waiting requests told they got no response, its state dropped) once
it is closed, once it has been idle for `IDLE` seconds of capture time (a broker closes idle
connections after 10 minutes), or when more than `MAX_OPEN` connections are open, the least
recently active first; packets that come later for it start a new connection, found again by
resynchronising. A settled connection waiting its turn in line keeps only its exchanges, orphans
and problems, one that has none of them nothing at all.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections import OrderedDict, deque
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
MAX_OPEN = 10_000  # connections decoded at once; past that, the least recently active one is settled
IDLE = 600.0  # seconds of capture time without a packet that settle a connection (Kafka's connections.max.idle.ms)
ENDED = 10_000  # closed connections remembered, whose late segments are dropped instead of opening one
ACK = 0x10
DETECT_APIS = (18, 3)  # ApiVersions, Metadata: what every client sends first

Key = tuple[str, int, str, int]


@dataclass(frozen=True, slots=True)
class PacketProblem:
    """A packet or a stretch of the file that could not be read. Packets that could not be read for
    one reason are one problem: the first `packet`, `count` of them, the last `last_packet`."""

    packet: int | None
    reason: str
    offset: int | None = None
    count: int = 1
    last_packet: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"packet": self.packet, "offset": self.offset, "reason": self.reason}
        if self.count > 1:
            doc["count"] = self.count
            doc["lastPacket"] = self.last_packet
        return doc


Problem = PacketProblem | StreamProblem


@dataclass(slots=True, eq=False)
class _Pending:
    """Exchanges of a connection that is not first in line yet."""

    connection: Connection | None  # None once finished: its orphans and problems are kept here
    first_packet: int
    held: list[Exchange] = field(default_factory=list)
    spill: IO[bytes] | None = None
    confirmed: bool = True  # with detection: the connection proved to carry Kafka
    closed_at: int | None = None  # the packet that closed it
    finished: bool = False
    rejected: bool = False  # with detection: its first exchange was not Kafka
    last_time: float = 0.0  # capture time of its latest packet
    orphans: list[Orphan] = field(default_factory=list)
    problems: list[StreamProblem] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Finished with nothing to give."""
        return self.finished and not (self.held or self.spill or self.orphans or self.problems)

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
        self._repeats: dict[int, tuple[int, int]] = {}  # packet problems: index -> (count, last packet)

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
        self._table: dict[Key, _Pending] = {}     # both orientations of each open connection's key
        self._ended: OrderedDict[Key, None] = OrderedDict()  # the last ENDED closed connections' keys
        self._recent: OrderedDict[int, _Pending] = OrderedDict()  # open connections, least recently active first
        table, recent = self._table, self._recent
        line: deque[_Pending] = deque()     # connections in first-packet order
        closing: deque[_Pending] = deque()  # closed (FIN both ways, or RST), finished a little later
        kinds: dict[str, int] = {}          # packet problems: the index of the first of each kind
        for item in items:
            # Finish connections closed more than CLOSE_AFTER packets ago, whatever the packets between
            # (a process decoding a share of the connections does not see all of them).
            while closing and closing[0].closed_at + CLOSE_AFTER < item.number:  # type: ignore[operator]
                self._settle(closing.popleft(), closed=True)
            if isinstance(item, SegmentProblem):
                if self.share[0] == 0:
                    self._packet_problem(item, kinds)
                continue
            while recent:
                oldest = next(iter(recent.values()))
                if len(recent) <= MAX_OPEN and oldest.last_time + IDLE >= item.time:
                    break
                self._settle(oldest, closed=False)
            key = (item.src, item.sport, item.dst, item.dport)
            pending = table.get(key)
            if pending is not None and pending.connection.closed and _opens(item):  # type: ignore[union-attr]
                self._settle(pending, closed=False)  # the 4-tuple reused
                pending = None
            if pending is None:
                if key in self._ended and not _opens(item):
                    continue
                pending = self._open(item)
                if pending is None:
                    continue
                table[key] = table[(item.dst, item.dport, item.src, item.sport)] = pending
                line.append(pending)
            connection = pending.connection
            assert connection is not None
            pending.last_time = item.time
            recent[id(pending)] = pending
            recent.move_to_end(id(pending))
            if not pending.rejected:
                self._collect(pending, connection.segment(item))
            if connection.closed and pending.closed_at is None:
                pending.closed_at = item.number
                closing.append(pending)
            head = line[0] if line else None
            if head is not None and (head.held or head.finished or head.spill is not None):
                yield from self._flush(line)
        for pending in line:
            self._finish(pending)
        yield from self._flush(line)
        for index, (count, last) in self._repeats.items():
            first = self.problems[index]
            self.problems[index] = PacketProblem(first.packet, first.reason, first.offset, count, last)  # type: ignore[union-attr]

    def _packet_problem(self, item: SegmentProblem, kinds: dict[str, int]) -> None:
        """Record a packet that could not be read, counted into the first of its kind."""
        kind = item.message.replace(f"packet {item.number} ", "packet ", 1)
        index = kinds.get(kind)
        if index is None:
            kinds[kind] = len(self.problems)
            self.problems.append(PacketProblem(item.number, item.message))
        else:
            count, _ = self._repeats.get(index, (1, 0))
            self._repeats[index] = (count + 1, item.number)

    def _settle(self, pending: _Pending, closed: bool) -> None:
        """Finish a connection and forget it (a closed one's keys are remembered a while)."""
        connection = pending.connection
        self._recent.pop(id(pending), None)
        if connection is None:
            return
        self._finish(pending)
        for key in ((*connection.client, *connection.server), (*connection.server, *connection.client)):
            if self._table.get(key) is pending:
                del self._table[key]
            if closed:
                self._ended[key] = None
                self._ended.move_to_end(key)
        while len(self._ended) > 2 * ENDED:
            self._ended.popitem(last=False)

    def _finish(self, pending: _Pending) -> None:
        if not pending.finished:
            pending.finished = True
            connection = pending.connection
            assert connection is not None
            connection.closed = True
            if not pending.rejected:
                self._collect(pending, connection.finish())
            if pending.confirmed:
                pending.orphans, pending.problems = connection.orphans, connection.problems
            pending.connection = None

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
        pending = _Pending(Connection(client, server, segment.number, synced=bool(segment.flags & FLAG_SYN)),
                           segment.number)
        pending.confirmed = server[1] in self.ports
        return pending

    def _collect(self, pending: _Pending, exchanges: list[Exchange]) -> None:
        if not pending.confirmed and exchanges:
            first = exchanges[0]
            if first.api_key in DETECT_APIS and first.request is not None and first.response is not None:
                pending.confirmed = True
            else:
                pending.rejected = True  # not Kafka: stop decoding it
                pending.connection.closed = True  # type: ignore[union-attr]
                pending.held.clear()
                return
        pending.hold(exchanges)

    def _flush(self, line: deque[_Pending]) -> Iterator[Exchange | None]:
        while line:
            head = line[0]
            if head.empty and self.releasing != head.first_packet:  # nothing given, nothing to give: no end mark
                line.popleft()
                continue
            self.releasing = head.first_packet
            if head.confirmed:
                yield from head.release()
            if not head.finished:
                return
            line.popleft()
            if head.confirmed:
                self.orphans += head.orphans
                self.problems += head.problems
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

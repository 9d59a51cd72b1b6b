"""Rows of the `exchanges` and `problems` tables out of packet captures, in two Spark stages.

1. `keyed_segments`: a task reads one split of a capture (`kprotocol.capture.files.plan_splits`
   cuts files at block boundaries) and keys each TCP segment on a Kafka port by its connection,
   the segments of a connection in one split packed into one bytes value (`pack`): the shuffle then
   moves bytes, not millions of pickled tuples.
2. `connection_rows`: after the shuffle, a task holds every segment of a few connections, puts
   them back in capture order and decodes them with `kprotocol.capture.decode_segments`.

So one huge capture uses every core, and no connection is ever cut between tasks. When a capture
needs only a few tasks (`owned_rows`), each of them reads it whole instead and decodes its share of
the connections (`CaptureDecode(share=...)`, as `capture decode -j N` does): reading is a few
percent of decoding, and nothing crosses a shuffle.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from kprotocol.capture.decode import CaptureDecode, PacketProblem, decode_segments
from kprotocol.capture.exchanges import FLAGS, Exchange, error_codes
from kprotocol.errors import error_name
from kprotocol.capture.files import CaptureError, Split, plan_splits
from kprotocol.capture.segments import SegmentProblem, TcpSegment
from kprotocol.capture.walk import Walk
from kprotocol.pipeline.files import InputFile, filesystem
from kprotocol.pipeline.tables import json_bytes

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap")
PROBLEMS = "problems"  # the second part of a key that carries a problem row instead of a segment
PACKED = struct.Struct("<QdIIBBI")  # number, time, seq, ack, flags, from the second end, payload length

Ends = tuple[tuple[str, int], tuple[str, int]]


def pack(ends: Ends, segments: Iterable[TcpSegment]) -> bytes:
    """Segments between the two `ends` of a connection as one bytes value (read back by `unpack`)."""
    parts: list[bytes] = []
    for s in segments:
        parts.append(PACKED.pack(s.number, s.time, s.seq, s.ack, s.flags, (s.src, s.sport) != ends[0],
                                 len(s.payload)))
        parts.append(s.payload)
    return b"".join(parts)


def unpack(ends: Ends, packed: bytes) -> Iterator[TcpSegment]:
    (first, first_port), (second, second_port) = ends
    pos, size = 0, PACKED.size
    while pos < len(packed):
        number, time, seq, ack, flags, reverse, length = PACKED.unpack_from(packed, pos)
        pos += size
        if reverse:
            yield TcpSegment(number, time, second, second_port, first, first_port, seq, ack, flags,
                             packed[pos:pos + length])
        else:
            yield TcpSegment(number, time, first, first_port, second, second_port, seq, ack, flags,
                             packed[pos:pos + length])
        pos += length


@contextmanager
def _open(uri: str) -> Iterator[BinaryIO]:
    fsys, path = filesystem(uri)
    if "://" not in uri:  # a local file: Python's buffered reader
        with open(path, "rb", buffering=1 << 20) as handle:
            yield handle
    else:
        with fsys.open_input_file(path) as handle:
            yield handle  # type: ignore[misc]


def plan_capture(file: InputFile, split_bytes: int) -> list[tuple[str, Split]]:
    """The splits of one capture file (one, if it is not a readable capture: its task reports why)."""
    with _open(file.uri) as handle:
        try:
            return [(file.uri, split) for split in plan_splits(handle, split_bytes)]
        except CaptureError:
            return [(file.uri, Split(0, None, 0))]


def _problem(uri: str, kind: str, position: int | None, length: int | None, message: str) -> dict[str, Any]:
    return {"source": uri, "partition": None, "position": position, "length": length, "kind": kind,
            "offset": None, "message": message}


def keyed_segments(uri: str, split: Split, ports: frozenset[int]) -> Iterator[tuple[Any, Any]]:
    """(connection key, its segments in this split, packed) for each connection on a Kafka port, and
    (problems key, problem rows): one shuffle record per connection and split, not per packet."""
    damage: list[CaptureError] = []
    keyed: dict[Any, list[Any]] = {}
    with _open(uri) as handle:
        try:
            for item in Walk(handle, damage, split):
                if isinstance(item, SegmentProblem):
                    keyed.setdefault((uri, PROBLEMS), []).append(
                        _problem(uri, "packet", item.number, None, item.message))
                elif item.sport in ports or item.dport in ports:
                    ends = sorted([(item.src, item.sport), (item.dst, item.dport)])
                    keyed.setdefault((uri, *ends[0], *ends[1]), []).append(item)
        except CaptureError as exc:
            damage.append(exc)
    for exc in damage:
        keyed.setdefault((uri, PROBLEMS), []).append(_problem(uri, "capture", exc.offset, None, str(exc)))
    for key, items in keyed.items():
        yield key, items if key[1] == PROBLEMS else pack((key[1:3], key[3:5]), items)


def exchange_row(uri: str, exchange: Exchange, credentials: bool = False) -> dict[str, Any]:
    """The exchanges table's row of an exchange (SASL credentials redacted unless `credentials`)."""
    doc = exchange.to_json(records=False, credentials=credentials)  # records are summarised in record_batches_json
    batches = doc.get("recordBatches", [])
    request, response = exchange.request, exchange.response
    groups = sorted(exchange.group_ids())
    member = getattr(request, "member_id", None) or getattr(response, "member_id", None) or None
    response_frame = exchange.response_frame
    latency = None if response_frame is None else (response_frame.time - exchange.request_frame.time) * 1000
    codes = sorted(error_codes(response))
    return {
        "source": uri, "conn": exchange.conn, "correlation_id": exchange.correlation_id,
        "api_key": exchange.api_key, "api_name": exchange.api_name, "api_version": exchange.api_version,
        "client_id": exchange.client_id, "group": groups[0] if groups else None, "member_id": member,
        "request_time": doc["requestTime"], "response_time": doc.get("responseTime"), "latency_ms": latency,
        "request_size": exchange.request_frame.size, "response_size": doc.get("responseSize"),
        "request_first_packet": exchange.request_frame.first, "request_last_packet": exchange.request_frame.last,
        "response_first_packet": None if response_frame is None else response_frame.first,
        "response_last_packet": None if response_frame is None else response_frame.last,
        "error_codes": codes, "error_names": [error_name(c) for c in codes],
        "flags": [f for f in FLAGS if doc.get(f)],
        "no_response_reason": exchange.no_response, "request_error": exchange.request_error,
        "response_error": exchange.response_error,
        "request_json": json_bytes(doc["request"]), "response_json": json_bytes(doc.get("response")),
        "record_batches_json": json_bytes(batches) if batches else None,
    }


def connection_rows(key: Any, parts: Iterable[Any], ports: frozenset[int],
                    credentials: bool = False) -> tuple[list[dict], list[dict], int]:
    """(exchange rows, problem rows, connections with exchanges) of one connection key's segments
    (packed, one value per split; a reused 4-tuple may carry several connections), or of a key's
    problems."""
    if key[1] == PROBLEMS:
        return [], [row for part in parts for row in part], 0
    ends = (key[1:3], key[3:5])
    segments = sorted(segment for part in parts for segment in unpack(ends, part))  # by packet number
    decoded = Decoded(key[0], decode_segments(segments, ports), credentials=credentials)
    rows = list(decoded.exchanges())
    return rows, decoded.problems, decoded.connections


def owned_rows(uri: str, share: tuple[int, int], ports: frozenset[int],
               exchange: Callable[[dict[str, Any]], None], credentials: bool = False) -> tuple[list[dict], int]:
    """Pass `exchange` the rows of the connections that task k of n (`share`) decodes, reading the
    whole capture, as they come; return the problem rows (the capture-level ones are task 0's) and
    the number of connections with exchanges."""
    with _open(uri) as handle:
        decoded = Decoded(uri, CaptureDecode(handle, ports, share=share), credentials=credentials)
        for row in decoded.exchanges():
            exchange(row)
    return decoded.problems, decoded.connections


@dataclass
class Decoded:
    """The rows of one decode, as they come: `problems` and `connections` are complete once
    `exchanges()` is exhausted."""

    uri: str
    capture: CaptureDecode
    problems: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0  # with at least one exchange
    credentials: bool = False  # SASL credentials shown (redacted by default)

    def exchanges(self) -> Iterator[dict[str, Any]]:
        seen = False
        for exchange in self.capture.marked():
            if exchange is None:  # the end of one of its connections
                self.connections, seen = self.connections + seen, False
            else:
                yield exchange_row(self.uri, exchange, self.credentials)
                seen = True
        self.problems = _problems(self.uri, self.capture)


def _problems(uri: str, capture: CaptureDecode) -> list[dict[str, Any]]:
    """Problem rows of a decode: unreadable packets and file damage, orphan responses, stream problems."""
    found = [_problem(uri, "orphan response", o.frame.first, o.frame.size + 4,
                      f"{o.conn}: response with correlation id {o.correlation_id} has no captured request")
             for o in capture.orphans]
    for p in capture.problems:
        if isinstance(p, PacketProblem):
            found.append(_problem(uri, "packet", p.packet, None, p.reason) if p.packet is not None
                         else _problem(uri, "capture", p.offset, None, p.reason))
        else:
            found.append(_problem(uri, "stream", p.offset, p.length, f"{p.conn} {p.direction}: {p.reason}"))
    return found

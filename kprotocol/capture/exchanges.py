"""One Kafka connection of a capture, sans-IO: TCP segments in, paired request/response exchanges out.

Each direction is reassembled (`reassembly`), framed (`framer`) and decoded with the generated
codec (`kprotocol.framing`). Responses are paired with requests by correlation id. A broker answers
the requests of one connection in order, so when a response arrives every earlier request still
waiting is known to have lost its response.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from kprotocol.capture.credentials import REDACTED, SASL_AUTHENTICATE, redact_request
from kprotocol.capture.framer import INVALID, MORE, VALID, Framer, Frame, Lost
from kprotocol.capture.payloads import annotate
from kprotocol.capture.reassembly import Direction, StreamChunk
from kprotocol.capture.segments import FLAG_FIN, FLAG_RST, TcpSegment
from kprotocol.errors import DecodeError
from kprotocol.framing import decode_request, decode_response, request_header_version, response_header_version
from kprotocol.group_payloads import Protocol, protocol_of
from kprotocol.records.summary import records_summary
from kprotocol.registry import api_classes
from kprotocol.runtime.struct import Message

PRODUCE, JOIN_GROUP, SYNC_GROUP = 0, 11, 14
REQUEST_HEAD = struct.Struct(">ihhi")    # size, api key, api version, correlation id
RESPONSE_HEAD = struct.Struct(">ii")     # size, correlation id
MAX_EARLY = 64  # responses kept waiting for a request captured after them (packets out of order)
MAX_ORPHANS = 64  # orphan responses kept one by one per connection; later ones are counted
ORPHAN_BYTES = 64  # bytes of an orphan response's frame kept (what its JSON shows)
ACKS_0, REQUEST_INCOMPLETE, LOST_IN_GAP, NOT_CAPTURED = (
    "acks=0", "request incomplete", "lost: gap in the server stream", "not captured")


def endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _versions(api_key: int) -> tuple[int, int] | None:
    try:
        return api_classes(api_key)[0].valid_versions
    except KeyError:
        return None


def _client_id(data: bytes, api_key: int, api_version: int) -> str | None:
    """The client id of a request header (a nullable int16-length string after the correlation id)."""
    try:
        if request_header_version(api_key, api_version) == 0 or len(data) < 14:
            return None
    except KeyError:
        return None
    (length,) = struct.unpack_from(">h", data, 12)
    if length < 0 or len(data) < 14 + length:
        return None
    return data[14:14 + length].decode("utf-8", "replace")


@dataclass(slots=True)
class Exchange:
    """A request and its response (when captured), with where and when they were seen."""

    conn: str
    correlation_id: int
    api_key: int
    api_version: int
    client_id: str | None
    request_frame: Frame
    request: Message | None = None
    request_error: str | None = None
    response_frame: Frame | None = None
    response: Message | None = None
    response_error: str | None = None
    no_response: str | None = None
    protocol: Protocol = (None, None)
    server_gap: bool = False   # the server stream lost bytes while this request waited

    def without_bodies(self) -> Exchange:
        """A copy that keeps the frames but not the decoded bodies: cheap to pickle (see `redecoded`)."""
        return replace(self, request=None, response=None)

    def redecoded(self) -> Exchange:
        """The bodies decoded again from the frames (after `without_bodies`)."""
        if self.request is None and self.request_error is None and not (
                self.request_frame.gap or self.request_frame.truncated):
            self.request = decode_request(self.request_frame.data)[1]
        frame = self.response_frame
        if frame is not None and self.response is None and self.response_error is None and not (
                frame.gap or frame.truncated):
            self.response = decode_response(frame.data, self.api_key, self.api_version)[1]
        return self

    @property
    def done(self) -> bool:
        return self.response_frame is not None or self.no_response is not None

    @property
    def api_name(self) -> str | None:
        try:
            return api_classes(self.api_key)[0].__name__.removesuffix("Request")
        except KeyError:
            return None

    def group_ids(self) -> set[str]:
        """The groups this exchange is about, from the fields its request has at its version."""
        request, out = self.request, set()
        if request is None:
            return out
        present = _present(type(request), self.api_version)
        for name in ("group_id", "groups", "group_ids", "coordinator_keys"):
            value = getattr(request, name) if name in present else None
            if isinstance(value, str):
                out.add(value)
            elif isinstance(value, (list, tuple)):
                out.update(v if isinstance(v, str) else getattr(v, "group_id", None) for v in value)
        if self.api_key == 10 and "key" in present and getattr(request, "key_type", 0) == 0:
            out.add(request.key)  # type: ignore[attr-defined]
        out.discard(None)  # type: ignore[arg-type]
        return out

    def to_json(self, records: bool = True, credentials: bool = False) -> dict[str, Any]:
        """The exchange as one JSON object; with `records=False` the raw records fields are null
        (their summaries are under `recordBatches` either way). A SASL login's credentials are
        redacted (`kprotocol.capture.credentials`) unless `credentials`."""
        request = self.request_frame
        doc: dict[str, Any] = {"conn": self.conn, "correlationId": self.correlation_id, "apiKey": self.api_key,
                               "apiVersion": self.api_version}
        name = self.api_name
        if name is not None:
            doc["apiName"] = name
        doc["clientId"] = self.client_id
        try:
            doc["requestHeaderVersion"] = request_header_version(self.api_key, self.api_version)
            if self.response_frame is not None:
                doc["responseHeaderVersion"] = response_header_version(self.api_key, self.api_version)
        except KeyError:
            pass
        batches: list[dict[str, Any]] = []
        doc["request"] = self._body(self.request, "/request", batches, records)
        if not credentials:
            doc["request"] = redact_request(self.api_key, doc["request"])
        if self.response_frame is not None:
            doc["response"] = self._body(self.response, "/response", batches, records)
        _frame_keys(doc, "request", request)
        if self.request_error is not None:
            doc["requestError"] = self.request_error
            doc["requestHex"] = request.data.hex() if credentials or self.api_key != SASL_AUTHENTICATE else REDACTED
        if self.response_frame is not None:
            _frame_keys(doc, "response", self.response_frame)
            if self.response_error is not None:
                doc["responseError"] = self.response_error
                doc["responseHex"] = self.response_frame.data.hex()
        if self.no_response is not None:
            doc["noResponse"] = True
            doc["noResponseReason"] = self.no_response
        if batches:
            doc["recordBatches"] = batches
        return doc

    def _body(self, message: Message | None, path: str, batches: list[dict[str, Any]],
              records: bool) -> dict[str, Any] | None:
        if message is None:
            return None
        body = annotate(message.to_json(self.api_version, records), message, self.protocol)
        _records(message, body, path, batches)
        return body


def error_codes(message: Message | None, out: dict[int, int] | None = None) -> dict[int, int]:
    """Every non-zero `errorCode` field of a decoded message, counted (top level and nested; not the
    codes inside decoded userdata, which are not Kafka's)."""
    out = {} if out is None else out
    pending: list[Any] = [] if message is None else [message]
    while pending:
        node = pending.pop()
        codes, below = _ERROR_FIELDS.get(type(node)) or _error_fields(type(node))
        for index in codes:
            if code := node[index]:
                out[code] = out.get(code, 0) + 1
        for index, many in below:
            if (value := node[index]) is not None:
                if many:
                    pending += value
                else:
                    pending.append(value)
    return out


_PRESENT: dict[tuple[type, int], frozenset[str]] = {}


def _present(cls: type, version: int) -> frozenset[str]:
    """The names of the fields `cls` has at `version`."""
    names = _PRESENT.get((cls, version))
    if names is None:
        spec = cls._spec  # type: ignore[attr-defined]
        names = _PRESENT[(cls, version)] = frozenset(f.name for f in spec if f.present(version))
    return names


_ERROR_FIELDS: dict[type, tuple[tuple[int, ...], tuple[tuple[int, bool], ...]]] = {}


def _error_fields(cls: type) -> tuple[tuple[int, ...], tuple[tuple[int, bool], ...]]:
    """(indexes of the errorCode fields, (index, is an array) of the struct fields with some below) of `cls`."""
    codes, below = [], []
    for index, spec in enumerate(cls._spec):  # type: ignore[attr-defined]
        if spec.json_name == "errorCode" and spec.type == "int16":
            codes.append(index)
        elif spec.struct is not None and any(_ERROR_FIELDS.get(spec.struct) or _error_fields(spec.struct)):
            below.append((index, spec.type == "array"))
    _ERROR_FIELDS[cls] = plan = (tuple(codes), tuple(below))
    return plan


FLAGS = ("requestGap", "responseGap", "requestTruncated", "responseTruncated", "requestAfterResync",
         "responseAfterResync", "noResponse")


def _frame_keys(doc: dict[str, Any], side: str, frame: Frame) -> None:
    doc[f"{side}Frames"] = [frame.first, frame.last]
    doc[f"{side}Time"] = round(frame.time, 6)
    doc[f"{side}Size"] = frame.size
    if frame.gap:
        doc[f"{side}Gap"] = True
    if frame.truncated:
        doc[f"{side}Truncated"] = True
    if frame.after_resync:
        doc[f"{side}AfterResync"] = True


_RECORDS_PATHS: dict[type, list[tuple[int, str, str]]] = {}


def _records_fields(cls: type) -> list[tuple[int, str, str]]:
    """(index, key, type) of the fields of `cls` that are records or hold records somewhere below."""
    fields = _RECORDS_PATHS.get(cls)
    if fields is None:
        fields = []
        for index, spec in enumerate(cls._spec):  # type: ignore[attr-defined]
            if spec.type == "records" or (spec.struct is not None and _records_fields(spec.struct)):
                fields.append((index, spec.json_name, spec.type))
        _RECORDS_PATHS[cls] = fields
    return fields


def _records(obj: Message, doc: dict[str, Any], path: str, out: list[dict[str, Any]]) -> None:
    """Summaries of every non-null records field under `obj`, with JSON pointers into the exchange."""
    for index, key, kind in _records_fields(type(obj)):
        value = obj[index]
        if value is None or key not in doc:
            continue
        here = f"{path}/{key}"
        if kind == "records":
            out.append({"path": here, **records_summary(value)})
        elif kind == "struct":
            _records(value, doc[key], here, out)
        else:
            for position, (item, item_doc) in enumerate(zip(value, doc[key])):
                _records(item, item_doc, f"{here}/{position}", out)


@dataclass(frozen=True, slots=True)
class Orphan:
    """A response whose request was not captured; past `MAX_ORPHANS` on one connection, the last one
    kept stands for the rest too (`count` responses, the last at stream offset `last_offset`)."""

    conn: str
    correlation_id: int | None
    frame: Frame
    count: int = 1
    last_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"conn": self.conn, "correlationId": self.correlation_id}
        _frame_keys(doc, "response", self.frame)
        doc["responseHex"] = self.frame.data[:64].hex()
        if self.count > 1:
            doc["count"] = self.count
            doc["lastOffset"] = self.last_offset
        return doc


@dataclass(frozen=True, slots=True)
class StreamProblem:
    """Bytes of one direction that were never captured or could not be framed. Repeated problems of
    one reason on one direction are one problem: the first at `offset`, `count` of them, the last
    at `last_offset`, `length` bytes in all."""

    conn: str
    direction: str
    offset: int
    length: int
    reason: str
    count: int = 1
    last_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"conn": self.conn, "direction": self.direction, "offset": self.offset,
                               "length": self.length, "reason": self.reason}
        if self.count > 1:
            doc["count"] = self.count
            doc["lastOffset"] = self.last_offset
        return doc


def _ended(buf: bytearray, pos: int) -> int:
    """The validator of a connection that has ended: nothing more is framed."""
    return INVALID


class Connection:
    """Both directions of one TCP connection, from the client's and the server's side.

    `synced`: the SYN was captured, so both streams start at a frame boundary; otherwise the
    framers resynchronise by validation first."""

    def __init__(self, client: tuple[str, int], server: tuple[str, int], first_packet: int, synced: bool) -> None:
        self.client, self.server, self.first_packet = client, server, first_packet
        self.name = f"{endpoint(*client)}->{endpoint(*server)}"
        self.up, self.down = Direction(), Direction()
        self.requests = Framer(self._valid_request, synced)
        self.responses = Framer(self._valid_response, synced)
        self.inflight: dict[int, Exchange] = {}
        self.queue: deque[Exchange] = deque()   # requests in order, until complete
        self.groups: dict[str, Protocol] = {}
        self.early: dict[int, Frame] = {}       # responses captured before their request
        self._orphans: list[Orphan] = []
        self._more_orphans = [0, 0]  # orphans past MAX_ORPHANS: how many, the last one's offset
        self._problems: list[StreamProblem] = []
        self._kinds: dict[tuple[str, str], list[int]] = {}  # (direction, reason) -> [index, count, length, last]
        self.fins = 0
        self.closed = False

    # -------------------------------------------------------------- segments in, exchanges out

    def segment(self, segment: TcpSegment) -> list[Exchange]:
        """Feed one segment of this connection; return the exchanges now complete, in request order."""
        if (segment.src, segment.sport) == self.client:
            for event in self.up.segment(segment):
                self._request_events(self.requests.chunk(event) if isinstance(event, StreamChunk)
                                     else self._gap("request", self.requests, event))
        else:
            for event in self.down.segment(segment):
                self._response_events(self.responses.chunk(event) if isinstance(event, StreamChunk)
                                      else self._gap("response", self.responses, event))
        if segment.flags & FLAG_RST:  # closed after a RST, or a FIN each way
            self.closed = True
        elif segment.flags & FLAG_FIN:
            self.fins += 1
            self.closed = self.fins >= 2
        return self._ready()

    def stream_bytes(self, from_client: bool, offset: int, data: bytes) -> list[Exchange]:
        """Feed bytes of one direction's stream directly (no TCP underneath: recorded byte streams)."""
        chunk = StreamChunk(offset, data, 0, 0.0)
        if from_client:
            self._request_events(self.requests.chunk(chunk))
        else:
            self._response_events(self.responses.chunk(chunk))
        return self._ready()

    def finish(self) -> list[Exchange]:
        """The connection closed or the capture ended: settle every request still waiting."""
        for event in self.up.finish():
            self._request_events(self.requests.chunk(event) if isinstance(event, StreamChunk)
                                 else self._gap("request", self.requests, event))
        self._request_events(self.requests.finish())
        for event in self.down.finish():
            self._response_events(self.responses.chunk(event) if isinstance(event, StreamChunk)
                                  else self._gap("response", self.responses, event))
        self._response_events(self.responses.finish())
        for exchange in self.queue:
            if not exchange.done:
                exchange.no_response = self._why_no_response(exchange)
        self.inflight.clear()
        for correlation_id, frame in self.early.items():
            self._orphan(correlation_id, frame)
        self.early.clear()
        self.requests.validate = self.responses.validate = _ended  # no cycle through the framers left to collect
        return self._ready()

    @property
    def problems(self) -> list[StreamProblem]:
        """The stream problems so far, one per direction and reason (with how many and the last one)."""
        out = self._problems[:]
        for index, count, length, last in self._kinds.values():
            if count > 1:
                out[index] = replace(out[index], count=count, length=length, last_offset=last)
        return out

    @property
    def orphans(self) -> list[Orphan]:
        """The orphan responses so far: the first MAX_ORPHANS, the last of them counting the rest."""
        count, last = self._more_orphans
        if not count:
            return self._orphans[:]
        kept = self._orphans[-1]
        return [*self._orphans[:-1], replace(kept, count=kept.count + count, last_offset=last)]

    def _problem(self, direction: str, offset: int, length: int, reason: str, count: int = 1,
                 last_offset: int | None = None) -> None:
        """Record a problem, counted into the first one of its direction and reason."""
        kind = self._kinds.get((direction, reason))
        if kind is None:
            self._kinds[(direction, reason)] = [len(self._problems), count, length,
                                                offset if last_offset is None else last_offset]
            self._problems.append(StreamProblem(self.name, direction, offset, length, reason))
        else:
            kind[1] += count
            kind[2] += length
            kind[3] = offset if last_offset is None else last_offset

    def _orphan(self, correlation_id: int | None, frame: Frame) -> None:
        """Keep an orphan response (its first bytes), counted into the last one kept past MAX_ORPHANS."""
        if len(self._orphans) < MAX_ORPHANS:
            if len(frame.data) > ORPHAN_BYTES:
                frame = frame._replace(data=frame.data[:ORPHAN_BYTES])
            self._orphans.append(Orphan(self.name, correlation_id, frame))
        else:
            self._more_orphans[0] += 1
            self._more_orphans[1] = frame.offset

    def _gap(self, direction: str, framer: Framer, gap: Any) -> list[Frame | Lost]:
        self._problem(direction, gap.offset, gap.length, "not captured (a gap)")
        if direction == "response":  # whatever was waiting may have had its response in the gap
            self._server_lost()
        return framer.gap(gap)

    def _ready(self) -> list[Exchange]:
        out = []
        while self.queue and self.queue[0].done:
            out.append(self.queue.popleft())
        return out

    @staticmethod
    def _why_no_response(exchange: Exchange) -> str:
        if exchange.request_frame.gap or exchange.request_frame.truncated:
            return REQUEST_INCOMPLETE
        return LOST_IN_GAP if exchange.server_gap else NOT_CAPTURED

    # -------------------------------------------------------------- requests

    def _request_events(self, events: list[Frame | Lost]) -> None:
        for event in events:
            if isinstance(event, Lost):
                self._problem("request", event.offset, event.length, event.reason, event.count, event.last_offset)
            else:
                self._request(event)

    def _request(self, frame: Frame) -> None:
        data = frame.data
        if len(data) < 12:
            self._problem("request", frame.offset, len(data), "request frame too short for its header")
            return
        _, api_key, api_version, correlation_id = REQUEST_HEAD.unpack_from(data)
        exchange = Exchange(self.name, correlation_id, api_key, api_version,
                            _client_id(data, api_key, api_version), frame)
        if not (frame.gap or frame.truncated):
            try:
                _, exchange.request = decode_request(data)
            except DecodeError as exc:
                exchange.request_error = f"{type(exc).__name__}: {exc}"
        message = exchange.request
        if message is not None and api_key in (JOIN_GROUP, SYNC_GROUP) and getattr(message, "group_id", None):
            exchange.protocol = protocol_of(message, self.groups.get(message.group_id, (None, None)))  # type: ignore[attr-defined]
            self.groups[message.group_id] = exchange.protocol  # type: ignore[attr-defined]
        if message is not None and api_key == PRODUCE and message.acks == 0:  # type: ignore[attr-defined]
            exchange.no_response = ACKS_0
        else:
            self.inflight[correlation_id] = exchange
        self.queue.append(exchange)
        early = self.early.pop(correlation_id, None)
        if early is not None:
            self._response(early)

    def _valid_request(self, buf: bytearray, pos: int) -> int:
        if len(buf) - pos < 12:
            return MORE
        size, api_key, api_version, _ = REQUEST_HEAD.unpack_from(buf, pos)
        versions = _versions(api_key)
        if size < 8 or size > self.requests.max_frame or versions is None or not (
                versions[0] <= api_version <= versions[1]):
            return INVALID
        if len(buf) - pos < 4 + size:
            return MORE
        try:
            decode_request(bytes(buf[pos:pos + 4 + size]))
        except DecodeError:
            return INVALID
        return VALID

    # -------------------------------------------------------------- responses

    def _response_events(self, events: list[Frame | Lost]) -> None:
        for event in events:
            if isinstance(event, Lost):
                self._problem("response", event.offset, event.length, event.reason, event.count, event.last_offset)
                self._server_lost()
            else:
                self._response(event)

    def _server_lost(self) -> None:
        for exchange in self.inflight.values():
            exchange.server_gap = True

    def _response(self, frame: Frame) -> None:
        if len(frame.data) < 8:
            self._problem("response", frame.offset, len(frame.data), "response frame too short for its header")
            self._server_lost()
            return
        (_, correlation_id) = RESPONSE_HEAD.unpack_from(frame.data)
        exchange = self.inflight.pop(correlation_id, None)
        if exchange is None:
            if len(self.early) < MAX_EARLY and correlation_id not in self.early:
                self.early[correlation_id] = frame  # its request may come in a later packet
            else:
                self._orphan(correlation_id, frame)
            return
        exchange.response_frame = frame
        if not (frame.gap or frame.truncated):
            try:
                _, exchange.response = decode_response(frame.data, exchange.api_key, exchange.api_version)
            except (DecodeError, KeyError) as exc:
                exchange.response_error = f"{type(exc).__name__}: {exc}"
        if exchange.response is not None and exchange.api_key in (JOIN_GROUP, SYNC_GROUP):
            group_id = getattr(exchange.request, "group_id", None)
            if group_id:
                exchange.protocol = protocol_of(exchange.response, self.groups.get(group_id, exchange.protocol))
                self.groups[group_id] = exchange.protocol
        for earlier in self.queue:  # a broker answers in order: earlier requests lost their responses
            if earlier is exchange:
                break
            if not earlier.done:
                earlier.no_response = self._why_no_response(earlier)
                self.inflight.pop(earlier.correlation_id, None)

    def _valid_response(self, buf: bytearray, pos: int) -> int:
        if not self.inflight:
            return INVALID
        if len(buf) - pos < 8:
            return MORE
        size, correlation_id = RESPONSE_HEAD.unpack_from(buf, pos)
        exchange = self.inflight.get(correlation_id)
        if exchange is None or size < 4 or size > self.responses.max_frame:
            return INVALID
        if len(buf) - pos < 4 + size:
            return MORE
        try:
            decode_response(bytes(buf[pos:pos + 4 + size]), exchange.api_key, exchange.api_version)
        except (DecodeError, KeyError):
            return INVALID
        return VALID


__all__ = ["FLAGS", "Connection", "Exchange", "Orphan", "StreamProblem", "endpoint", "error_codes"]

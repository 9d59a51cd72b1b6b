"""Sans-IO decoding of one Kafka connection: feed bytes from each direction, get decoded exchanges.

    conv = Conversation()
    for event in conv.client_bytes(data): ...   # RequestEvent or FrameError
    for event in conv.server_bytes(data): ...   # ResponseEvent or FrameError

Responses carry no api key, so they are matched to their request by correlation id, as a broker
client does. Bad frames are reported as events and skipped; decoding goes on with the next frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kprotocol.errors import DecodeError, InvalidLengthError
from kprotocol.framing import decode_request, decode_response, request_header_version
from kprotocol.group_payloads import Protocol, annotate, protocol_of
from kprotocol.runtime.primitives import I32
from kprotocol.runtime.struct import Message

MAX_FRAME = 100 * 1024 * 1024  # Kafka's default socket.request.max.bytes


class FrameReader:
    """Split a byte stream into size-prefixed frames (each returned with its 4-byte prefix)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self.buffer = bytearray()
        self.offset = 0  # stream offset of buffer[0]

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add bytes; return the (stream offset, frame) pairs now complete."""
        self.buffer += data
        frames = []
        while len(self.buffer) >= 4:
            (size,) = I32.unpack_from(self.buffer, 0)
            if size < 0 or size > self.max_frame:
                raise InvalidLengthError(f"frame size {size} is outside 0..{self.max_frame}", self.offset, "size")
            if len(self.buffer) < 4 + size:
                break
            frames.append((self.offset, bytes(self.buffer[: 4 + size])))
            del self.buffer[: 4 + size]
            self.offset += 4 + size
        return frames

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame still buffered."""
        return len(self.buffer)


@dataclass(frozen=True, slots=True)
class RequestEvent:
    offset: int
    api_key: int
    api_version: int
    header: Message
    message: Message
    protocol: Protocol = (None, None)  # the group's protocol type and name, for group payloads

    def to_json(self) -> dict[str, Any]:
        header_version = request_header_version(self.api_key, self.api_version)
        return {"direction": "request", "offset": self.offset, "api": type(self.message).__name__,
                "apiKey": self.api_key, "apiVersion": self.api_version,
                "header": self.header.to_json(header_version),
                "body": annotate(self.message.to_json(self.api_version), self.message, self.protocol)}


@dataclass(frozen=True, slots=True)
class ResponseEvent:
    offset: int
    request: RequestEvent
    header: Message
    message: Message
    protocol: Protocol = (None, None)

    def to_json(self) -> dict[str, Any]:
        version = self.request.api_version
        return {"direction": "response", "offset": self.offset, "api": type(self.message).__name__,
                "apiKey": self.request.api_key, "apiVersion": version,
                "correlationId": self.header.correlation_id,  # type: ignore[attr-defined]
                "body": annotate(self.message.to_json(version), self.message, self.protocol)}


@dataclass(frozen=True, slots=True)
class FrameError:
    direction: str
    offset: int
    error: DecodeError
    frame: bytes

    def to_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "offset": self.offset, "error": str(self.error),
                "errorType": type(self.error).__name__, "path": self.error.path,
                "errorOffset": self.error.offset, "frameHex": self.frame[:64].hex()}


JOIN_GROUP, SYNC_GROUP = 11, 14


class Conversation:
    """Decode both directions of one connection, pairing responses with requests.

    It remembers each classic group's protocol type and name (from JoinGroup) so that SyncGroup
    payloads of versions that do not state them still get decoded.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.client = FrameReader(max_frame)
        self.server = FrameReader(max_frame)
        self.inflight: dict[int, RequestEvent] = {}
        self.groups: dict[str, Protocol] = {}

    def _protocol(self, api_key: int, message: Message, group_id: str | None) -> Protocol:
        if api_key not in (JOIN_GROUP, SYNC_GROUP) or group_id is None:
            return (None, None)
        protocol = protocol_of(message, self.groups.get(group_id, (None, None)))
        self.groups[group_id] = protocol
        return protocol

    def client_bytes(self, data: bytes) -> list[RequestEvent | FrameError]:
        events: list[RequestEvent | FrameError] = []
        for offset, frame in self.client.feed(data):
            try:
                header, message = decode_request(frame)
            except DecodeError as exc:
                events.append(FrameError("request", offset, exc, frame))
                continue
            api_key = header.request_api_key  # type: ignore[attr-defined]
            protocol = self._protocol(api_key, message, getattr(message, "group_id", None))
            event = RequestEvent(offset, api_key, header.request_api_version, header, message, protocol)  # type: ignore[attr-defined]
            self.inflight[header.correlation_id] = event  # type: ignore[attr-defined]
            events.append(event)
        return events

    def server_bytes(self, data: bytes) -> list[ResponseEvent | FrameError]:
        events: list[ResponseEvent | FrameError] = []
        for offset, frame in self.server.feed(data):
            correlation = I32.unpack_from(frame, 4)[0] if len(frame) >= 8 else None
            request = self.inflight.pop(correlation, None) if correlation is not None else None
            if request is None:
                events.append(FrameError("response", offset,
                                         DecodeError(f"no request with correlation id {correlation}", 4, "correlation_id"),
                                         frame))
                continue
            try:
                header, message = decode_response(frame, request.api_key, request.api_version)
            except DecodeError as exc:
                events.append(FrameError("response", offset, exc, frame))
                continue
            group_id = getattr(request.message, "group_id", None)
            protocol = self._protocol(request.api_key, message, group_id)
            events.append(ResponseEvent(offset, request, header, message, protocol))
        return events


__all__ = ["Conversation", "FrameError", "FrameReader", "RequestEvent", "ResponseEvent"]

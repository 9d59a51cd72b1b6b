"""Size-prefixed request and response frames with their headers, header versions chosen as Kafka does."""

from __future__ import annotations

from kprotocol.errors import DecodeError, InvalidLengthError, TrailingBytesError, TruncatedError
from kprotocol.registry import api_classes, message_class
from kprotocol.runtime.primitives import I16, I32
from kprotocol.runtime.struct import Message

API_VERSIONS = 18
CONTROLLED_SHUTDOWN = 7


def _flexible(cls: type[Message], version: int) -> bool:
    fv = cls.flexible_versions
    return fv is not None and fv[0] <= version <= fv[1]


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible requests, 1 otherwise; ControlledShutdown v0 uses the bare v0 header."""
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    request, _ = api_classes(api_key)
    return 2 if _flexible(request, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible responses, 0 otherwise; ApiVersionsResponse always uses v0."""
    if api_key == API_VERSIONS:
        return 0
    _, response = api_classes(api_key)
    return 1 if _flexible(response, api_version) else 0


def _unframe(frame: bytes) -> bytes:
    if len(frame) < 4:
        raise TruncatedError("frame is shorter than its 4-byte size prefix", 0, "size")
    (size,) = I32.unpack_from(frame, 0)
    if size < 0:
        raise InvalidLengthError(f"negative frame size {size}", 0, "size")
    if len(frame) - 4 < size:
        raise TruncatedError(f"frame declares {size} bytes but has {len(frame) - 4}", 0, "size")
    if len(frame) - 4 > size:
        raise TrailingBytesError(f"{len(frame) - 4 - size} bytes after the frame", 4 + size, "size")
    return frame[4:]


def _body(cls: type[Message], buf: bytes, start: int, version: int) -> Message:
    msg, end = cls.decode_prefix(buf, version, start)
    if end != len(buf):
        raise TrailingBytesError(f"{len(buf) - end} bytes left after the message", end + 4, cls.__name__)
    return msg


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[Message, Message]:
    """A size-prefixed request frame -> (RequestHeader, request message)."""
    buf = _unframe(bytes(frame))
    if len(buf) < 4:
        raise TruncatedError("request header is shorter than api key and version", 4, "RequestHeader")
    (api_key,) = I16.unpack_from(buf, 0)
    (api_version,) = I16.unpack_from(buf, 2)
    try:
        request, _ = api_classes(api_key)
    except KeyError:
        raise DecodeError(f"unknown api key {api_key}", 4, "RequestHeader.request_api_key") from None
    header_cls = message_class("RequestHeader")
    try:
        header, start = header_cls.decode_prefix(buf, request_header_version(api_key, api_version), 0)
    except DecodeError as exc:
        exc.offset = None if exc.offset is None else exc.offset + 4
        raise
    return header, _decode_body(request, buf, start, api_version)


def decode_response(frame: bytes | bytearray | memoryview, api_key: int, api_version: int) -> tuple[Message, Message]:
    """A size-prefixed response frame -> (ResponseHeader, response message)."""
    buf = _unframe(bytes(frame))
    _, response = api_classes(api_key)
    header_cls = message_class("ResponseHeader")
    try:
        header, start = header_cls.decode_prefix(buf, response_header_version(api_key, api_version), 0)
    except DecodeError as exc:
        exc.offset = None if exc.offset is None else exc.offset + 4
        raise
    return header, _decode_body(response, buf, start, api_version)


def _decode_body(cls: type[Message], buf: bytes, start: int, version: int) -> Message:
    try:
        return _body(cls, buf, start, version)
    except TrailingBytesError:
        raise
    except DecodeError as exc:
        exc.offset = None if exc.offset is None else exc.offset + 4
        raise


def _frame(parts: list[bytes]) -> bytes:
    size = sum(map(len, parts))
    return I32.pack(size) + b"".join(parts)


def encode_request(header: Message, message: Message) -> bytes:
    """(RequestHeader, request) -> size-prefixed frame; the header names the api key and version."""
    api_key, api_version = header.request_api_key, header.request_api_version  # type: ignore[attr-defined]
    if message.api_key != api_key:
        raise ValueError(f"header api key {api_key} does not match {type(message).__name__}")
    out: list[bytes] = []
    header.encode_into(out.append, request_header_version(api_key, api_version))
    message.encode_into(out.append, api_version)
    return _frame(out)


def encode_response(header: Message, message: Message, api_version: int) -> bytes:
    """(ResponseHeader, response) -> size-prefixed frame."""
    out: list[bytes] = []
    header.encode_into(out.append, response_header_version(message.api_key, api_version))  # type: ignore[arg-type]
    message.encode_into(out.append, api_version)
    return _frame(out)


__all__ = [
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "request_header_version",
    "response_header_version",
]

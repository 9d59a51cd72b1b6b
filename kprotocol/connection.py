"""A blocking connection to one Kafka broker that speaks kprotocol's typed messages.

    with Connection("127.0.0.1", 9092) as conn:
        response = conn.send(message_class("MetadataRequest")(topics=None))

Versions default to the highest both sides support (learnt from ApiVersions on connect). The raw
frames of the last exchange stay on `last_request_frame` / `last_response_frame`.
"""

from __future__ import annotations

import socket
from types import TracebackType

from kprotocol.framing import decode_response, encode_request
from kprotocol.registry import message_class
from kprotocol.runtime.primitives import I32
from kprotocol.runtime.struct import Message


class Connection:
    """One TCP connection; requests are sent one at a time and answered in order."""

    def __init__(self, host: str, port: int, *, client_id: str = "kprotocol", timeout: float = 10.0) -> None:
        self.client_id = client_id
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._correlation_id = 0
        self.last_request_frame = b""
        self.last_response_frame = b""
        self.api_versions: dict[int, tuple[int, int]] = {}
        request_cls = message_class("ApiVersionsRequest")
        response = self.send(request_cls(client_software_name="kprotocol", client_software_version="0"), version=3)
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def version_for(self, cls: type[Message]) -> int:
        """The highest version of `cls`'s API that both kprotocol and the broker support."""
        low, high = cls.valid_versions
        if cls.api_key in self.api_versions:
            b_low, b_high = self.api_versions[cls.api_key]
            low, high = max(low, b_low), min(high, b_high)
        if low > high:
            raise ValueError(f"the broker supports no version of {cls.__name__} that kprotocol knows")
        return high

    def send(self, request: Message, version: int | None = None, *, header_fields: dict | None = None) -> Message:
        """Send `request` and return the decoded response body."""
        version = self.version_for(type(request)) if version is None else version
        self._correlation_id += 1
        header = message_class("RequestHeader")(
            request_api_key=request.api_key, request_api_version=version, correlation_id=self._correlation_id,
            client_id=self.client_id, **(header_fields or {}))
        self.last_request_frame = encode_request(header, request)
        self._sock.sendall(self.last_request_frame)
        self.last_response_frame = frame = self._read_frame()
        header, response = decode_response(frame, request.api_key, version)
        if header.correlation_id != self._correlation_id:
            raise ValueError(f"correlation id {header.correlation_id} answers {self._correlation_id}")
        return response

    def _read_frame(self) -> bytes:
        size_bytes = self._read_exactly(4)
        (size,) = I32.unpack(size_bytes)
        return size_bytes + self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self._sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

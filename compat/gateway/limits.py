"""What one client may cost the gateway, in the terms of Kafka's broker configs.

`max.connections` and `max.connections.per.ip` cap the connections, counted at accept as the broker
counts them, before any TLS handshake (at the cap, the connection idle the longest makes way, else the
new one is closed), a TLS handshake must end within `gateway.tls.handshake.timeout.ms`, the metrics
endpoint serves at most `gateway.metrics.max.connections` at once, each within
`gateway.metrics.timeout.ms`, `connections.max.idle.ms` closes a connection
with nothing to say, a frame must arrive whole within `gateway.request.read.timeout.ms` of its first
byte (slowloris, a claimed 100 MB frame), `socket.request.max.bytes` bounds a request. A connection
with `gateway.max.inflight.requests` unanswered requests, or `gateway.max.buffered.response.bytes`
of answers it has not read, is not read until it catches up (the broker mutes such a channel).
Large frames the gateway must decode are decoded beside the event loop (`beside_loop`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import resource
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
LARGE_FRAME = 256 << 10  # frames above this are decoded and re-encoded in a worker thread


def _default_max_connections() -> int:
    """Half the descriptors the process may open, less a reserve (a client can cost two: its own and
    its upstream connection), so that connections alone never exhaust them."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 2**31 - 1
    return max(16, (soft - 64) // 2)


@dataclass(frozen=True)
class Limits:
    max_connections: int = dataclasses.field(default_factory=_default_max_connections)
    max_connections_per_ip: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    request_read_timeout_ms: int = 30_000
    max_inflight_requests: int = 500
    max_buffered_response_bytes: int = 16 << 20
    socket_request_max_bytes: int = 100 << 20
    tls_handshake_timeout_ms: int = 10_000
    metrics_max_connections: int = 16
    metrics_timeout_ms: int = 10_000

    NAMES = {"max.connections": "max_connections", "max.connections.per.ip": "max_connections_per_ip",
             "connections.max.idle.ms": "connections_max_idle_ms",
             "gateway.request.read.timeout.ms": "request_read_timeout_ms",
             "gateway.max.inflight.requests": "max_inflight_requests",
             "gateway.max.buffered.response.bytes": "max_buffered_response_bytes",
             "socket.request.max.bytes": "socket_request_max_bytes",
             "gateway.tls.handshake.timeout.ms": "tls_handshake_timeout_ms",
             "gateway.metrics.max.connections": "metrics_max_connections",
             "gateway.metrics.timeout.ms": "metrics_timeout_ms"}

    @classmethod
    def from_kafka(cls, configs: Mapping[str, str]) -> Limits:
        """Limits from Kafka's config names; an unknown name or a value below 1 is a ValueError."""
        unknown = sorted(set(configs) - set(cls.NAMES))
        if unknown:
            raise ValueError(f"unknown limits: {', '.join(unknown)} (known: {', '.join(cls.NAMES)})")
        values = {}
        for name, value in configs.items():
            try:
                values[cls.NAMES[name]] = int(value)
            except ValueError:
                raise ValueError(f"{name} must be an integer, not {value!r}") from None
            if values[cls.NAMES[name]] < 1:
                raise ValueError(f"{name} must be at least 1")
        return cls(**values)


class Connections:
    """The open client connections, by peer address; `admit` decides on a new one."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open: dict[Any, tuple[str, Callable[[], float | None]]] = {}  # key -> (ip, idle seconds or None)
        self.per_ip: dict[str, int] = {}

    def admit(self, key: Any, ip: str, idle: Callable[[], float | None]) -> str | None:
        """None when the connection may stay (registered), else why it is closed. `idle()` tells how long a
        connection has had nothing in flight (None: busy); at the cap the longest idle one is closed."""
        if self.per_ip.get(ip, 0) >= self.limits.max_connections_per_ip:
            return f"max.connections.per.ip ({self.limits.max_connections_per_ip}) reached for {ip}"
        if len(self.open) >= self.limits.max_connections and not self._evict_idlest():
            return f"max.connections ({self.limits.max_connections}) reached"
        self.open[key] = (ip, idle)
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        return None

    def release(self, key: Any) -> None:
        entry = self.open.pop(key, None)
        if entry is not None:
            ip = entry[0]
            self.per_ip[ip] -= 1
            if not self.per_ip[ip]:
                del self.per_ip[ip]

    def _evict_idlest(self) -> bool:
        idle = [(seconds, key) for key, (_, how_idle) in self.open.items() if (seconds := how_idle()) is not None]
        if not idle:
            return False
        _, key = max(idle, key=lambda pair: pair[0])
        closer = getattr(key, "evict", None)
        if closer is None:
            return False
        closer()
        self.release(key)
        return True


async def read_frame(reader: asyncio.StreamReader, limits: Limits, max_frame: int,
                     busy: Callable[[], bool], error: type[Exception]) -> bytes | None:
    """One size-prefixed request frame under the limits, None at a clean end of stream. Waiting for
    the next frame is bounded by connections.max.idle.ms unless `busy()` (answers still owed);
    a frame must be whole within the read time-out of its first byte. Raises `error` otherwise."""
    idle_s = limits.connections_max_idle_ms / 1000
    while True:
        try:
            prefix = await asyncio.wait_for(reader.readexactly(4), idle_s)
            break
        except asyncio.TimeoutError:
            if busy():
                continue
            if reader._buffer:  # type: ignore[attr-defined]  # part of a size prefix: a stalled frame
                raise error(f"no whole frame within {idle_s:.0f} s") from None
            raise error(f"idle for {idle_s:.0f} s (connections.max.idle.ms)") from None
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise error("connection closed inside a frame's size") from None
            return None
    size = int.from_bytes(prefix, "big", signed=True)
    limit = min(max_frame, limits.socket_request_max_bytes)
    if size < 8 or size > limit:
        raise error(f"frame size {size} is outside 8..{limit}")
    started = time.monotonic()
    try:
        return prefix + await asyncio.wait_for(reader.readexactly(size), limits.request_read_timeout_ms / 1000)
    except asyncio.TimeoutError:
        raise error(f"a {size}-byte frame not whole after {time.monotonic() - started:.0f} s "
                    "(gateway.request.read.timeout.ms)") from None
    except asyncio.IncompleteReadError:
        raise error(f"connection closed inside a {size}-byte frame") from None


async def beside_loop(size: int, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` inline for a small frame, in a worker thread for a large one (the event loop keeps
    serving other clients meanwhile: the Python codecs give up the interpreter every few milliseconds)."""
    if size <= LARGE_FRAME:
        return work(*args)
    return await asyncio.to_thread(work, *args)


def _python(table_owner: type, kind: str) -> dict:
    """The generated Python codec table of a message class (the compiled one when there is no other)."""
    return table_owner.__dict__.get(f"_py_{kind}") or getattr(table_owner, f"_{kind}")


def decode_response_python(frame: bytes, api_key: int, api_version: int) -> tuple[Any, Any]:
    """decode_response with the message's own Python decoder (many short steps rather than one long
    compiled call: a worker thread running it lets the event loop in)."""
    from kprotocol.errors import DecodeError
    from kprotocol.framing import response_header_version
    from kprotocol.registry import api_classes, message_class

    _, cls = api_classes(api_key)
    buf = frame[4:]
    header, start = message_class("ResponseHeader").decode_prefix(buf, response_header_version(api_key, api_version))
    try:
        body, end = _python(cls, "decoders")[api_version](buf, start)
    except KeyError:
        raise DecodeError(f"{cls.__name__} has no version {api_version}", 4, cls.__name__) from None
    if end != len(buf):
        raise DecodeError(f"{len(buf) - end} bytes left after the message", end + 4, cls.__name__)
    return header, body


def encode_response_python(header: Any, body: Any, api_version: int) -> bytes:
    """encode_response with the message's own Python encoder (see decode_response_python)."""
    from kprotocol.framing import response_header_version

    out: list[bytes] = []
    header.encode_into(out.append, response_header_version(body.api_key, api_version))
    _python(type(body), "encoders")[api_version](body, out.append)
    payload = b"".join(out)
    return len(payload).to_bytes(4, "big") + payload

"""The gateway's network shell: Kafka clients on one side, the upstream cluster on the other.

One listener stands for each upstream broker (plus the bootstrap listener), and every broker
address a client can learn (Metadata, DescribeCluster, FindCoordinator) is rewritten to one of
them, so every connection stays on the gateway. Requests are forwarded frame by frame without
decoding their bodies; a `local` handler may answer a request itself (the groups the gateway
coordinates). Responses go back in request order, as Kafka clients require, whether they came
from upstream or from the handler. A client sending garbage loses its own connection only.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from compat.gateway.wire import expects_response, request_prefix
from kprotocol.errors import DecodeError
from kprotocol.framing import decode_request, decode_response, encode_request, encode_response
from kprotocol.registry import api_classes, message_class
from kprotocol.runtime.struct import Message

log = logging.getLogger("kprotocol.gateway")

MAX_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
SIZE = struct.Struct(">i")
METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER = 3, 10, 18, 60
REWRITTEN = {METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER}

# A local handler gets (request header, request body, client address) and returns an awaitable of the
# response body, or None to forward the request. It answers later when it must (a JoinGroup waits for
# the rest of the group): other requests of the connection go on meanwhile, answers keep their order.
LocalHandler = Callable[[Message, Message, str], Awaitable[Message] | None]


class FrameError(Exception):
    """A client's frame the gateway will not forward; its connection is closed."""


async def read_frame(reader: asyncio.StreamReader, max_frame: int = MAX_FRAME, min_frame: int = 8) -> bytes | None:
    """One size-prefixed frame, or None at a clean end of stream (requests are at least 8 bytes:
    api key, version and correlation id; a response at least its 4-byte correlation id)."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("connection closed inside a frame's size") from None
        return None
    (size,) = SIZE.unpack(prefix)
    if size < min_frame or size > max_frame:
        raise FrameError(f"frame size {size} is outside {min_frame}..{max_frame}")
    try:
        return prefix + await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError(f"connection closed inside a {size}-byte frame") from None


@dataclass
class BrokerMap:
    """Upstream node id -> upstream address, and -> the gateway listener standing for it."""

    host: str
    upstream: dict[int, tuple[str, int]] = field(default_factory=dict)
    local_port: dict[int, int] = field(default_factory=dict)

    def local(self, node_id: int) -> tuple[str, int] | None:
        port = self.local_port.get(node_id)
        return None if port is None else (self.host, port)


class Gateway:
    """Listeners for the bootstrap address and each upstream broker; `start()` then `close()`."""

    def __init__(self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0), *,
                 broker_port_base: int | None = None, local: LocalHandler | None = None,
                 local_api_keys: frozenset[int] | None = None,
                 extra_api_versions: dict[int, tuple[int, int]] | None = None, max_frame: int = MAX_FRAME) -> None:
        self.bootstrap = upstream
        self.listen = listen
        self.broker_port_base = broker_port_base
        self.local = local
        self.local_api_keys = local_api_keys  # the only requests the handler is shown (None: every one)
        self.extra_api_versions = extra_api_versions or {}
        self.max_frame = max_frame
        self.brokers = BrokerMap(listen[0])
        self.servers: list[asyncio.base_events.Server] = []
        self.port = 0
        self.connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        server = await asyncio.start_server(lambda r, w: self._accept(r, w, self.bootstrap), *self.listen)
        self.servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        await self._discover()
        log.info("gateway on %s:%d for upstream %s:%d, brokers %s", self.listen[0], self.port, *self.bootstrap,
                 self.brokers.local_port)

    async def _discover(self) -> None:
        """Learn the upstream brokers with one Metadata request and open a listener for each."""
        reader, writer = await asyncio.open_connection(*self.bootstrap)
        try:
            header = message_class("RequestHeader")(request_api_key=METADATA, request_api_version=12,
                                                    correlation_id=1, client_id="kprotocol-gateway")
            writer.write(encode_request(header, message_class("MetadataRequest")(topics=[])))
            await writer.drain()
            frame = await read_frame(reader, min_frame=4)
            if frame is None:
                raise ConnectionError("upstream closed the connection during discovery")
            _, metadata = decode_response(frame, METADATA, 12)
        finally:
            writer.close()
        for broker in metadata.brokers:
            await self._ensure_listener(broker.node_id, broker.host, broker.port)

    async def _ensure_listener(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.brokers.upstream[node_id] = (host, port)
        if node_id not in self.brokers.local_port:
            wanted = 0 if self.broker_port_base is None else self.broker_port_base + node_id
            server = await asyncio.start_server(lambda r, w: self._accept(r, w, self.brokers.upstream[node_id]),
                                                self.listen[0], wanted)
            self.servers.append(server)
            self.brokers.local_port[node_id] = server.sockets[0].getsockname()[1]
        return self.brokers.local(node_id)  # type: ignore[return-value]

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self.connections):
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)
        for server in self.servers:
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      target: tuple[str, int]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.connections.add(task)
            task.add_done_callback(self.connections.discard)
        await Session(self, reader, writer, target).run()

    # -- response rewriting ------------------------------------------------------------------------

    async def rewrite(self, api_key: int, api_version: int, frame: bytes) -> bytes:
        """A response frame with every broker address replaced by the gateway listener for it.
        A response kprotocol cannot read goes back unchanged (ApiVersions keeps clients below that)."""
        try:
            header, body = decode_response(frame, api_key, api_version)
        except DecodeError as exc:
            log.warning("response to api %d v%d passed through unchanged: %s", api_key, api_version, exc)
            return frame
        if api_key == METADATA:
            brokers = [b.replace(host=h, port=p) for b in body.brokers
                       for h, p in [await self._ensure_listener(b.node_id, b.host, b.port)]]
            body = body.replace(brokers=tuple(brokers))
        elif api_key == DESCRIBE_CLUSTER:
            brokers = [b.replace(host=h, port=p) for b in body.brokers
                       for h, p in [await self._ensure_listener(b.broker_id, b.host, b.port)]]
            body = body.replace(brokers=tuple(brokers))
        elif api_key == FIND_COORDINATOR:
            body = await self._rewrite_coordinator(body, api_version)
        elif api_key == API_VERSIONS and body.error_code == 0:
            body = body.replace(api_keys=self._api_versions(body))
        return encode_response(header, body, api_version)

    def _api_versions(self, body: Message) -> tuple[Message, ...]:
        """The upstream's versions, capped where the gateway reads or answers the API itself, plus the
        APIs the gateway adds (the streams-group APIs)."""
        entry = type(body).ApiVersion
        keys = []
        for k in body.api_keys:
            if k.api_key in REWRITTEN or k.api_key in self.extra_api_versions:
                low, high = self.extra_api_versions.get(k.api_key) or api_classes(k.api_key)[1].valid_versions
                k = k.replace(max_version=min(k.max_version, high))
            keys.append(k)
        have = {k.api_key for k in keys}
        keys += [entry(api_key=k, min_version=lo, max_version=hi)
                 for k, (lo, hi) in sorted(self.extra_api_versions.items()) if k not in have]
        return tuple(keys)

    async def _rewrite_coordinator(self, body: Message, api_version: int) -> Message:
        if api_version < 4:
            if body.error_code != 0 or body.node_id < 0:
                return body
            host, port = await self._ensure_listener(body.node_id, body.host, body.port)
            return body.replace(host=host, port=port)
        coordinators = []
        for c in body.coordinators:
            if c.error_code == 0 and c.node_id >= 0:
                host, port = await self._ensure_listener(c.node_id, c.host, c.port)
                c = c.replace(host=host, port=port)
            coordinators.append(c)
        return body.replace(coordinators=tuple(coordinators))


@dataclass
class _Slot:
    """One response owed to the client, in request order: from upstream, or a local answer."""

    api_key: int
    api_version: int
    local: asyncio.Future | None = None


class Session:
    """One client connection and its upstream connection."""

    def __init__(self, gateway: Gateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 target: tuple[str, int]) -> None:
        self.gateway, self.reader, self.writer, self.target = gateway, reader, writer, target
        self.slots: asyncio.Queue[_Slot | None] = asyncio.Queue()
        self.peer = writer.get_extra_info("peername")

    async def run(self) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError as exc:
            log.warning("client %s: upstream %s:%d unreachable: %s", self.peer, *self.target, exc)
            self.writer.close()
            return
        responses = asyncio.create_task(self._responses(up_reader))
        try:
            await self._requests(up_writer)
        except FrameError as exc:
            log.warning("client %s: closing connection: %s", self.peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await self.slots.put(None)
            try:
                await asyncio.wait_for(responses, timeout=30)
            except (asyncio.TimeoutError, ConnectionError, FrameError):
                responses.cancel()
            up_writer.close()
            self.writer.close()

    async def _requests(self, upstream: asyncio.StreamWriter) -> None:
        local = self.gateway.local
        while (frame := await read_frame(self.reader, self.gateway.max_frame)) is not None:
            try:
                api_key, api_version, _ = request_prefix(frame)
            except DecodeError as exc:
                raise FrameError(str(exc)) from None
            if local is not None and (self.gateway.local_api_keys is None or api_key in self.gateway.local_api_keys):
                answer = await self._try_local(frame, api_key, api_version)
                if answer is not None:
                    await self.slots.put(_Slot(api_key, api_version, answer))
                    continue
            if expects_response(frame):
                await self.slots.put(_Slot(api_key, api_version))
            upstream.write(frame)
            await upstream.drain()

    async def _try_local(self, frame: bytes, api_key: int, api_version: int) -> asyncio.Future | None:
        try:
            header, request = decode_request(frame)
        except DecodeError:
            return None  # not ours to judge: upstream answers with its own error
        host = self.peer[0] if isinstance(self.peer, tuple) else str(self.peer)
        pending = self.gateway.local(header, request, f"/{host}")  # type: ignore[misc]
        if pending is None:
            return None
        response_header = message_class("ResponseHeader")(correlation_id=header.correlation_id)

        async def answer() -> bytes:
            try:
                return encode_response(response_header, await pending, api_version)
            except Exception as exc:  # a bug answering one request costs this connection only
                log.exception("client %s: api %d v%d failed locally", self.peer, api_key, api_version)
                raise FrameError(f"no answer to api {api_key}: {exc}") from exc
        return asyncio.ensure_future(answer())

    async def _responses(self, upstream: asyncio.StreamReader) -> None:
        gateway = self.gateway
        while (slot := await self.slots.get()) is not None:
            if slot.local is not None:
                try:
                    frame = await slot.local
                except FrameError:
                    self.writer.close()  # the client reconnects and retries
                    return
            else:
                try:
                    frame = await read_frame(upstream, 2**31 - 1, min_frame=4)
                except FrameError as exc:
                    frame, why = None, str(exc)
                else:
                    why = "closed"
                if frame is None:  # e.g. a version the upstream does not have: it hangs up, so does the gateway
                    log.warning("client %s: closing connection: upstream %s before answering api %d v%d",
                                self.peer, why, slot.api_key, slot.api_version)
                    self.writer.close()
                    return
                if slot.api_key in REWRITTEN:
                    frame = await gateway.rewrite(slot.api_key, slot.api_version, frame)
            self.writer.write(frame)
            if self.slots.empty():
                await self.writer.drain()

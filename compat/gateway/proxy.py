"""The gateway's network shell: Kafka clients on one side, the upstream cluster on the other.

One listener stands for each upstream broker (plus the bootstrap listener), and every broker
address a client can learn (Metadata, DescribeCluster, FindCoordinator) is rewritten to one of
them, so every connection stays on the gateway. Requests are forwarded frame by frame without
decoding their bodies; a `local` handler may answer a request itself (the groups the gateway
coordinates). Responses go back in request order, as Kafka clients require, whether they came
from upstream or from the handler. A client sending garbage loses its own connection only.

TLS (tls.py: certificates, mutual TLS, SNI routing), upstream security (upstream.py), clients' SASL
logins (sasl.py) and metrics (metrics.py) live in modules of their own; this shell only calls them.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import struct
from collections.abc import Awaitable, Callable
import time
from dataclasses import dataclass, field
from typing import Any

from compat.gateway import addresses, authorization, lenient
from compat.gateway.limits import (LARGE_FRAME, Connections, Limits, beside_loop, decode_response_python,
                                   encode_response_python)
from compat.gateway.limits import read_frame as limited_read_frame
from compat.gateway.supervisor import Throttle
from compat.gateway.wire import expects_response, request_prefix
from kprotocol.errors import DecodeError
from kprotocol.framing import decode_response, encode_request, encode_response
from kprotocol.registry import api_classes, message_class
from kprotocol.runtime.struct import Message

log = logging.getLogger("kprotocol.gateway")
current_target: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("target", default=None)

MAX_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
SIZE = struct.Struct(">i")
METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER = 3, 10, 18, 60
REWRITTEN = {METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER}
AUTHORIZED_APIS = authorization.AUTHORIZED_APIS  # requests answered locally after asking the brokers' ACLs
PROBE_TIMEOUT_S = 5.0  # an authorization probe unanswered this long: its broker is treated as gone
SASL_APIS = {17, 36}  # SaslHandshake, SaslAuthenticate: forwarded, watched (sasl.SaslTracker)

# A local handler gets (request header, request body, client address) and returns an awaitable of the
# response body, or None to forward the request. It answers later when it must (a JoinGroup waits for
# the rest of the group): other requests of the connection go on meanwhile, answers keep their order.
LocalHandler = Callable[[Message, Message, str], Awaitable[Message] | None]


class FrameError(Exception):
    """A client's frame the gateway will not forward; its connection is closed."""


class UpstreamUnreachable(FrameError):
    """The upstream broker a client's connection stands for cannot be reached; the client's connection closes."""


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
    sni: Any = None  # tls.SniRouting: every broker on one port, told apart by name

    def local(self, node_id: int) -> tuple[str, int] | None:
        port = self.local_port.get(node_id)
        if port is None:
            return None
        return (self.sni.broker_host(node_id), port) if self.sni is not None else (self.host, port)


class Gateway:
    """Listeners for the bootstrap address and each upstream broker; `start()` then `close()`."""

    def __init__(self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0), *,
                 broker_port_base: int | None = None, local: LocalHandler | None = None,
                 local_api_keys: frozenset[int] | None = None,
                 extra_api_versions: dict[int, tuple[int, int]] | None = None, max_frame: int = MAX_FRAME,
                 tls: Any = None, sni: Any = None, upstream_security: Any = None, observer: Any = None,
                 limits: Limits | None = None, acls: Any = None) -> None:
        self.bootstrap = upstream
        self.limits = limits or Limits()
        self.admission = Connections(self.limits)
        self._throttle = Throttle(10.0)
        self.listen = listen
        self.broker_port_base = broker_port_base
        self.local = local
        self.acls = acls  # authorization.ClusterAcls: whether the brokers enforce ACLs (None: always asked)
        self.local_api_keys = local_api_keys  # the only requests the handler is shown (None: every one)
        self.extra_api_versions = extra_api_versions or {}
        self.max_frame = max_frame
        self.tls = tls  # tls.ListenerTLS: the listeners speak TLS
        self.upstream_security = upstream_security  # upstream.UpstreamSecurity: TLS and SASL upstream
        self.observer = observer  # metrics.GatewayMetrics, or None
        self.brokers = BrokerMap(listen[0], sni=sni)
        self.servers: list[asyncio.base_events.Server] = []
        self.port = 0
        self.connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        server = await self._listen(self.listen[0], self.listen[1], None)
        self.servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        await self._discover()
        log.info("gateway on %s:%d for upstream %s:%d, brokers %s", self.listen[0], self.port, *self.bootstrap,
                 self.brokers.local_port)

    async def _discover(self) -> None:
        """Learn the upstream brokers with one Metadata request and open a listener for each."""
        from compat.gateway.upstream import PLAINTEXT, UpstreamConnection  # it reads frames with this module

        connection = UpstreamConnection(self.bootstrap, self.upstream_security or PLAINTEXT)
        try:
            metadata = await connection.send(message_class("MetadataRequest")(topics=[]), 12)
        finally:
            connection.close()
        for broker in metadata.brokers:
            await self._ensure_listener(broker.node_id, broker.host, broker.port)

    async def _ensure_listener(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.brokers.upstream[node_id] = (host, port)
        if node_id not in self.brokers.local_port and self.brokers.sni is not None:
            self.brokers.local_port[node_id] = self.brokers.sni.port or self.port  # the one SNI port
        elif node_id not in self.brokers.local_port:
            wanted = 0 if self.broker_port_base is None else self.broker_port_base + node_id
            server = await self._listen(self.listen[0], wanted, node_id)
            self.servers.append(server)
            self.brokers.local_port[node_id] = server.sockets[0].getsockname()[1]
        return self.brokers.local(node_id)  # type: ignore[return-value]

    async def close(self, drain_s: float = 5.0) -> None:
        """Stop listening, give the answers owed to clients up to `drain_s` to go out, then close."""
        for server in self.servers:
            server.close()
        deadline = time.monotonic() + drain_s
        while any(a.session is not None and a.session.owed for a in self.admission.open) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in list(self.connections):
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)
        for server in self.servers:
            await server.wait_closed()

    def _sni_target(self, writer: asyncio.StreamWriter) -> tuple[str, int]:
        """The bootstrap, or with SNI routing the broker the client named."""
        if self.brokers.sni is None:
            return self.bootstrap
        node = self.brokers.sni.node_of(self.tls.server_name(writer.get_extra_info("ssl_object")))
        return self.brokers.upstream.get(node, self.bootstrap) if node is not None else self.bootstrap

    async def _listen(self, host: str, port: int, node_id: int | None) -> Any:
        """A listener for the bootstrap (`node_id` None) or one broker. TLS listeners accept sockets themselves
        (tls.TlsServer): the limits count a connection at accept, before its handshake, as the broker does."""
        def target() -> tuple[str, int] | None:
            return self.brokers.upstream[node_id] if node_id is not None else None
        if self.tls is None:
            return await asyncio.start_server(lambda r, w: self._accept(r, w, target()), host, port)
        from compat.gateway.tls import TlsServer, quiet_tls_errors

        quiet_tls_errors(asyncio.get_running_loop(), self.log_limited)
        return await TlsServer.start(host, port, lambda sock: self._accept_tls(sock, target()))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      target: tuple[str, int] | None) -> None:
        """A plaintext connection: admitted (or refused) at once, then its session. `target`: the upstream
        broker of this listener, None for the bootstrap listener."""
        admitted = _Admitted(writer.transport.abort)
        if self._admit(admitted, writer.get_extra_info("peername")):
            await self._serve(admitted, reader, writer, target)

    async def _accept_tls(self, sock: Any, target: tuple[str, int] | None) -> None:
        """A TLS connection: admitted (or refused) before its handshake, which must end within
        gateway.tls.handshake.timeout.ms; a failed one is one throttled line, never a traceback."""
        from compat.gateway.tls import accept_tls

        try:
            peer = sock.getpeername()
        except OSError:
            sock.close()
            return
        admitted = _Admitted(sock.close)
        if not self._admit(admitted, peer):
            return
        try:
            reader, writer = await accept_tls(sock, self.tls.context, self.limits.tls_handshake_timeout_ms / 1000)
        except (OSError, EOFError, asyncio.TimeoutError, ValueError, UnicodeError) as exc:
            self.admission.release(admitted)
            sock.close()
            self.log_limited(("tls handshake", type(exc).__name__), "client %s: TLS handshake failed: %s", peer,
                             str(exc) or type(exc).__name__)
            return
        except asyncio.CancelledError:
            self.admission.release(admitted)
            sock.close()
            raise
        await self._serve(admitted, reader, writer, target if target is not None else self._sni_target(writer))

    def _admit(self, admitted: _Admitted, peer: Any) -> bool:
        refused = self.admission.admit(admitted, peer[0] if isinstance(peer, tuple) else str(peer), admitted.idle)
        if refused is not None:
            self.log_limited(("refused", refused), "client %s refused: %s", peer, refused)
            admitted.close()
        return refused is None

    async def _serve(self, admitted: _Admitted, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     target: tuple[str, int] | None) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.connections.add(task)
            task.add_done_callback(self.connections.discard)
        try:
            admitted.session = session = Session(self, reader, writer, target if target is not None
                                                 else self.bootstrap)
            await session.run()
        except asyncio.CancelledError:
            writer.close()  # the gateway is closing: not an error of this connection's
        finally:
            self.admission.release(admitted)

    def log_limited(self, key: Any, message: str, *args: Any, level: int = logging.WARNING) -> None:
        """A warning logged at most once per key every 10 s, with how many were held back."""
        if self._throttle.ready(key):
            more = self._throttle.suppressed(key)
            log.log(level, message + (f" ({more} more like it since)" if more else ""), *args)

    # -- response rewriting ------------------------------------------------------------------------

    async def rewrite(self, api_key: int, api_version: int, frame: bytes) -> bytes:
        """A response frame with every broker address replaced by the gateway listener for it.
        A response kprotocol cannot read goes back unchanged (ApiVersions keeps clients below that)."""
        large = len(frame) > LARGE_FRAME
        if large and api_key in (METADATA, FIND_COORDINATOR):
            rewritten = await self._rewrite_large(api_key, api_version, frame)
            if rewritten is not None:
                return rewritten
        try:
            header, body = await beside_loop(len(frame), decode_response_python if large else decode_response,
                                             frame, api_key, api_version)
        except DecodeError as exc:
            self.log_limited(("unreadable", api_key, api_version), "response to api %d v%d passed through "
                             "unchanged: %s", api_key, api_version, exc)
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
        return await beside_loop(len(frame), encode_response_python if large else encode_response,
                                 header, body, api_version)

    async def _rewrite_large(self, api_key: int, api_version: int, frame: bytes) -> bytes | None:
        """A large Metadata or FindCoordinator answer rewritten in place (addresses.py), the event loop
        served meanwhile; None when its shape is not the expected one."""
        for _ in range(2):
            missing: addresses.Missing = []
            if api_key == FIND_COORDINATOR:
                rewritten = await addresses.find_coordinator(frame, api_version, self.brokers.local, missing)
            else:
                rewritten = addresses.metadata(frame, api_version, self.brokers.local, missing)
            if not missing:
                return rewritten
            for node_id, host, port in missing:
                await self._ensure_listener(node_id, host, port)
        return None

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
    started: float = 0.0  # when the request arrived (time.perf_counter), for the latency metrics
    probes: list = field(default_factory=list)  # the gateway's own questions on the client's connection
    # (authorization.py), written upstream right after the request: their answers come first


class _Admitted:
    """A connection counted by the limits from its accept: its session once the TLS handshake is done."""

    def __init__(self, close: Callable[[], None]) -> None:
        self.close = close
        self.session: Session | None = None

    def idle(self) -> float | None:
        return self.session.idle() if self.session is not None else None  # a handshake is never the idlest

    def evict(self) -> None:
        if self.session is not None:
            self.session.evict()
        else:
            self.close()


class Session:
    """One client connection and its upstream connection."""

    def __init__(self, gateway: Gateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 target: tuple[str, int]) -> None:
        self.gateway, self.reader, self.writer, self.target = gateway, reader, writer, target
        limits = gateway.limits
        self.slots: asyncio.Queue[_Slot | None] = asyncio.Queue(maxsize=limits.max_inflight_requests)
        self.owed = 0  # requests read and not answered yet: at gateway.max.inflight.requests the client is not read
        self.room = asyncio.Event()  # set when an answer went out (the reader waits for it at the cap)
        self.active_at = time.monotonic()
        self.up_reader: asyncio.StreamReader | None = None
        self.up_writer: asyncio.StreamWriter | None = None  # opened at the first request to forward
        self.peer = writer.get_extra_info("peername")
        writer.transport.set_write_buffer_limits(high=limits.max_buffered_response_bytes)
        from compat.gateway.authorization import ConnectionAuthorizer
        from compat.gateway.sasl import SaslTracker
        from compat.gateway.tls import principal

        self.sasl = SaslTracker()
        self.authorizer = ConnectionAuthorizer() if gateway.local is not None else None
        self.principal = principal(writer.get_extra_info("ssl_object"))  # mutual TLS: the certificate's subject
        if self.principal is not None:
            log.info("client %s: TLS client certificate %s", self.peer, self.principal)

    @property
    def may_answer_locally(self) -> bool:
        """Every connection: the authorization probes each local answer waits for reach the broker after the
        connection's login requests, and the broker answers them only on a connection it logged in
        (otherwise it hangs up, and so does the gateway, without answering)."""
        return self.authorizer is not None

    async def run(self) -> None:
        observer = self.gateway.observer
        if observer is not None:
            observer.connection_opened()
        try:
            await self._run()
        finally:
            if observer is not None:
                observer.connection_closed()

    def idle(self) -> float | None:
        """Seconds since this connection last did anything, None while answers are owed to it."""
        return None if self.owed else time.monotonic() - self.active_at

    def evict(self) -> None:
        """Make way for a new connection (max.connections reached, this one idle the longest)."""
        self.gateway.log_limited(("evicted",), "client %s closed: idle the longest at max.connections", self.peer)
        self.writer.close()

    async def _upstream(self) -> asyncio.StreamWriter:
        if self.up_writer is None:
            security = self.gateway.upstream_security
            open_connection = security.open if security is not None else asyncio.open_connection
            # a bootstrap connection may go to any broker: the others stand in while that one is down
            others = [a for a in self.gateway.brokers.upstream.values() if a != self.target] \
                if self.target == self.gateway.bootstrap else []
            for address in [self.target, *others]:
                try:
                    self.up_reader, self.up_writer = await open_connection(*address)
                    break
                except (OSError, asyncio.TimeoutError) as exc:
                    error = exc
                    if self.gateway.observer is not None:
                        self.gateway.observer.upstream_error("connect")
            else:
                raise UpstreamUnreachable(f"upstream {self.target[0]}:{self.target[1]} unreachable: "
                                          f"{error or type(error).__name__}") from None
        return self.up_writer

    async def _run(self) -> None:
        responses = asyncio.create_task(self._responses())
        try:
            await self._requests()
        except UpstreamUnreachable as exc:
            self.gateway.log_limited(("unreachable", self.target), "%s: clients' connections closed", exc)
        except FrameError as exc:
            host = self.peer[0] if isinstance(self.peer, tuple) else self.peer
            self.gateway.log_limited(("frame", host, str(exc)), "client %s: closing connection: %s", self.peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            try:
                self.slots.put_nowait(None)
            except asyncio.QueueFull:  # it owes the client more than it may: the connection closes anyway
                responses.cancel()
            try:
                await asyncio.wait_for(responses, timeout=30)
            except (asyncio.TimeoutError, asyncio.CancelledError, ConnectionError, FrameError):
                responses.cancel()
            if self.up_writer is not None:
                self.up_writer.close()
            self.writer.close()

    async def _requests(self) -> None:
        local = self.gateway.local
        observer = self.gateway.observer
        limits = self.gateway.limits
        while True:
            while self.owed >= limits.max_inflight_requests:  # as the broker mutes a channel: not read past the cap
                self.room.clear()
                await self.room.wait()
            frame = await limited_read_frame(self.reader, limits, self.gateway.max_frame, lambda: self.owed > 0,
                                             FrameError)
            if frame is None:
                break
            self.active_at = time.monotonic()
            started = time.perf_counter()
            try:
                api_key, api_version, _ = request_prefix(frame)
            except DecodeError as exc:
                raise FrameError(str(exc)) from None
            if observer is not None:
                observer.bytes_in(len(frame))
            if self.sasl.expired(api_key, self.active_at):  # KIP-368: the broker closes such a connection
                self.gateway.log_limited(("session expired", self.peer), "client %s: closing connection: its "
                                         "SASL session lifetime ended without re-authentication", self.peer)
                return
            if api_key in SASL_APIS:
                self._sasl_request(frame)
            elif (local is not None and self.may_answer_locally
                  and (self.gateway.local_api_keys is None or api_key in self.gateway.local_api_keys)):
                local_answer = await self._try_local(frame, api_key, api_version)
                if local_answer is not None:
                    answer, probes = local_answer
                    self.owed += 1
                    await self.slots.put(_Slot(api_key, api_version, answer, started, probes))
                    if probes:  # in the same step as the slot: nothing else is written upstream in between
                        assert self.up_writer is not None
                        for probe in probes:
                            self.up_writer.write(probe[0])
                        await self.up_writer.drain()
                    continue
            upstream = await self._upstream()
            if expects_response(frame):
                self.owed += 1
                await self.slots.put(_Slot(api_key, api_version, started=started))
            upstream.write(frame)
            await upstream.drain()

    def _must_ask(self) -> bool:
        """Whether a local answer waits for the brokers' judgement on this connection: while they enforce ACLs,
        and on a SASL listener until the broker accepted this connection's login (its answers to the probes
        are what tell OAUTHBEARER, GSSAPI and any unfinished login apart)."""
        acls, security = self.gateway.acls, self.gateway.upstream_security
        if acls is None or acls.enforced:
            return True
        return security is not None and security.sasl and not (self.sasl.authenticated and not self.sasl.failed)

    async def _try_local(self, frame: bytes, api_key: int, api_version: int) -> tuple[asyncio.Future, list] | None:
        try:
            read = await lenient.find_coordinator_request(frame) if api_key == FIND_COORDINATOR and \
                len(frame) > LARGE_FRAME else None  # a million keys: read in chunks
            header, request = read or await beside_loop(len(frame), lenient.decode_request, frame,  # as the broker
                                                        len(frame) <= LARGE_FRAME)  # reads it
        except DecodeError:
            return None  # not ours to judge: upstream answers with its own error
        current_target.set(self.target)
        if self.authorizer is not None and api_key in AUTHORIZED_APIS and self._must_ask():
            await self._upstream()  # the brokers' ACLs are asked on the client's own connection
            authorization.current.set(self.authorizer)
        else:  # no broker has an authorizer and the login (if any is needed) is done: nothing to ask
            authorization.current.set(None)
        host = self.peer[0] if isinstance(self.peer, tuple) else str(self.peer)
        pending = self.gateway.local(header, request, f"/{host}")  # type: ignore[misc]
        probes = self.authorizer.take() if self.authorizer is not None else []
        if pending is None:
            for probe in probes:
                probe[3].cancel()
            return None
        response_header = message_class("ResponseHeader")(correlation_id=header.correlation_id)
        if self.principal or self.sasl.principal:
            log.debug("client %s (%s): api %d answered by the gateway", self.peer,
                      self.sasl.principal or self.principal, api_key)

        async def answer() -> bytes:
            try:
                body = await pending
                if api_key == FIND_COORDINATOR:  # names the gateway's listener of this connection's kind
                    body = await self.gateway._rewrite_coordinator(body, api_version)
                return encode_response(response_header, body, api_version)
            except Exception as exc:  # a bug answering one request costs this connection only
                log.exception("client %s: api %d v%d failed locally", self.peer, api_key, api_version)
                raise FrameError(f"no answer to api {api_key}: {exc}") from exc
        return asyncio.ensure_future(answer()), probes

    def _sasl_request(self, frame: bytes) -> None:
        try:
            header, body = lenient.decode_request(frame)  # as the broker reads it (bytes after it ignored)
        except DecodeError:
            return  # the broker judges it
        self.sasl.request(header.request_api_key, body)

    def _sasl_confirmed(self) -> None:
        self.sasl.confirmed()
        if self.sasl.authenticated:
            log.info("client %s: SASL %s login%s accepted upstream", self.peer, self.sasl.mechanism,
                     f" of {self.sasl.principal}" if self.sasl.principal else "")

    def _sasl_response(self, slot: _Slot, frame: bytes) -> None:
        try:
            _, body = decode_response(frame, slot.api_key, slot.api_version)
        except DecodeError:
            return
        self.sasl.response(slot.api_key, body)
        if self.sasl.principal is not None:
            log.info("client %s: SASL %s login of %s accepted upstream", self.peer, self.sasl.mechanism,
                     self.sasl.principal)
        elif self.sasl.failed:
            log.info("client %s: SASL %s login of User:%s refused upstream", self.peer, self.sasl.mechanism,
                     self.sasl.user)

    async def _probe_answers(self, probes: list) -> bool:
        """The broker's answers to the gateway's probes on this connection (False: the broker hung up)."""
        for i, (_, api_key, version, future) in enumerate(probes):
            try:
                assert self.up_reader is not None
                frame = await asyncio.wait_for(read_frame(self.up_reader, 2**31 - 1, min_frame=4), PROBE_TIMEOUT_S)
            except asyncio.TimeoutError:  # a broker shutting down answers nothing: its connection is given up
                if self.up_writer is not None:
                    self.up_writer.transport.abort()
                frame = None
            except FrameError:
                frame = None
            if frame is None:
                for _, _, _, waiting in probes[i:]:
                    if not waiting.done():
                        waiting.set_exception(ConnectionError("upstream closed the connection"))
                        waiting.exception()  # retrieved: whoever waits on it hears of it, nobody else must
                authorizer = self.authorizer
                if authorizer is None or not authorizer.answered or self.sasl.failed:
                    return False  # never a logged-in connection: the broker hung up on it, so does the gateway
                authorizer.lost()  # its broker restarts: what it judged on this connection stands a while
                return True
            if future.done():
                continue
            try:
                future.set_result(decode_response(frame, api_key, version)[1])
            except DecodeError as exc:
                future.set_exception(exc)
            if self.authorizer is not None:
                self.authorizer.answered = True
        return True

    async def _responses(self) -> None:
        gateway = self.gateway
        buffered_max = gateway.limits.max_buffered_response_bytes
        while (slot := await self.slots.get()) is not None:
            if slot.probes:
                if not await self._probe_answers(slot.probes):
                    self.writer.close()
                    return
                if not self.sasl.authenticated and self.sasl.rounds:
                    self._sasl_confirmed()
            if slot.local is not None:
                try:
                    frame = await slot.local
                except FrameError:
                    self.writer.close()  # the client reconnects and retries
                    return
            else:
                try:
                    assert self.up_reader is not None  # opened before the request was forwarded
                    frame = await read_frame(self.up_reader, 2**31 - 1, min_frame=4)
                except FrameError as exc:
                    frame, why = None, str(exc)
                else:
                    why = "closed"
                if frame is None:  # e.g. a version the upstream does not have: it hangs up, so does the gateway
                    gateway.log_limited(("upstream hung up", self.target, slot.api_key, slot.api_version),
                                        "client %s: closing connection: upstream %s before answering api %d v%d",
                                        self.peer, why, slot.api_key, slot.api_version)
                    if gateway.observer is not None:
                        gateway.observer.upstream_error("closed")
                    self.writer.close()
                    return
                if slot.api_key in SASL_APIS:
                    self._sasl_response(slot, frame)
                elif not self.sasl.authenticated and self.sasl.rounds:
                    self._sasl_confirmed()
                if slot.api_key in REWRITTEN:
                    frame = await gateway.rewrite(slot.api_key, slot.api_version, frame)
            if gateway.observer is not None:
                gateway.observer.answered(slot.api_key, slot.api_version, len(frame), slot.local is not None,
                                          time.perf_counter() - slot.started)
            self.writer.write(frame)
            if self.sasl.failed or (slot.local is not None and self.authorizer is not None
                                    and self.authorizer.must_close):
                # the broker hangs up after a refused login: so does the gateway, at once; and a connection
                # whose broker went away and cannot judge a request closes once it answered it (retriable)
                await self.writer.drain()
                self.writer.close()
                return
            self.owed -= 1
            self.room.set()
            self.active_at = time.monotonic()
            if self.slots.empty() or self.writer.transport.get_write_buffer_size() > buffered_max:
                await self.writer.drain()  # a client that does not read stops being read (slots fill up)

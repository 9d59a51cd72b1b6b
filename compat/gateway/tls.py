"""TLS on the gateway's client side: its listeners' certificate, mutual TLS and SNI routing.

    tls = ListenerTLS.load("gateway.crt", "gateway.key", client_ca="clients-ca.pem")
    Gateway(..., tls=tls)                         # every listener speaks TLS
    Gateway(..., tls=tls, sni=SniRouting("kafka.example.com", port=9093))

With `client_ca` a client must present a certificate signed by it (mutual TLS); its subject (RFC 4514,
as Kafka names an SSL principal) is logged and kept as the connection's principal. With SNI routing one
TLS port serves every broker: a client reaching `broker-<id>.<suffix>` talks to broker <id>, one reaching
`bootstrap.<suffix>` (or any other name) to the bootstrap broker, and metadata names those hosts, so a
single wildcard certificate for `*.<suffix>` covers the cluster.

A TLS error, during the handshake or after it (a bad record, an alert), and a server name that is not
ASCII (Python's ssl reports it outside any handler) cost one throttled log line each, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
import sys
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("kprotocol.gateway")


@dataclass
class ListenerTLS:
    """The server side of the gateway's listeners."""

    context: ssl.SSLContext
    mutual: bool = False
    _names: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, repr=False)

    @classmethod
    def load(cls, cert: str | Path, key: str | Path, client_ca: str | Path | None = None) -> ListenerTLS:
        """A TLS 1.2+ server context from PEM files; a file that cannot be read is a ValueError."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(str(cert), str(key))
            if client_ca is not None:
                context.load_verify_locations(cafile=str(client_ca))
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"TLS certificate {cert} / key {key} / client CA {client_ca}: {exc}") from None
        tls = cls(context, mutual=client_ca is not None)
        context.sni_callback = tls._remember_name
        return tls

    def _remember_name(self, ssl_object: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        if name:
            self._names[ssl_object] = name.lower()

    def server_name(self, ssl_object: ssl.SSLObject | None) -> str | None:
        """The host name a client asked for (SNI), if it sent one."""
        return None if ssl_object is None else self._names.get(ssl_object)


def principal(ssl_object: ssl.SSLObject | None) -> str | None:
    """`User:<subject>` of a client's verified certificate (Kafka's default SSL principal), else None."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509  # only with mutual TLS

    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()


@dataclass(frozen=True)
class SniRouting:
    """One TLS port for every broker: `broker-<id>.<suffix>` and `bootstrap.<suffix>`."""

    suffix: str
    port: int = 0  # the port clients reach (0: the listener's own)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*", self.suffix):
            raise ValueError(f"SNI suffix {self.suffix!r}: a DNS name such as kafka.example.com")

    def broker_host(self, node_id: int) -> str:
        return f"broker-{node_id}.{self.suffix}"

    @property
    def bootstrap_host(self) -> str:
        return f"bootstrap.{self.suffix}"

    def node_of(self, server_name: str | None) -> int | None:
        """The broker a client asked for by name; None for the bootstrap (or no or another name)."""
        if server_name is None:
            return None
        match = re.fullmatch(rf"broker-(\d+)\.{re.escape(self.suffix.lower())}", server_name.lower())
        return int(match.group(1)) if match else None


LogLimited = Callable[..., None]  # Gateway.log_limited(key, message, *args)


def quiet_tls_errors(loop: asyncio.AbstractEventLoop, log_limited: LogLimited) -> None:
    """TLS errors of client connections as one throttled line each: the event loop's reports of SSL
    transports failing after the handshake, and Python's unraisable report of a non-ASCII server name."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, (ssl.SSLError, ssl.CertificateError)) or "SSL" in context.get("message", "") and \
                isinstance(exc, (OSError, EOFError)):
            peer = None
            transport = context.get("transport")
            if transport is not None:
                peer = transport.get_extra_info("peername")
            log_limited(("tls error", type(exc).__name__, getattr(exc, "reason", None)),
                        "client %s: TLS error, connection closed: %s", peer, exc or type(exc).__name__)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)
    loop.set_exception_handler(handler)
    _quiet_server_names(log_limited)


def _quiet_server_names(log_limited: LogLimited) -> None:
    """Python's ssl decodes a client's server name (SNI) as ASCII before any callback of ours and reports a
    failure as 'unraisable' (a raw traceback on stderr); such a report becomes one throttled line."""
    previous = sys.unraisablehook
    if getattr(previous, "_kprotocol_sni", False):
        return

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, UnicodeError) and isinstance(unraisable.object, (bytes, bytearray)):
            log_limited(("tls server name",), "client TLS handshake refused: a server name (SNI) that is not "
                        "ASCII: %r", bytes(unraisable.object)[:64], level=logging.WARNING)
            return
        previous(unraisable)
    hook._kprotocol_sni = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


class TlsServer:
    """A TLS listener that accepts sockets itself, so that a connection is counted (and refused) before its
    handshake: `handle(sock)` gets each accepted socket (it calls accept_tls). Stands for asyncio.Server."""

    def __init__(self, sock: socket.socket, handle: Callable[[socket.socket], Awaitable[None]]) -> None:
        self.sockets = [sock]
        self._handle = handle
        self._tasks: set[asyncio.Task] = set()
        self._loop_task = asyncio.ensure_future(self._accepting())

    @classmethod
    async def start(cls, host: str, port: int, handle: Callable[[socket.socket], Awaitable[None]]) -> TlsServer:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return cls(sock, handle)

    async def _accepting(self) -> None:
        loop = asyncio.get_running_loop()
        sock = self.sockets[0]
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # out of descriptors: wait a little, as asyncio's own servers do
                log.warning("TLS listener: accept failed (%s), retrying in 0.1 s", exc)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            task = asyncio.ensure_future(self._handle(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        self._loop_task.cancel()
        for task in list(self._tasks):
            task.cancel()
        self.sockets[0].close()

    async def wait_closed(self) -> None:
        await asyncio.gather(self._loop_task, *self._tasks, return_exceptions=True)


async def accept_tls(sock: socket.socket, context: ssl.SSLContext,
                     timeout_s: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The server side of TLS on an accepted socket, the handshake within `timeout_s`."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**16)
    protocol = asyncio.StreamReaderProtocol(reader)
    transport, _ = await asyncio.wait_for(loop.connect_accepted_socket(
        lambda: protocol, sock, ssl=context, ssl_handshake_timeout=timeout_s), timeout_s + 1)
    ssl_object = transport.get_extra_info("ssl_object")
    try:
        ssl_object.getpeercert()
    except (AttributeError, ValueError):  # the handshake broke off as it ended (uvloop reports it later)
        transport.abort()
        raise ConnectionError("TLS handshake did not complete") from None
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

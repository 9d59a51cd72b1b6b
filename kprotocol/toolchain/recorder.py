"""A recording TCP proxy on 127.0.0.1: every connection's two byte streams, as they crossed.

    proxy = RecordingProxy(("127.0.0.1", broker_port), port)   # clients connect to `port`
    ...
    proxy.stop(); proxy.connections[0].client, proxy.connections[0].server

Run a broker whose advertised listener is the proxy's port so that clients never go around it.
`check_round_trip` then splits each stream into frames and re-encodes every request and response.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from kprotocol.conversation import FrameReader
from kprotocol.framing import decode_request, decode_response, encode_request, encode_response
from kprotocol.runtime.primitives import I32


@dataclass
class Recording:
    """One proxied connection: what the client sent, what the server answered."""

    client: bytearray = field(default_factory=bytearray)
    server: bytearray = field(default_factory=bytearray)
    peer: tuple[str, int] = ("", 0)  # the client's address


class RecordingProxy:
    def __init__(self, upstream: tuple[str, int], port: int = 0) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", port))
        self.port = self.listener.getsockname()[1]
        self.connections: list[Recording] = []
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._accept_thread = threading.Thread(target=self._accept, daemon=True)
        self._accept_thread.start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, peer = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            recording = Recording(peer=peer[:2])
            self.connections.append(recording)
            self._sockets += [client, server]
            for source, target, sink in ((client, server, recording.client), (server, client, recording.server)):
                thread = threading.Thread(target=self._pump, args=(source, target, sink), daemon=True)
                thread.start()
                self._threads.append(thread)

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, sink: bytearray) -> None:
        """Relay one direction. Its end (FIN) is passed on as a half close, so the other direction keeps
        flowing until it ends too: a response in flight when the client closes still crosses, exactly
        as it would between the two peers directly. A reset ends both directions."""
        try:
            while chunk := source.recv(1 << 16):
                view = memoryview(chunk)
                while view:
                    sent = target.send(view)
                    sink += view[:sent]  # only what was passed on
                    view = view[sent:]
            target.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self, drain_timeout: float = 5.0) -> None:
        """Close every connection, once what was passed on left the sockets' send queues (the bytes a
        recording holds have then crossed the wire, where a capture sees them) or `drain_timeout` passed."""
        self._stopping.set()
        self.listener.close()
        deadline = time.monotonic() + drain_timeout
        while any(_unsent(sock) for sock in self._sockets) and time.monotonic() < deadline:
            time.sleep(0.02)
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            thread.join(5)


def _unsent(sock: socket.socket) -> int:
    """Bytes still in `sock`'s send queue (0 once closed)."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (OSError, ValueError):
        return 0


@dataclass
class RoundTripReport:
    exchanges: Counter[tuple[str, int]] = field(default_factory=Counter)
    mismatches: list[str] = field(default_factory=list)


def check_round_trip(client: bytes, server: bytes, report: RoundTripReport) -> None:
    """Decode and re-encode every complete frame of one connection; record any byte difference."""
    versions: dict[int, tuple[int, int]] = {}
    for _, frame in FrameReader().feed(bytes(client)):
        header, body = decode_request(frame)
        versions[header.correlation_id] = (header.request_api_key, header.request_api_version)
        if encode_request(header, body) != frame:
            report.mismatches.append(f"request {type(body).__name__} v{header.request_api_version}")
    for _, frame in FrameReader().feed(bytes(server)):
        (correlation_id,) = I32.unpack_from(frame, 4)
        api_key, api_version = versions[correlation_id]
        header, body = decode_response(frame, api_key, api_version)
        report.exchanges[(type(body).__name__.removesuffix("Response"), api_version)] += 1
        if encode_response(header, body, api_version) != frame:
            report.mismatches.append(f"response {type(body).__name__} v{api_version}")

"""The gateway's own connections to the upstream cluster: typed requests, one at a time per broker.

`UpstreamSecurity` is how every connection upstream is opened: plaintext or TLS (the clients' forwarded
connections too) and, for the gateway's own connections only, a SASL login with --upstream-config's
credentials (clients log in themselves, see sasl.py).
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from compat.gateway.proxy import read_frame
from compat.gateway.sasl import Credentials, login
from kprotocol.framing import decode_response, encode_request
from kprotocol.registry import message_class
from kprotocol.runtime.struct import Message

FIND_COORDINATOR = 10
CONNECT_TIMEOUT_S = 15.0
LEADER_MAX_AGE_S = 1.0
COORDINATORS_MAX = 10_000  # groups whose upstream coordinator is remembered


@dataclass(frozen=True)
class UpstreamSecurity:
    """security.protocol and what goes with it (built from Kafka client properties by config.py)."""

    protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    credentials: Credentials | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    async def open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to one broker, TLS when the protocol says so (no SASL: see UpstreamConnection)."""
        return await asyncio.wait_for(asyncio.open_connection(host, port, ssl=self.ssl_context), CONNECT_TIMEOUT_S)


PLAINTEXT = UpstreamSecurity()


class UpstreamConnection:
    """One connection; versions: the highest both sides know (from ApiVersions)."""

    def __init__(self, address: tuple[str, int], security: UpstreamSecurity = PLAINTEXT,
                 alternatives: Callable[[], Iterable[tuple[str, int]]] | None = None) -> None:
        self.address = address
        self.security = security
        self.alternatives = alternatives  # other brokers to try when this one is down (the bootstrap's)
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}

    async def send(self, request: Message, version: int | None = None) -> Message:
        async with self._lock:
            try:
                if self._writer is None:
                    await self._connect()
                try:
                    return await self._exchange(request, version)
                except (ConnectionError, asyncio.IncompleteReadError):
                    await self._connect()  # once more on a fresh connection
                    return await self._exchange(request, version)
            except asyncio.CancelledError:  # a caller's time-out mid-exchange: its answer must not reach the next
                self.close()
                raise

    async def _connect(self) -> None:
        self.close()
        candidates = [self.address, *(a for a in (self.alternatives() if self.alternatives else ()) if a != self.address)]
        for i, address in enumerate(candidates):
            try:
                self._reader, self._writer = await self.security.open(*address)
                self.address = address
                break
            except (OSError, asyncio.TimeoutError):
                if i == len(candidates) - 1:
                    raise
        response = await self._exchange(message_class("ApiVersionsRequest")(
            client_software_name="kprotocol-gateway", client_software_version="0"), 3)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        if self.security.sasl:
            if self.security.credentials is None:
                raise ValueError(f"security.protocol={self.security.protocol} needs sasl.mechanism and credentials")
            await login(self._exchange, self.security.credentials)

    def version_for(self, cls: type[Message]) -> int:
        low, high = cls.valid_versions
        if cls.api_key in self.versions:
            low, high = max(low, self.versions[cls.api_key][0]), min(high, self.versions[cls.api_key][1])
        return high

    async def _exchange(self, request: Message, version: int | None) -> Message:
        version = self.version_for(type(request)) if version is None else version
        header = message_class("RequestHeader")(request_api_key=request.api_key, request_api_version=version,
                                                correlation_id=next(self._ids), client_id="kprotocol-gateway")
        assert self._writer is not None and self._reader is not None
        self._writer.write(encode_request(header, request))
        await self._writer.drain()
        frame = await read_frame(self._reader, 2**31 - 1, min_frame=4)
        if frame is None:
            raise ConnectionError("upstream closed the connection")
        return decode_response(frame, request.api_key, version)[1]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class Upstream:
    """Connections to the bootstrap broker and to each group's coordinator."""

    def __init__(self, bootstrap: tuple[str, int], security: UpstreamSecurity = PLAINTEXT) -> None:
        self.security = security
        self.brokers: dict[int, tuple[str, int]] = {}  # node id -> address, as the cluster's metadata says
        self.bootstrap = UpstreamConnection(bootstrap, security, alternatives=lambda: self.brokers.values())
        self._brokers: dict[tuple[str, int], UpstreamConnection] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], tuple[UpstreamConnection, float]] = {}

    def connection(self, address: tuple[str, int]) -> UpstreamConnection:
        if address not in self._brokers:
            self._brokers[address] = UpstreamConnection(address, self.security)
        return self._brokers[address]

    async def leader(self, topic: str, partition: int) -> LeaderConnection:
        """A connection to whichever broker leads `topic`-`partition` (followed as leadership moves)."""
        return LeaderConnection(self, topic, partition)

    async def find_leader(self, topic: str, partition: int) -> UpstreamConnection:
        """The broker leading `topic`-`partition` now (the bootstrap's while unknown), cached for a second."""
        key = (topic, partition)
        cached = self._leaders.get(key)
        if cached is not None and time.monotonic() - cached[1] < LEADER_MAX_AGE_S:
            return cached[0]
        request = message_class("MetadataRequest")
        response = await self.bootstrap.send(request(topics=[request.MetadataRequestTopic(name=topic)],
                                                     allow_auto_topic_creation=False))  # never creates it
        self.brokers.update({b.node_id: (b.host, b.port) for b in response.brokers})
        found = self.bootstrap
        for t in response.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition and p.leader_id in self.brokers:
                    found = self.connection(self.brokers[p.leader_id])
        self._leaders[key] = (found, time.monotonic())
        return found

    async def coordinators(self, group_ids: list[str]) -> dict[str, UpstreamConnection]:
        """The coordinator connections of many groups: one FindCoordinator for those not known yet."""
        unknown = [g for g in dict.fromkeys(group_ids) if g not in self._coordinators]
        if unknown:
            find = message_class("FindCoordinatorRequest")
            response = await self.bootstrap.send(find(key_type=0, coordinator_keys=unknown))
            for c in response.coordinators:
                if c.error_code == 0:
                    self._remember(c.key, (c.host, c.port))
        return {g: (await self.coordinator(g)).connection if g not in self._coordinators
                else self.connection(self._coordinators[g]) for g in dict.fromkeys(group_ids)}

    def _remember(self, group_id: str, address: tuple[str, int]) -> None:
        """A group's coordinator, kept for COORDINATORS_MAX groups at most (the least recently learned go)."""
        self._coordinators.pop(group_id, None)
        self._coordinators[group_id] = address
        while len(self._coordinators) > COORDINATORS_MAX:
            self._coordinators.pop(next(iter(self._coordinators)))

    async def coordinator(self, group_id: str) -> UpstreamConnection:
        """The connection to `group_id`'s coordinator broker upstream."""
        address = self._coordinators.get(group_id)
        if address is None:
            find = message_class("FindCoordinatorRequest")
            for _ in range(50):
                response = await self.bootstrap.send(find(key_type=0, coordinator_keys=[group_id]))
                c = response.coordinators[0]
                if c.error_code == 0:
                    address = (c.host, c.port)
                    self._remember(group_id, address)
                    break
                await asyncio.sleep(0.2)
            else:
                raise ConnectionError(f"no upstream coordinator for group {group_id}")
        return GroupConnection(self, group_id, self.connection(address))

    def forget(self, group_id: str) -> None:
        self._coordinators.pop(group_id, None)

    def close(self) -> None:
        self.bootstrap.close()
        for connection in self._brokers.values():
            connection.close()


NOT_COORDINATOR_ERRORS = {14, 15, 16}  # coordinator loading, not available, not coordinator


@dataclass
class GroupConnection:
    """A group's coordinator connection that follows the coordinator when it moves (a broker restart,
    a leader election of __consumer_offsets): such an answer sends the request once more to the new one."""

    upstream: Upstream
    group_id: str
    connection: UpstreamConnection
    retries: int = field(default=20)

    async def send(self, request: Message, version: int | None = None) -> Message:
        for _ in range(self.retries):
            try:
                response = await self.connection.send(request, version)
            except (OSError, asyncio.TimeoutError):
                response = None
            if response is not None and not NOT_COORDINATOR_ERRORS & set(_error_codes(response)):
                return response
            self.upstream.forget(self.group_id)
            await asyncio.sleep(0.2)
            self.connection = (await self.upstream.coordinator(self.group_id)).connection
        if response is None:
            raise ConnectionError(f"the coordinator of group {self.group_id} stays unreachable")
        return response


def _error_codes(message: Message) -> Iterable[int]:
    """The error codes of a group response: its own, its groups' (results'), its topics' partitions'."""
    if hasattr(message, "error_code"):
        yield message.error_code
    for group in [*(getattr(message, "groups", ()) or ()), *(getattr(message, "results", ()) or ())]:
        yield from _error_codes(group)  # DescribeGroups' and OffsetFetch's groups, DeleteGroups' results
    for topic in getattr(message, "topics", ()) or ():
        for partition in getattr(topic, "partitions", ()) or ():
            if hasattr(partition, "error_code"):
                yield partition.error_code


@dataclass
class LeaderConnection:
    """The connection to a partition's leader, found again when its broker goes away or it moves
    (a NOT_LEADER answer makes the caller retry; the next call asks the metadata again after a second)."""

    upstream: Upstream
    topic: str
    partition: int
    timeout_s: float = 30.0

    async def send(self, request: Message, version: int | None = None) -> Message:
        deadline = time.monotonic() + self.timeout_s
        while True:
            connection = await self.upstream.find_leader(self.topic, self.partition)
            try:
                return await connection.send(request, version)
            except (OSError, asyncio.TimeoutError):
                self.upstream._leaders.pop((self.topic, self.partition), None)
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

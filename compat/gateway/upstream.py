"""The gateway's own connections to the upstream cluster: typed requests, one at a time per broker."""

from __future__ import annotations

import asyncio
import itertools

from compat.gateway.proxy import read_frame
from kprotocol.framing import decode_response, encode_request
from kprotocol.registry import message_class
from kprotocol.runtime.struct import Message

FIND_COORDINATOR = 10


class UpstreamConnection:
    """One connection; versions: the highest both sides know (from ApiVersions)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}

    async def send(self, request: Message, version: int | None = None) -> Message:
        async with self._lock:
            if self._writer is None:
                await self._connect()
            try:
                return await self._exchange(request, version)
            except (ConnectionError, asyncio.IncompleteReadError):
                await self._connect()  # once more on a fresh connection
                return await self._exchange(request, version)

    async def _connect(self) -> None:
        self.close()
        self._reader, self._writer = await asyncio.open_connection(*self.address)
        response = await self._exchange(message_class("ApiVersionsRequest")(
            client_software_name="kprotocol-gateway", client_software_version="0"), 3)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

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

    def __init__(self, bootstrap: tuple[str, int]) -> None:
        self.bootstrap = UpstreamConnection(bootstrap)
        self._brokers: dict[tuple[str, int], UpstreamConnection] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}

    async def coordinator(self, group_id: str) -> UpstreamConnection:
        """The connection to `group_id`'s coordinator broker upstream."""
        address = self._coordinators.get(group_id)
        if address is None:
            find = message_class("FindCoordinatorRequest")
            for _ in range(50):
                response = await self.bootstrap.send(find(key_type=0, coordinator_keys=[group_id]))
                c = response.coordinators[0]
                if c.error_code == 0:
                    address = self._coordinators[group_id] = (c.host, c.port)
                    break
                await asyncio.sleep(0.2)
            else:
                raise ConnectionError(f"no upstream coordinator for group {group_id}")
        if address not in self._brokers:
            self._brokers[address] = UpstreamConnection(address)
        return self._brokers[address]

    def forget(self, group_id: str) -> None:
        self._coordinators.pop(group_id, None)

    def close(self) -> None:
        self.bootstrap.close()
        for connection in self._brokers.values():
            connection.close()

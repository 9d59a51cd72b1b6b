"""The gateway's Prometheus metrics, health and readiness (`--metrics HOST:PORT`).

    GET /metrics   Prometheus text (prometheus-client): connections, requests per API and version with
                   latency histograms, bytes in and out, upstream errors, and per managed group its
                   state, group epoch, target assignment epoch, members per protocol, unowned tasks,
                   rebalances, commit errors and state persistence failures
    GET /healthz   200 while the process serves
    GET /readyz    200 once the state is loaded and the upstream cluster answers, else 503

The proxy calls `GatewayMetrics` for every answer; the managed groups are read on the event loop, so a
scrape sees one consistent moment. The endpoint is served on the event loop too, with its own connection
cap and time-out (limits.py), a scrape rendered on a worker thread: idle or slow HTTP clients cost
neither threads nor the Kafka clients' descriptors.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kprotocol.registry import api_classes

log = logging.getLogger("kprotocol.gateway")
LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
GROUP_STATES = ("empty", "not_ready", "assigning", "reconciling", "stable", "preparing_rebalance",
                "completing_rebalance", "dead")
OFFSET_COMMIT, TXN_OFFSET_COMMIT = 8, 28
READY_CACHE_S = 2.0
HEAD_MAX = 8192  # an HTTP request head longer than this is closed


def api_name(api_key: int) -> str:
    try:
        return api_classes(api_key)[0].__name__.removesuffix("Request")
    except (KeyError, ValueError, IndexError):
        return f"api-{api_key}"


class GatewayMetrics:
    """Counters the proxy feeds, plus the managed groups read at scrape time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.connections = Gauge("kprotocol_gateway_connections", "client connections open now", registry=r)
        self.accepted = Counter("kprotocol_gateway_connections_accepted", "client connections accepted", registry=r)
        self.requests = Histogram("kprotocol_gateway_request_latency_seconds",
                                  "from a request's arrival to its answer going back to the client",
                                  ["api", "version", "answered_by"], buckets=LATENCY_BUCKETS, registry=r)
        self.bytes = Counter("kprotocol_gateway_bytes", "bytes of Kafka frames", ["direction"], registry=r)
        self.upstream_errors = Counter("kprotocol_gateway_upstream_errors",
                                       "upstream connections refused or closed before an answer", ["kind"],
                                       registry=r)
        self.commit_errors = Counter("kprotocol_gateway_group_commit_errors",
                                     "offset commits of a managed group answered with an error",
                                     ["group", "error_code"], registry=r)
        self.persistence_failures = Counter("kprotocol_gateway_state_persistence_failures",
                                            "coordinator records the state log or topic could not store",
                                            registry=r)
        self._bytes_in, self._bytes_out = self.bytes.labels("in"), self.bytes.labels("out")
        self._children: dict[tuple[int, int, bool], Any] = {}
        self.groups: GroupsCollector | None = None
        self.state_loaded = False
        self.upstream_check: Callable[[], Awaitable[None]] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready_at: tuple[float, str | None] = (0.0, "not checked yet")
        self._server: asyncio.base_events.Server | None = None
        self._pool: ThreadPoolExecutor | None = None

    # -- the proxy's calls ------------------------------------------------------------------------------

    def connection_opened(self) -> None:
        self.connections.inc()
        self.accepted.inc()

    def connection_closed(self) -> None:
        self.connections.dec()

    def bytes_in(self, size: int) -> None:
        self._bytes_in.inc(size)

    def answered(self, api_key: int, api_version: int, size: int, local: bool, seconds: float) -> None:
        child = self._children.get((api_key, api_version, local))
        if child is None:
            child = self._children[(api_key, api_version, local)] = self.requests.labels(
                api_name(api_key), str(api_version), "gateway" if local else "upstream")
        child.observe(seconds)
        self._bytes_out.inc(size)

    def upstream_error(self, kind: str) -> None:
        self.upstream_errors.labels(kind).inc()

    # -- wrappers around the managed groups' handler and state ------------------------------------------

    def watch_handler(self, handler: Callable[..., Awaitable[Any] | None]) -> Callable[..., Awaitable[Any] | None]:
        """The local handler, counting the errors of the offset commits it answers."""
        def watched(header: Any, request: Any, client: str) -> Awaitable[Any] | None:
            pending = handler(header, request, client)
            if pending is None or header.request_api_key not in (OFFSET_COMMIT, TXN_OFFSET_COMMIT):
                return pending

            async def counted() -> Any:
                response = await pending
                for topic in response.topics:
                    for partition in topic.partitions:
                        if partition.error_code:
                            self.commit_errors.labels(request.group_id, str(partition.error_code)).inc()
                return response
            return counted()
        return watched

    def watch_state(self, state: Any) -> None:
        """Count the appends of the state log or topic that fail (the exception still propagates)."""
        append = state.append

        def counted(records: Any) -> Any:
            try:
                result = append(records)
            except Exception:
                self.persistence_failures.inc()
                raise
            if asyncio.iscoroutine(result):
                return self._count_failure(result)
            return result
        state.append = counted

    async def _count_failure(self, pending: Awaitable[Any]) -> Any:
        try:
            return await pending
        except Exception:
            self.persistence_failures.inc()
            raise

    # -- HTTP ---------------------------------------------------------------------------------------------

    def serve(self, host: str, port: int, loop: asyncio.AbstractEventLoop, limits: Any = None) -> int:
        """Start the HTTP endpoint on the event loop; returns its port. At most
        `gateway.metrics.max.connections` at once (the others closed at accept), each answered within
        `gateway.metrics.timeout.ms` or closed; a scrape is rendered on one of two worker threads."""
        from compat.gateway.limits import Limits

        self.loop = loop
        self.limits = limits or Limits()
        sock = socket.create_server((host, port))
        sock.setblocking(False)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gateway-metrics")
        self._open = 0
        self._starting = loop.create_task(self._start(sock))
        return sock.getsockname()[1]

    async def _start(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_server(self._http, sock=sock, limit=HEAD_MAX)

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One request (`Connection: close`): GET /healthz, /readyz, anything else the metrics."""
        if self._open >= self.limits.metrics_max_connections:
            writer.transport.abort()
            return
        self._open += 1
        try:
            async with asyncio.timeout(self.limits.metrics_timeout_ms / 1000):
                head = await reader.readuntil(b"\r\n\r\n")
                parts = head.split(b"\r\n", 1)[0].split()
                path = parts[1].decode("latin-1").split("?", 1)[0] if len(parts) >= 2 else "/"
                status, content_type, body = await self._answer(path)
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}"
                             "\r\nConnection: close\r\n\r\n".encode() + body)
                await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # a slow, silent or oversized request: closed, nothing logged
        finally:
            self._open -= 1
            writer.close()

    async def _answer(self, path: str) -> tuple[str, str, bytes]:
        loop = asyncio.get_running_loop()
        if path == "/healthz":
            return "200 OK", "text/plain", b"ok\n"
        if path == "/readyz":
            why = await loop.run_in_executor(self._pool, self._not_ready)
            return ("200 OK" if why is None else "503 Service Unavailable"), "text/plain", \
                (why or "ready").encode() + b"\n"
        return "200 OK", CONTENT_TYPE_LATEST, await loop.run_in_executor(self._pool, generate_latest, self.registry)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def _not_ready(self) -> str | None:
        if not self.state_loaded:
            return "state not loaded yet"
        checked_at, why = self._ready_at
        if time.monotonic() - checked_at > READY_CACHE_S and self.upstream_check is not None and self.loop:
            try:
                asyncio.run_coroutine_threadsafe(self.upstream_check(), self.loop).result(5)
                why = None
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready", with its reason
                why = f"upstream unreachable: {exc or type(exc).__name__}"
            self._ready_at = (time.monotonic(), why)
        return why


def _snake(state: str) -> str:
    """Kafka's state names as label values: NotReady -> not_ready, PreparingRebalance -> preparing_rebalance."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", state).lower()


class GroupsCollector:
    """Per managed group gauges, read from the MigrationCoordinator on the event loop at scrape time;
    rebalances are the group epoch's (classic generation's) increments the gateway has seen."""

    def __init__(self, coordinator: Any, groups: set[str], loop: asyncio.AbstractEventLoop) -> None:
        self.coordinator, self.groups, self.loop = coordinator, groups, loop
        self._epochs: dict[str, int] = {}
        self.rebalances: dict[str, int] = {}

    def sample(self) -> dict[str, dict[str, Any]]:
        """One reading of every managed group (call on the event loop)."""
        out = {}
        for group_id in sorted(self.groups):
            out[group_id] = reading = self._read(group_id)
            epoch, seen = reading["epoch"], self._epochs.get(group_id)
            if seen is not None and epoch > seen:
                self.rebalances[group_id] = self.rebalances.get(group_id, 0) + epoch - seen
            if seen is None or epoch > seen:
                self._epochs[group_id] = epoch
        return out

    def _read(self, group_id: str) -> dict[str, Any]:
        classic = self.coordinator.classic.get(group_id)
        group = self.coordinator.streams.group(group_id)
        if group is not None:
            classic_ids = self.coordinator.classic_info.get(group_id, {})
            targeted = {(sub, p) for target in group.targets.values() for sub, parts in target.active.items()
                        for p in parts}
            return {"state": _snake(group.state), "epoch": group.epoch,
                    "target_epoch": group.assignment_epoch,
                    "members": {"classic": sum(1 for m in group.members if m in classic_ids),
                                "streams": sum(1 for m in group.members if m not in classic_ids)},
                    "unowned": len(targeted - group.owners.active.keys())}
        if classic is not None:
            return {"state": _snake(str(classic.state)), "epoch": classic.generation,
                    "target_epoch": classic.generation, "members": {"classic": len(classic.members), "streams": 0},
                    "unowned": 0}
        return {"state": "empty", "epoch": 0, "target_epoch": 0, "members": {"classic": 0, "streams": 0},
                "unowned": 0}

    async def _sample(self) -> dict[str, dict[str, Any]]:
        return self.sample()

    def collect(self) -> Any:
        try:
            readings = asyncio.run_coroutine_threadsafe(self._sample(), self.loop).result(5)
        except Exception:  # noqa: BLE001 - a scrape never fails because of one reading
            log.exception("metrics: reading the managed groups failed")
            return
        state = GaugeMetricFamily("kprotocol_gateway_group_state", "1 for the managed group's current state",
                                  labels=["group", "state"])
        epoch = GaugeMetricFamily("kprotocol_gateway_group_epoch", "group epoch (classic: generation)",
                                  labels=["group"])
        target = GaugeMetricFamily("kprotocol_gateway_group_target_epoch", "target assignment epoch",
                                   labels=["group"])
        members = GaugeMetricFamily("kprotocol_gateway_group_members", "members by the protocol they speak",
                                    labels=["group", "protocol"])
        unowned = GaugeMetricFamily("kprotocol_gateway_group_tasks_unowned",
                                    "active tasks of the target assignment no member runs yet", labels=["group"])
        rebalances = CounterMetricFamily("kprotocol_gateway_group_rebalances",
                                         "group epoch increments seen by this gateway", labels=["group"])
        for group_id, r in readings.items():
            for name in sorted({*GROUP_STATES, r["state"]}):
                state.add_metric([group_id, name], 1.0 if name == r["state"] else 0.0)
            epoch.add_metric([group_id], r["epoch"])
            target.add_metric([group_id], r["target_epoch"])
            for protocol, count in r["members"].items():
                members.add_metric([group_id, protocol], count)
            unowned.add_metric([group_id], r["unowned"])
            rebalances.add_metric([group_id], self.rebalances.get(group_id, 0))
        yield from (state, epoch, target, members, unowned, rebalances)

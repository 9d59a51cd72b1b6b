"""`kprotocol gateway --upstream HOST:PORT --listen 127.0.0.1:PORT`: run the migration gateway."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import logging
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from compat.gateway.config import ConfigError, add_arguments, group_configs, limits
from kprotocol.tools.inputs import host_port

STREAMS_GROUP_APIS = {88: (0, 1), 89: (0, 1)}  # StreamsGroupHeartbeat, StreamsGroupDescribe
SHUTDOWN_S = 10.0  # SIGTERM: at most this long for the answers owed and the connections to close
log = logging.getLogger("kprotocol.gateway")


def register(subparsers: argparse._SubParsersAction) -> None:
    gateway = subparsers.add_parser("gateway", help="a Kafka proxy that keeps clients on itself (migration gateway)")
    gateway.add_argument("--upstream", type=host_port,
                         help="bootstrap broker HOST:PORT (required, here or in --config)")
    gateway.add_argument("--listen", type=host_port, default="127.0.0.1:9192",
                         help="bootstrap listener HOST:PORT (default: %(default)s)")
    gateway.add_argument("--broker-port-base", type=int,
                         help="listen for upstream broker N on BASE+N (default: free ports)")
    gateway.add_argument("--group", action="append", default=[], metavar="APP_ID",
                         help="a group (Streams application id) the gateway coordinates itself; repeatable")
    state = gateway.add_mutually_exclusive_group()
    state.add_argument("--state", type=Path, help="directory of the gateway's coordinator records (resumed on start)")
    state.add_argument("--state-topic", metavar="TOPIC",
                       help="keep the records in this compacted topic of the upstream cluster instead")
    gateway.add_argument("--initial-rebalance-delay-ms", type=int, default=3000,
                         help="how long a new group waits for more members (default: %(default)s, as Kafka)")
    gateway.add_argument("--group-config", action="append", default=[], metavar="KEY=VALUE",
                         help="a streams group config of Kafka's (streams.session.timeout.ms=10000, "
                              "streams.num.standby.replicas=1...) for the managed groups; repeatable")
    gateway.add_argument("--limit", action="append", default=[], metavar="KEY=VALUE",
                         help="a resource limit under Kafka's broker config name (max.connections, "
                              "max.connections.per.ip, connections.max.idle.ms, socket.request.max.bytes) or the "
                              "gateway's (gateway.request.read.timeout.ms, gateway.max.inflight.requests, "
                              "gateway.max.buffered.response.bytes); repeatable")
    gateway.add_argument("--verbose", action="store_true", help="log every request of the managed groups")
    gateway.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=None,
                         help="use uvloop when installed (default: yes)")
    add_arguments(gateway)  # TLS, --upstream-config, --metrics, --log-format, --config, --check-config
    gateway.set_defaults(func=run, gateway_parser=gateway)


async def _serve(args: argparse.Namespace) -> None:
    from compat.coordinator import MigrationCoordinator
    from compat.gateway.authorization import ClusterAcls
    from compat.gateway.managed import API_KEYS, ManagedGroups
    from compat.gateway.proxy import Gateway, current_target
    from compat.gateway.state import StateLog, StateTopic
    from compat.gateway.upstream import Upstream
    from kprotocol.streams_group import GroupConfig

    from compat.gateway.config import listener_tls, upstream_properties, upstream_security
    from compat.gateway.tls import SniRouting

    security = upstream_security(upstream_properties(args))
    tls = listener_tls(args)
    metrics = None
    if args.metrics:
        from compat.gateway.metrics import GatewayMetrics, GroupsCollector  # prometheus-client: [gateway] extra

        metrics = GatewayMetrics()
    managed = acls = None

    def handler(*a: Any) -> Any:
        return managed(*a) if managed else None

    common: dict[str, Any] = dict(
        extra_api_versions=STREAMS_GROUP_APIS, local=metrics.watch_handler(handler) if metrics else handler,
        local_api_keys=API_KEYS, upstream_security=security, observer=metrics, limits=limits(args.limit))
    sni = SniRouting(args.sni_suffix, args.sni_advertised_port) if args.sni_suffix else None
    tls_gateway = None
    if tls is not None and args.tls_listen is not None:  # plaintext on --listen, TLS on --tls-listen
        tls_gateway = Gateway(args.upstream, args.tls_listen, tls=tls, sni=sni, **common)
        tls = sni = None
    gateway = Gateway(args.upstream, args.listen, broker_port_base=args.broker_port_base, tls=tls, sni=sni,
                      **common)  # Produce, Fetch and the rest pass without being decoded

    def listener() -> tuple[int, str, int]:  # the proxy names its own listener for it in the answer
        """A managed group's coordinator as FindCoordinator names it: the broker the asking connection goes to
        (the brokers judge its ACLs on that connection, so a stopped broker's clients look again and are sent
        to a live one), else the lowest node id."""
        nodes = gateway.brokers.upstream
        target = current_target.get()
        node = next((n for n, address in nodes.items() if address == target), None)
        if node is None:
            node = min(nodes)
        return (node, *nodes[node])

    if args.group:
        config, classic = group_configs(args.group_config, GroupConfig(
            initial_rebalance_delay_ms=args.initial_rebalance_delay_ms))
        coordinator = MigrationCoordinator(config, classic_initial_delay_ms=args.initial_rebalance_delay_ms,
                                           classic_config=classic)
        upstream = Upstream(args.upstream, security)
        upstream.brokers = gateway.brokers.upstream  # the brokers it falls back on, as the gateway learns them
        state = StateLog(args.state) if args.state else StateTopic(upstream, args.state_topic) \
            if args.state_topic else None
        if metrics is not None and state is not None:
            metrics.watch_state(state)
        managed = ManagedGroups(args.group, coordinator, upstream, state, listener,
                                lists_groups=lambda: current_target.get() == gateway.brokers.upstream.get(
                                    min(gateway.brokers.upstream, default=-1)))
        await _starting(managed.start(), f"--state {args.state}" if args.state else
                        f"--state-topic {args.state_topic}" if args.state_topic else "starting")
        acls = ClusterAcls(upstream)  # whether the brokers enforce ACLs: else nothing is asked on clients' behalf
        await acls.start()
        for each in (gateway, tls_gateway):
            if each is not None:
                each.acls = acls
        if metrics is not None:
            metrics.registry.register(GroupsCollector(coordinator, managed.groups, asyncio.get_running_loop()))
    metrics_port = None
    if metrics is not None:  # bound before anything says the gateway is up: a port in use is one line, exit 2
        from compat.gateway.config import check_upstream

        metrics.upstream_check = lambda: check_upstream(args.upstream, security)
        try:
            metrics_port = metrics.serve(*args.metrics, asyncio.get_running_loop(), gateway.limits)
        except OSError as exc:
            raise StartError(f"--metrics {args.metrics[0]}:{args.metrics[1]}: {exc.strerror or exc}") from None
    await _starting(gateway.start(), f"upstream {args.upstream[0]}:{args.upstream[1]}",
                    f"--listen {args.listen[0]}:{args.listen[1]}")
    gc.freeze()  # the codec's classes and tables stay out of every later collection (shorter pauses)
    if metrics is not None:
        metrics.state_loaded = True
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    received: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):  # from here on a signal is an orderly stop
        loop.add_signal_handler(sig, lambda sig=sig: (received.append(sig), stop.set()))
    for each in (gateway, tls_gateway):
        if each is None:
            continue
        if each is tls_gateway:
            await _starting(each.start(), f"listening with TLS on {args.tls_listen[0]}:{args.tls_listen[1]}")
        kind = "TLS " if each.tls is not None else ""
        listeners = ", ".join(f"broker {n} -> {h}:{p}" for n in sorted(each.brokers.local_port)
                              for h, p in [each.brokers.local(n)])
        print(f"gateway {kind}on {each.listen[0]}:{each.port} for {args.upstream[0]}:{args.upstream[1]} "
              f"({listeners})", flush=True)
    if metrics_port is not None:
        print(f"metrics on http://{args.metrics[0]}:{metrics_port}/metrics", flush=True)
    print(banner(args, common["limits"]), flush=True)
    if args.group and not args.state and not args.state_topic:
        log.warning("the managed groups' state is in memory only: a restart loses their members and epochs "
                    "(--state DIR or --state-topic TOPIC keeps it)")
    await stop.wait()
    args.stopped_by = received[0]
    if acls is not None:
        await acls.stop()
    if managed is not None:
        await managed.stop_timers()
    try:  # the answers owed go out; a connection that does not let go does not keep the gateway up
        await asyncio.wait_for(asyncio.gather(gateway.close(), *([tls_gateway.close()] if tls_gateway else [])),
                               SHUTDOWN_S)
    except asyncio.TimeoutError:
        log.warning("connections still open after %.0f s of shutdown: closed", SHUTDOWN_S)
    if metrics is not None:
        metrics.close()
    if managed is not None:
        await managed.close()


def banner(args: argparse.Namespace, limits: Any) -> str:
    """What the gateway runs with: the groups it coordinates, where their state lives, its limits."""
    from compat.gateway.limits import Limits

    groups = ", ".join(args.group) if args.group else "none (every group stays with the brokers)"
    state = f"--state {args.state}" if args.state else f"--state-topic {args.state_topic}" if args.state_topic \
        else "in memory only (lost on restart)"
    shown = ", ".join(f"{name}={getattr(limits, attribute)}" for name, attribute in Limits.NAMES.items())
    return f"groups: {groups}; state: {state if args.group else '-'}; limits: {shown}"


class StartError(Exception):
    """A mistake in the gateway's command line or surroundings: one line, exit status 2."""


async def _starting(step: Awaitable[None], what: str, listen: str | None = None) -> None:
    """A start-up step whose failure is the operator's to fix: one line, no traceback. With `listen`,
    the step binds that listener, then reaches `what` (the upstream)."""
    from compat.gateway.state import StateTopicError

    try:
        await step
    except StateTopicError as exc:  # a state topic that cannot keep the state: the fix in one line
        raise StartError(f"{what}: {exc}") from None
    except OSError as exc:
        if listen is not None and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise StartError(f"{listen}: cannot listen: {exc.strerror or exc}") from None
        if listen is not None or isinstance(exc, ConnectionError):
            raise StartError(f"{what} unreachable: {exc.strerror or exc}") from None
        raise StartError(f"{what}: {exc.strerror or exc}") from None
    except (asyncio.TimeoutError, EOFError) as exc:
        raise StartError(f"{what} unreachable: {type(exc).__name__} {exc}") from None


INTERRUPTED = 130  # Ctrl-C (SIGINT), as a shell reports it; SIGTERM is an orderly stop: 0


def run(args: argparse.Namespace) -> int:
    try:
        code = _run(args)
    except StartError as exc:
        print(f"kprotocol gateway: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the signal handlers are in place
        print("kprotocol gateway: interrupted", file=sys.stderr)
        return INTERRUPTED
    stopped_by = getattr(args, "stopped_by", None)
    if stopped_by is None:
        return code
    interrupted = stopped_by == signal.SIGINT
    print(f"kprotocol gateway: {'interrupted (SIGINT)' if interrupted else 'stopped (SIGTERM)'}; "
          "connections closed", file=sys.stderr, flush=True)
    return INTERRUPTED if interrupted else 0


def _run(args: argparse.Namespace) -> int:
    from compat.gateway.config import apply, check, config_warnings, configure_logging, load_toml, validate

    try:
        if args.config is not None:
            apply(args, args.gateway_parser, load_toml(args.config))
        if args.check_config:
            return check(args)
        validate(args)
    except ConfigError as exc:
        raise StartError(f"configuration error: {exc}") from None
    configure_logging(args.log_format, args.verbose)
    for warning in config_warnings():
        log.warning(warning)
    if args.uvloop is not False:
        try:
            import uvloop
        except ImportError:
            if args.uvloop:
                print("kprotocol: --uvloop needs the uvloop package", file=sys.stderr)
                return 2
        else:
            uvloop.run(_serve(args))
            return 0
    asyncio.run(_serve(args))
    return 0

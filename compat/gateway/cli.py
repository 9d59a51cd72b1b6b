"""`kprotocol gateway --upstream HOST:PORT --listen 127.0.0.1:PORT`: run the migration gateway."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from kprotocol.tools.inputs import host_port

STREAMS_GROUP_APIS = {88: (0, 1), 89: (0, 1)}  # StreamsGroupHeartbeat, StreamsGroupDescribe


def register(subparsers: argparse._SubParsersAction) -> None:
    gateway = subparsers.add_parser("gateway", help="a Kafka proxy that keeps clients on itself (migration gateway)")
    gateway.add_argument("--upstream", type=host_port, required=True, help="bootstrap broker HOST:PORT")
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
    gateway.add_argument("--verbose", action="store_true", help="log every request of the managed groups")
    gateway.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=None,
                         help="use uvloop when installed (default: yes)")
    gateway.set_defaults(func=run)


async def _serve(args: argparse.Namespace) -> None:
    from compat.coordinator import MigrationCoordinator
    from compat.gateway.managed import API_KEYS, ManagedGroups
    from compat.gateway.proxy import Gateway, current_target
    from compat.gateway.state import StateLog, StateTopic
    from compat.gateway.upstream import Upstream
    from kprotocol.streams_group import GroupConfig

    managed = None
    gateway = Gateway(args.upstream, args.listen, broker_port_base=args.broker_port_base,
                      extra_api_versions=STREAMS_GROUP_APIS, local=lambda *a: managed(*a) if managed else None,
                      local_api_keys=API_KEYS)  # Produce, Fetch and the rest pass without being decoded

    def listener() -> tuple[int, str, int]:  # the proxy names its own listener for it in the answer
        node = min(gateway.brokers.upstream)
        return (node, *gateway.brokers.upstream[node])

    if args.group:
        config, classic = group_configs(args.group_config, GroupConfig(
            initial_rebalance_delay_ms=args.initial_rebalance_delay_ms))
        coordinator = MigrationCoordinator(config, classic_initial_delay_ms=args.initial_rebalance_delay_ms,
                                           classic_config=classic)
        upstream = Upstream(args.upstream)
        state = StateLog(args.state) if args.state else StateTopic(upstream, args.state_topic) \
            if args.state_topic else None
        managed = ManagedGroups(args.group, coordinator, upstream, state, listener,
                                lists_groups=lambda: current_target.get() == gateway.brokers.upstream.get(
                                    min(gateway.brokers.upstream, default=-1)))
        await _starting(managed.start(), f"reading the state in {state.path}" if state else "starting")
    await _starting(gateway.start(), f"listening on {args.listen[0]}:{args.listen[1]} for upstream "
                                     f"{args.upstream[0]}:{args.upstream[1]}")
    gc.freeze()  # the codec's classes and tables stay out of every later collection (shorter pauses)
    listeners = ", ".join(f"broker {n} -> {args.listen[0]}:{p}" for n, p in sorted(gateway.brokers.local_port.items()))
    print(f"gateway on {args.listen[0]}:{gateway.port} for {args.upstream[0]}:{args.upstream[1]} ({listeners})",
          flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await gateway.close()
    if managed is not None:
        await managed.close()


class StartError(Exception):
    """A mistake in the gateway's command line or surroundings: one line, exit status 2."""


def group_configs(items: list[str], base: Any) -> tuple[Any, Any]:
    """--group-config KEY=VALUE items: the streams-group configs and the classic-group bounds
    (group.min.session.timeout.ms, group.max.session.timeout.ms, group.max.size)."""
    from compat.classic import ClassicConfig
    from kprotocol.streams_group import GroupConfig

    pairs: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise StartError(f"--group-config {item!r} is not KEY=VALUE")
        pairs[name.strip()] = value.strip()
    classic = {k: v for k, v in pairs.items() if k in ClassicConfig.NAMES}
    try:
        return (GroupConfig.from_kafka({k: v for k, v in pairs.items() if k not in classic}, base),
                ClassicConfig.from_kafka(classic))
    except ValueError as exc:
        raise StartError(f"--group-config: {exc}") from None


async def _starting(step: Awaitable[None], what: str) -> None:
    """A start-up step whose failure is the operator's to fix: one line, no traceback."""
    try:
        await step
    except OSError as exc:
        raise StartError(f"{what}: {exc.strerror or exc}") from None
    except (ConnectionError, asyncio.TimeoutError, EOFError) as exc:
        raise StartError(f"{what}: upstream unreachable ({type(exc).__name__}: {exc})") from None


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except StartError as exc:
        print(f"kprotocol gateway: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
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

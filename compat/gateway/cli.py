"""`kprotocol gateway --upstream HOST:PORT --listen 127.0.0.1:PORT`: run the migration gateway."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from pathlib import Path

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
    from compat.gateway.proxy import Gateway
    from compat.gateway.state import StateLog, StateTopic
    from compat.gateway.upstream import Upstream
    from kprotocol.streams_group import GroupConfig

    managed = None
    gateway = Gateway(args.upstream, args.listen, broker_port_base=args.broker_port_base,
                      extra_api_versions=STREAMS_GROUP_APIS, local=lambda *a: managed(*a) if managed else None,
                      local_api_keys=API_KEYS)  # Produce, Fetch and the rest pass without being decoded

    def listener() -> tuple[int, str, int]:
        node = min(gateway.brokers.local_port)
        return (node, *gateway.brokers.local(node))

    if args.group:
        pairs = dict(item.partition("=")[::2] for item in args.group_config)
        config = GroupConfig.from_kafka(pairs, GroupConfig(initial_rebalance_delay_ms=args.initial_rebalance_delay_ms))
        coordinator = MigrationCoordinator(config, classic_initial_delay_ms=args.initial_rebalance_delay_ms)
        upstream = Upstream(args.upstream)
        state = StateLog(args.state) if args.state else StateTopic(upstream, args.state_topic) \
            if args.state_topic else None
        managed = ManagedGroups(args.group, coordinator, upstream, state, listener)
        await managed.start()
    await gateway.start()
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


def run(args: argparse.Namespace) -> int:
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

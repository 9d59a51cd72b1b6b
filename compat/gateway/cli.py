"""`kprotocol gateway --upstream HOST:PORT --listen 127.0.0.1:PORT`: run the migration gateway."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

STREAMS_GROUP_APIS = {88: (0, 0), 89: (0, 0)}  # StreamsGroupHeartbeat, StreamsGroupDescribe


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def register(subparsers: argparse._SubParsersAction) -> None:
    gateway = subparsers.add_parser("gateway", help="a Kafka proxy that keeps clients on itself (migration gateway)")
    gateway.add_argument("--upstream", type=_address, required=True, help="bootstrap broker HOST:PORT")
    gateway.add_argument("--listen", type=_address, default=("127.0.0.1", 9192),
                         help="bootstrap listener HOST:PORT (default: %(default)s)")
    gateway.add_argument("--broker-port-base", type=int,
                         help="listen for upstream broker N on BASE+N (default: free ports)")
    gateway.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=None,
                         help="use uvloop when installed (default: yes)")
    gateway.set_defaults(func=run)


async def _serve(args: argparse.Namespace) -> None:
    from compat.gateway.proxy import Gateway

    gateway = Gateway(args.upstream, args.listen, broker_port_base=args.broker_port_base,
                      extra_api_versions=STREAMS_GROUP_APIS)
    await gateway.start()
    listeners = ", ".join(f"broker {n} -> {args.listen[0]}:{p}" for n, p in sorted(gateway.brokers.local_port.items()))
    print(f"gateway on {args.listen[0]}:{gateway.port} for {args.upstream[0]}:{args.upstream[1]} ({listeners})",
          flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await gateway.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
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

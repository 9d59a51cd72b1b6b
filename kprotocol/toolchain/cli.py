"""`kprotocol kafka ...`: resolve Apache Kafka's jars and run a local broker for people (`make kafka`)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from kprotocol.toolchain.broker import KafkaBroker
from kprotocol.toolchain.maven import ToolchainError, kafka_libs, kafka_version, legacy_streams_libs, \
    legacy_streams_versions, project_jar
from kprotocol.tools.inputs import UsageError
from kprotocol.tools.interrupts import INTERRUPTED

CLEAN_EXITS = (0, 143)  # the JVM's exit status after a clean shutdown on SIGTERM is 128 + 15


def _resolve(args: argparse.Namespace) -> int:
    print(f"kafka {kafka_version()}: {kafka_libs()}")
    print(f"kprotocol java programs: {project_jar()}")
    if args.legacy:
        for version in legacy_streams_versions():
            print(f"kafka-streams {version}: {legacy_streams_libs(version)}")
    return 0


def _broker(args: argparse.Namespace) -> int:
    if args.dir is not None and Path(args.dir).exists() and not Path(args.dir).is_dir():
        raise UsageError(f"--dir {args.dir}: not a directory")
    try:
        broker = KafkaBroker.start(workdir=args.dir)
    except KeyboardInterrupt:  # the broker, if it was launched, is stopped by start() itself
        print("kprotocol: interrupted before the broker was ready; nothing left running", file=sys.stderr)
        return INTERRUPTED
    except (FileExistsError, NotADirectoryError) as exc:  # a file on the way to --dir
        raise UsageError(f"--dir {args.dir}: {exc.strerror}: {exc.filename}") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before saying so: a Ctrl-C right after the line stops it too
        signal.signal(sig, lambda *_: stop.set())
    print(f"Apache Kafka {kafka_version()} on {broker.bootstrap} (pid {broker.pid}, data {broker.data_dir}); "
          "Ctrl-C stops it", flush=True)
    while not stop.is_set() and broker.process.poll() is None:
        stop.wait(0.5)
    if not stop.is_set():  # it ended by itself
        code = broker.stop(keep_workdir=True)
        print(f"kprotocol: the broker exited by itself (exit {code}); its log: {broker.log_path}", file=sys.stderr)
        return 1
    code = broker.stop()
    print("broker stopped" if code in CLEAN_EXITS else f"broker stopped (exit {code})")
    return 0


def _guarded(func):  # noqa: ANN001, ANN202 - argparse callback wrapper
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except ToolchainError as exc:
            print(f"kprotocol: {exc}", file=sys.stderr)
            return 3
    return run


def register(subparsers: argparse._SubParsersAction) -> None:
    kafka = subparsers.add_parser("kafka", help="Apache Kafka from Maven Central: resolve it, run a local broker")
    sub = kafka.add_subparsers(dest="kafka_command", required=True)
    resolve = sub.add_parser("resolve", help="resolve Kafka's jars into the cache and build the Java programs")
    resolve.add_argument("--legacy", action="store_true", help="also the older Kafka Streams releases")
    resolve.set_defaults(func=_guarded(_resolve))
    broker = sub.add_parser("broker", help="run a single-node KRaft broker on 127.0.0.1 until interrupted")
    broker.add_argument("--dir", help="keep the broker's data and log in DIR (default: a temporary directory)")
    broker.set_defaults(func=_guarded(_broker))

"""The `kprotocol` command line: one subcommand per tool, each registered by its own module."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import kprotocol
from kprotocol.tools.inputs import UsageError

# Each module exposes `register(subparsers)`, adding its subcommand(s) with `func` set as the default.
COMMAND_MODULES = (
    "kprotocol.tools.demo",
    "kprotocol.tools.frames",
    "kprotocol.tools.message",
    "kprotocol.streams.cli",
    "kprotocol.records.cli",
    "kprotocol.assignor.cli",
    "kprotocol.streams_group.cli",
    "kprotocol.toolchain.cli",
    "kprotocol.pipeline.cli",
    "kprotocol.capture.cli",
    "compat.gateway.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kprotocol", description="Apache Kafka wire protocol and Kafka Streams rebalance tools.")
    parser.add_argument("--version", action="version", version=f"kprotocol {kprotocol.__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


USER_ERROR = 2  # as argparse: the command could not run on what it was given


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except UsageError as exc:
        sys.stderr.write(f"kprotocol: error: {exc}\n")
        return USER_ERROR
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:  # a user mistake: one line
        reason = exc.strerror if exc.filename else str(exc)
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"kprotocol: error: {where}{reason}\n")
        return USER_ERROR


if __name__ == "__main__":
    sys.exit(main())

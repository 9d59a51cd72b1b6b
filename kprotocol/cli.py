"""The `kprotocol` command line: one subcommand per tool, each registered by its own module.

A command's module is imported only when that command runs (a Spark executor running `pipeline`
needs neither the gateway nor the Kafka toolchain); `kprotocol --help` lists every command from
the table below without importing any of them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import kprotocol
from kprotocol.tools.inputs import UsageError
from kprotocol.tools.interrupts import INTERRUPTED, MESSAGE

# Command -> (module exposing `register(subparsers)`, which adds it with `func` set as the default; its help).
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("kprotocol.tools.demo", "decode the sample data installed with kprotocol to JSON lines"),
    "frames": ("kprotocol.tools.frames", "decode Kafka request/response byte streams"),
    "message": ("kprotocol.tools.message", "decode or encode one message body"),
    "streams-userdata": ("kprotocol.streams.cli", "decode Kafka Streams rebalance userdata"),
    "offsets": ("kprotocol.records.cli", "decode __consumer_offsets (and other coordinator) segments"),
    "assign": ("kprotocol.assignor.cli", "assign the tasks of a scenario JSON file"),
    "streams-groups": ("kprotocol.streams_group.cli", "describe streams groups (KIP-1071)"),
    "kafka": ("kprotocol.toolchain.cli", "Apache Kafka from Maven Central: resolve it, run a local broker"),
    "pipeline": ("kprotocol.pipeline.cli", "bulk decoding on Spark into Parquet tables"),
    "report": ("kprotocol.pipeline.cli", "rebalance timelines and tables from the pipeline's tables"),
    "capture": ("kprotocol.capture.cli", "decode Kafka traffic in pcap/pcapng captures"),
    "gateway": ("compat.gateway.cli", "a Kafka proxy that keeps clients on itself (migration gateway)"),
}
COMMAND_MODULES = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `command`, only that command's module is imported and the
    others are listed by name and help (enough for `--help` and for an unknown command)."""
    parser = argparse.ArgumentParser(
        prog="kprotocol", description="Apache Kafka wire protocol and Kafka Streams rebalance tools.")
    parser.add_argument("--version", action="version", version=f"kprotocol {kprotocol.__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    wanted = COMMAND_MODULES if command is None else tuple(m for n, (m, _) in COMMANDS.items() if n == command)
    for module in wanted:
        importlib.import_module(module).register(subparsers)
    for name, (_, help_text) in COMMANDS.items():
        if name not in subparsers.choices:
            subparsers.add_parser(name, help=help_text)
    return parser


def _command(argv: list[str]) -> str:
    """The command named in `argv` (the first word that is not an option), or "" for none."""
    return next((word for word in argv if not word.startswith("-")), "")


USER_ERROR = 2  # as argparse: the command could not run on what it was given


def _own_usage(parser: argparse.ArgumentParser) -> None:
    """Every sub-command parser puts itself in the namespace (the deepest one given wins), so that an
    unknown option is told with the usage of the sub-command it was given to, not the top level's."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(_usage_parser=sub)
                _own_usage(sub)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(_command(argv))  # imports the command's module: a Ctrl-C may come here too
        _own_usage(parser)
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            getattr(args, "_usage_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
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
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback
        sys.stderr.write(MESSAGE)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

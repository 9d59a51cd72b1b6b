"""`kprotocol demo`: decode the sample data installed with kprotocol to JSON lines (what `make demo` runs)."""

from __future__ import annotations

import argparse
import sys
from importlib.resources import as_file, files
from pathlib import Path

from kprotocol.capture.cli import run_summary
from kprotocol.coordinator_topics import CONSUMER_OFFSETS
from kprotocol.records.cli import run_decode, run_state
from kprotocol.tools import frames

SAMPLE_PORT = 60127  # the broker port of the sample capture


def run(args: argparse.Namespace) -> int:
    """A Kafka Streams member's session, a __consumer_offsets segment and its group state, and the
    summary of a capture of real clients."""
    with as_file(files("kprotocol.samples")) as samples:
        session = samples / "streams-session"
        print(f"# requests and responses of {session}.client.bin / .server.bin", file=sys.stderr)
        status = frames.run(Path(f"{session}.client.bin"), Path(f"{session}.server.bin"), sys.stdout)
        segment = samples / "consumer-offsets.log"
        offsets = argparse.Namespace(paths=[segment], group=None, progress=False, topic=CONSUMER_OFFSETS)
        print(f"# records of {segment}", file=sys.stderr)
        status |= run_decode(offsets, sys.stdout, sys.stderr)
        print(f"# group state rebuilt from {segment}", file=sys.stderr)
        status |= run_state(offsets, sys.stdout, sys.stderr)
        capture = samples / "clients.pcap"
        print(f"# Kafka exchanges in {capture}, per connection and API", file=sys.stderr)
        summary = argparse.Namespace(files=[capture], ports=(SAMPLE_PORT,), detect=False, format="json",
                                     pretty=False)
        status |= run_summary(summary, sys.stdout, sys.stderr)
    return status


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="decode the sample data installed with kprotocol to JSON lines")
    demo.set_defaults(func=run)

"""`kprotocol demo`: decode the bundled sample data to JSON lines (what `make demo` runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kprotocol.coordinator import CONSUMER_OFFSETS
from kprotocol.records.cli import run_decode, run_state
from kprotocol.tools import frames

FIXTURES = Path("fixtures")


def run(args: argparse.Namespace) -> int:
    """A Kafka Streams member's captured session, then a __consumer_offsets segment and its group state."""
    root: Path = args.fixtures
    session = root / "frames" / "streams-session"
    print(f"# requests and responses of {session}.client.bin / .server.bin", file=sys.stderr)
    status = frames.run(Path(f"{session}.client.bin"), Path(f"{session}.server.bin"), sys.stdout)
    segment = root / "offsets" / "00000000000000000000.log"
    offsets = argparse.Namespace(paths=[segment], group=None, progress=False, topic=CONSUMER_OFFSETS, indent=None)
    print(f"# records of {segment}", file=sys.stderr)
    status |= run_decode(offsets, sys.stdout, sys.stderr)
    print(f"# group state rebuilt from {segment}", file=sys.stderr)
    status |= run_state(offsets, sys.stdout, sys.stderr)
    return status


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="decode the bundled sample data to JSON lines")
    demo.add_argument("--fixtures", type=Path, default=FIXTURES, help="the fixtures directory (default: ./fixtures)")
    demo.set_defaults(func=run)

"""`kprotocol demo`: decode the bundled sample data to JSON lines (what `make demo` runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kprotocol.tools import frames

FIXTURES = Path("fixtures")


def run(args: argparse.Namespace) -> int:
    root: Path = args.fixtures
    session = root / "frames" / "streams-session"
    print(f"# decoding {session}.client.bin / .server.bin", file=sys.stderr)
    return frames.run(Path(f"{session}.client.bin"), Path(f"{session}.server.bin"), sys.stdout)


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="decode the bundled sample data to JSON lines")
    demo.add_argument("--fixtures", type=Path, default=FIXTURES, help="the fixtures directory (default: ./fixtures)")
    demo.set_defaults(func=run)

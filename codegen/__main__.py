"""`python -m codegen [--schemas DIR] [--out DIR] [--check]`: (re)generate kprotocol.generated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codegen.generate import render_package

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    parser.add_argument("--schemas", type=Path, default=ROOT / "schemas",
                        help="directory of spec files (the project's schemas/ or any upstream Kafka spec directory)")
    parser.add_argument("--out", type=Path, default=ROOT / "kprotocol" / "generated", help="package directory to write")
    parser.add_argument("--check", action="store_true", help="fail if the package differs from what would be generated")
    args = parser.parse_args(argv)

    files = render_package(args.schemas)
    existing = {p.name: p.read_text(encoding="utf-8") for p in args.out.glob("*.py")} if args.out.exists() else {}
    stale = sorted(name for name, text in files.items() if existing.get(name) != text)
    extra = sorted(set(existing) - set(files))
    if args.check:
        if stale or extra:
            print(f"generated code is stale: {len(stale)} file(s) differ, {len(extra)} extra; run `make generate`",
                  file=sys.stderr)
            for name in (stale + extra)[:20]:
                print(f"  {name}", file=sys.stderr)
            return 1
        print(f"generated code is up to date ({len(files)} files)")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in extra:
        (args.out / name).unlink()
    for name in stale:
        (args.out / name).write_text(files[name], encoding="utf-8")
    print(f"wrote {len(stale)} of {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

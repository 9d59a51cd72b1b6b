"""Coverage-guided fuzzing of one input family with atheris (libFuzzer for Python).

    python -m kprotocol.fuzz FAMILY [--seconds 60] [--runs N] [--corpus DIR] [--timeout 1]
    make fuzz FAMILY=records SECONDS=600

The corpus starts from the family's seeds (vectors and fixtures); inputs that raise anything but a
DecodeError, run over --timeout seconds or need over 2 GB are crashes, saved under build/fuzz/crashes/FAMILY/.
libFuzzer's final statistics (executions, peak RSS) close the output.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import sys
import types
from pathlib import Path
from typing import Any

from kprotocol.errors import DecodeError
from kprotocol.fuzz.targets import FAMILIES

MAX_LEN = {"captures": 8192, "records": 16384, "managed": 1024}  # whole captures and segments: small enough for many runs


def instrument_own(atheris: Any) -> None:
    """Coverage instrumentation of the functions of kprotocol and compat, the code under test."""
    own = [f for f in gc.get_objects() if isinstance(f, types.FunctionType)
           and (getattr(f, "__module__", None) or "").partition(".")[0] in ("kprotocol", "compat")]
    for func in own:
        atheris.instrument_func(func)
    print(f"INFO: instrumented {len(own)} functions of kprotocol and compat", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m kprotocol.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("--seconds", type=int, default=60, help="stop after this long (0: no limit)")
    parser.add_argument("--runs", type=int, default=-1, help="stop after this many executions (-1: no limit)")
    parser.add_argument("--corpus", type=Path, help="corpus directory (default build/fuzz/corpus/FAMILY)")
    parser.add_argument("--timeout", type=int, default=1,
                        help="seconds one input may take before it counts as a hang (more on a loaded machine)")
    parser.add_argument("--instrument", choices=("own", "all"), default="own",
                        help="coverage of kprotocol's and compat's code (default), or of everything imported "
                             "(minutes to start, several times fewer executions a second)")
    args = parser.parse_args()
    import atheris

    target, seeds = FAMILIES[args.family]
    corpus = args.corpus or Path("build/fuzz/corpus") / args.family
    crashes = Path("build/fuzz/crashes") / args.family
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    max_len = MAX_LEN.get(args.family, 65536)
    for seed in seeds():
        seed = seed[:max_len]
        (corpus / hashlib.sha1(seed).hexdigest()).write_bytes(seed)

    def one_input(data: bytes) -> None:
        try:
            target(data)
        except DecodeError:
            pass

    one_input(b"")  # import everything the target needs before instrumenting it
    if args.instrument == "all":
        atheris.instrument_all()
    else:
        instrument_own(atheris)
    atheris.Setup([sys.argv[0], str(corpus), f"-max_total_time={args.seconds}", f"-runs={args.runs}",
                   f"-timeout={args.timeout}", "-rss_limit_mb=2048", f"-max_len={max_len}", "-print_final_stats=1",
                   f"-artifact_prefix={crashes}/"], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

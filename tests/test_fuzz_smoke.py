"""A short run of every fuzz family under atheris (`make fuzz` runs them for as long as asked):
the harnesses work, seeds load, and a few thousand coverage-guided inputs (500 for whole
captures) find nothing."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kprotocol.errors import DecodeError
from kprotocol.fuzz.targets import FAMILIES


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_seeds_decode_or_fail_cleanly(family: str) -> None:
    target, seeds = FAMILIES[family]
    count = 0
    for seed in seeds():
        count += 1
        try:
            target(seed)
        except DecodeError:
            pass
    assert count > 0


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_atheris_smoke_run(family: str, tmp_path) -> None:
    runs = 500 if family == "captures" else 2000  # a capture per input is slow: `make fuzz` goes further
    done = subprocess.run([sys.executable, "-m", "kprotocol.fuzz", family, "--runs", str(runs), "--seconds", "120",
                           "--corpus", str(tmp_path / "corpus")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = int(re.search(r"stat::number_of_executed_units: (\d+)", done.stderr).group(1))
    assert executed >= runs
    assert not list((tmp_path / "build" / "fuzz" / "crashes" / family).iterdir())

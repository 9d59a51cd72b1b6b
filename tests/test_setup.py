"""Set-up as a newcomer meets it: `make test` checks every prerequisite first, in one line, and
`make demo` builds an environment with only what the demo needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT

BASICS = ("sh", "sed", "head", "id", "getcap", "cc")  # what the check itself runs, and a C compiler


def _bin(tmp_path: Path, *tools: str, python: str | None = sys.executable) -> Path:
    """A PATH directory holding only `tools` (and python3, unless None)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for tool in tools:
        if found := shutil.which(tool):
            (directory / tool).symlink_to(found)
    if python:
        (directory / "python3").symlink_to(python)
    return directory


def _make(path: Path, *targets: str) -> tuple[subprocess.CompletedProcess[str], float]:
    # as a newcomer's shell runs it: not inside `make test` (a make within make reports as make[1])
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")} | {"PATH": str(path)}
    start = time.monotonic()
    result = subprocess.run([shutil.which("make"), "--no-print-directory", *targets], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    return result, time.monotonic() - start


def test_make_test_names_every_missing_prerequisite_in_one_line_at_once(tmp_path: Path) -> None:
    result, seconds = _make(_bin(tmp_path, *BASICS), "test")
    assert result.returncode != 0 and seconds < 5, (seconds, result.stderr)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("make: ***")]
    assert len(lines) == 1 and not result.stdout, result.stderr
    assert "apt-get install openjdk-17-jdk-headless maven tcpdump tshark" in lines[0]
    assert "pytest" not in result.stdout + result.stderr  # nothing ran after the check


def test_an_old_python_is_named(tmp_path: Path) -> None:
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\ncase \"$*\" in *python_version*) echo 3.10.4;; esac\nexit 1\n")
    old.chmod(0o755)
    result, _ = _make(_bin(tmp_path, *BASICS, python=str(old)), "prereqs-demo")
    assert result.returncode != 0
    assert "Python 3.11+ (python3 is 3.10.4)" in result.stderr and "apt-get install python3" in result.stderr


def test_every_prerequisite_present_passes_silently() -> None:
    result = subprocess.run(["sh", ".ci/prereqs", "test"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    packages = subprocess.run(["sh", ".ci/prereqs", "--packages", "test"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30)
    assert packages.stdout == ""  # what .ci/run would install: nothing here


def test_the_demo_needs_neither_java_nor_the_extras(tmp_path: Path) -> None:
    result, _ = _make(_bin(tmp_path, *(tool for tool in BASICS if tool != "cc")), "prereqs-demo")
    assert (result.returncode, result.stderr) == (0, "")
    plan = subprocess.run(["make", "-n", "-B", ".venv-demo/.installed"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30).stdout
    install = [line for line in plan.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert install == [".venv-demo/bin/pip install -q -e ."], plan

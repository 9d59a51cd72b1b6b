"""The wheel as users get it: built from the checkout, installed without dev extras into a fresh
virtualenv, `kprotocol demo` run from another directory (its sample data is package data), the
code generator not installed, the compiled fast paths built."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("packaging")


def test_wheel_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path / "dist"), str(ROOT)], check=True, timeout=600)
    wheel = next((tmp_path / "dist").glob("kprotocol-*.whl"))
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    demo = subprocess.run([str(tmp_path / "venv" / "bin" / "kprotocol"), "demo"], cwd=elsewhere, capture_output=True,
                          text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr[-3000:]
    lines = [json.loads(line) for line in demo.stdout.splitlines()]
    assert any(line.get("apiName") == "JoinGroup" for line in lines)
    summary = lines[-1]
    assert summary["connections"] == 42 and sum(r["count"] for r in summary["rows"]) == 199
    probe = subprocess.run([str(python), "-c", "import importlib.util as u, kprotocol.runtime.accel as a; "
                            "import kprotocol, kprotocol.capture.walk as w; "
                            "print(u.find_spec('codegen') is None, a.ENABLED, w._walk is not None, kprotocol.__version__)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True)
    assert probe.stdout.split() == ["True", "True", "True", "0.1.0"]

"""schemas/ agrees with Kafka's reference specs field for field, and the generated code is current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codegen.generate import render_package
from codegen.jsonc import load
from conftest import ROOT, SHARED

REFERENCE = {p.name: p for p in (SHARED / "kafka-spec").rglob("*.json")}
OURS = {p.name: p for p in (ROOT / "schemas").glob("*.json")}


def _structure(node):
    """The spec without prose: descriptions are free text, everything else is wire structure."""
    if isinstance(node, dict):
        return {k: _structure(v) for k, v in node.items() if k != "about"}
    if isinstance(node, list):
        return [_structure(v) for v in node]
    return node


def test_one_schema_per_reference_spec() -> None:
    assert len(REFERENCE) > 250
    assert sorted(OURS) == sorted(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_schema_matches_reference(name: str) -> None:
    assert _structure(load(OURS[name])) == _structure(load(REFERENCE[name]))


def test_no_copied_descriptions() -> None:
    def abouts(node, out):
        if isinstance(node, dict):
            if isinstance(node.get("about"), str):
                out.add(node["about"])
            for v in node.values():
                abouts(v, out)
        elif isinstance(node, list):
            for v in node:
                abouts(v, out)
        return out

    theirs = set()
    for p in REFERENCE.values():
        abouts(load(p), theirs)
    ours = set()
    for p in OURS.values():
        abouts(load(p), ours)
    assert not (ours & theirs)


def test_generated_code_is_up_to_date() -> None:
    result = subprocess.run([sys.executable, "-m", "codegen", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_generator_reads_upstream_spec_directories() -> None:
    """Pointed at Kafka's own files (license headers, // and /* */ comments), it generates the same code."""
    assert render_package(SHARED / "kafka-spec") == render_package(ROOT / "schemas")


def test_check_fails_on_stale_code(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    assert subprocess.run([sys.executable, "-m", "codegen", "--out", str(out)], cwd=ROOT).returncode == 0
    (out / "join_group_request.py").write_text("# edited by hand\n")
    result = subprocess.run([sys.executable, "-m", "codegen", "--out", str(out), "--check"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1
    assert "join_group_request.py" in result.stderr

"""schemas/ agrees with Kafka's reference specs field for field, and the generated code is current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codegen.generate import render_package
from codegen.jsonc import load
from codegen.model import snake_case
from kprotocol.coordinator_topics.decode import EARLIER_LAYOUTS
from kprotocol.toolchain.release_specs import structure
from conftest import ROOT, SHARED
from spec_changes import rename_fields, renames, up_to

REFERENCE = {p.name: p for p in (SHARED / "kafka-spec").rglob("*.json")}
OURS = {p.name: p for p in (ROOT / "schemas").glob("*.json")}


def _without_prose(node):
    if isinstance(node, dict):
        return {k: _without_prose(v) for k, v in node.items() if k != "about"}
    if isinstance(node, list):
        return [_without_prose(v) for v in node]
    return node


def _no_defaults(node):
    if isinstance(node, dict):
        return {k: _no_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_no_defaults(v) for v in node]
    return node


def _structure(node):
    return structure(node, top=False)


def test_one_schema_per_reference_spec() -> None:
    """Every reference spec, plus those newer releases added (tests/test_java_tester.py)."""
    assert len(REFERENCE) > 250
    assert set(REFERENCE) <= set(OURS)


def _range(spec: dict) -> tuple[int, int]:
    low, _, high = spec["validVersions"].partition("-")
    return int(low), int(high or low)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_schema_matches_reference(name: str) -> None:
    """Field for field the reference spec; newer releases may only add versions at the top
    (tests/test_java_tester.py holds schemas/ to the resolved release)."""
    earlier = EARLIER_LAYOUTS.get(name.removesuffix(".json"))
    ours, reference = load(OURS[f"{earlier}.json"] if earlier else OURS[name]), load(REFERENCE[name])
    if earlier:  # the release changed this record's layout in place; the earlier one is kept under its own name
        reference = {**reference, "name": earlier, "type": "data"}
        reference.pop("apiKey", None)
    (low, high), (ref_low, ref_high) = _range(ours), _range(reference)
    assert (low == ref_low and high >= ref_high) or reference.get("type") == "data"
    if reference.get("type") == "data" and ours["type"].startswith("coordinator-"):
        # A record type since the release; its old version prefix became the record type, so a
        # key may restart at version 0: the same fields, in the same order, carry the same bytes.
        if _range(ours) != (ref_low, ref_high):
            assert [(f["name"], f["type"]) for f in ours["fields"]] == \
                [(f["name"], f["type"]) for f in reference["fields"]]
            return
        reference = {**reference, "type": ours["type"], "apiKey": ours["apiKey"]}
    reference = rename_fields(reference, renames(reference, ours))
    if ref_high < high or earlier:  # the release's defaults win (tests/test_java_tester.py holds them to it)
        ours, reference = _no_defaults(ours), _no_defaults(reference)
    assert _structure({**up_to(ours, ref_high, reference), "validVersions": None}) == \
        _structure({**up_to(reference, ref_high, reference), "validVersions": None})


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
    """Pointed at Kafka's own files (license headers, // and /* */ comments), it generates the same code
    for every spec that schemas/ holds unchanged."""
    theirs, ours = render_package(SHARED / "kafka-spec"), render_package(ROOT / "schemas")
    unchanged = [f"{snake_case(load(path)['name'])}.py" for name, path in REFERENCE.items()
                 if _without_prose(load(OURS[name])) == _without_prose(load(path))]
    assert len(unchanged) > 200
    assert [m for m in unchanged if theirs[m] != ours[m]] == []


def test_check_fails_on_stale_code(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    assert subprocess.run([sys.executable, "-m", "codegen", "--out", str(out)], cwd=ROOT).returncode == 0
    (out / "join_group_request.py").write_text("# edited by hand\n")
    result = subprocess.run([sys.executable, "-m", "codegen", "--out", str(out), "--check"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1
    assert "join_group_request.py" in result.stderr

"""Every golden vector made by Apache Kafka's Java code, both ways, one test per spec."""

from __future__ import annotations

import pytest

from kprotocol.runtime.json_codec import py_struct_to_json

import kprotocol
from kprotocol.coordinator_topics.decode import EARLIER_LAYOUTS
from kprotocol.coordinator_topics.record_types import OTHER_TOPICS
from kprotocol.runtime import accel, pure
from codegen.jsonc import load
from conftest import ROOT, SHARED, read_jsonl
from spec_changes import added_tagged, rename_json, renames, vector_target, without_keys

VECTOR_FILES = sorted(p for p in (SHARED / "vectors").glob("*.jsonl") if p.stem != "RecordBatches")


def test_every_vector_file_names_a_spec() -> None:
    assert len(VECTOR_FILES) > 200
    names = set(kprotocol.spec_names())
    assert {p.stem for p in VECTOR_FILES} <= names


REFERENCE_SPECS = {p.stem: p for p in (SHARED / "kafka-spec").rglob("*.json")}


def _changes(name: str) -> tuple[dict[str, str], set[str]]:
    """Fields the resolved release renamed in place since the reference specs (same bytes), and
    tagged fields it added (absent from the vectors' bytes, so only in our JSON at their defaults)."""
    if name not in REFERENCE_SPECS or name in EARLIER_LAYOUTS:
        return {}, set()
    reference, ours = load(REFERENCE_SPECS[name]), load(ROOT / "schemas" / f"{name}.json")
    return renames(reference, ours), added_tagged(reference, ours)


@pytest.mark.parametrize("path", VECTOR_FILES, ids=lambda p: p.stem)
def test_vectors(path) -> None:
    vectors = read_jsonl(path)
    assert vectors
    names, added = _changes(path.stem)
    for vec in vectors:
        vec = {**vec, "json": rename_json(vec["json"], names)}
        cls, version = vector_target(vec)
        raw = bytes.fromhex(vec["hex"])
        # The release turned some "data" specs into coordinator records with a record type as api key.
        assert cls.api_key == vec.get("apiKey", cls.api_key) or vec["name"] in EARLIER_LAYOUTS or \
            (vec.get("apiKey") is None and cls.__name__ in OTHER_TOPICS)
        decoded = cls.decode(raw, version)
        assert without_keys(decoded.to_json(version), added) == vec["json"], f"{vec['name']} v{version} decode"
        rebuilt = cls.from_json(vec["json"], version)
        assert rebuilt.encode(version) == raw, f"{vec['name']} v{version} encode"
        assert decoded.encode(version) == raw
        # The generated Python path must agree with the compiled fast path on every vector.
        assert pure.decode(cls, raw, version) == decoded
        assert pure.encode(rebuilt, version) == raw
        assert py_struct_to_json(decoded, version) == decoded.to_json(version)  # Python and compiled JSON agree


def test_compiled_fast_path_is_built() -> None:
    """`pip install` compiles kprotocol/_speedups.c; CI must exercise it (KPROTOCOL_PURE_PYTHON opts out)."""
    import os

    assert accel.ENABLED or os.environ.get("KPROTOCOL_PURE_PYTHON")

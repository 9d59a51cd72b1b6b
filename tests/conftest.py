"""Shared test fixtures: the reference data in ../shared beside the checkout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# `KPROTOCOL_HYPOTHESIS=exhaustive` runs many more examples (slow); CI uses the default profile.
settings.register_profile("default", max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("exhaustive", max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("KPROTOCOL_HYPOTHESIS", "default"))


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"reference data not found at {SHARED}: CI keeps shared/ beside the checkout")
    return SHARED

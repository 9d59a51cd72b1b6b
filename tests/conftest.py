"""Shared test fixtures: the reference data in ../shared beside the checkout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# `KPROTOCOL_HYPOTHESIS=exhaustive` runs many more examples (slow); CI uses the default profile.
# Hypothesis' health checks are on: a test that needs one off says which, and why, in its own settings.
settings.register_profile("default", max_examples=25, deadline=None)
settings.register_profile("exhaustive", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("KPROTOCOL_HYPOTHESIS", "default"))


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"reference data not found at {SHARED}: CI keeps shared/ beside the checkout")
    return SHARED


# --- Apache Kafka in the loop -------------------------------------------------------------------
# Tests that use these fixtures share one broker: they are kept on one xdist worker (group "kafka").
# A missing Java or Maven fails the run with one line; it never skips.

KAFKA_FIXTURES = {"kafka_broker"}
JAVA_TESTER_REPORTS = ROOT / ".pytest_cache" / "kprotocol" / "java-tester"  # one JSON file per pytest worker


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if KAFKA_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("kafka"))


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest):
    from kprotocol.toolchain import KafkaBroker, ToolchainError

    try:
        broker = KafkaBroker.start()
    except ToolchainError as exc:
        pytest.fail(f"Apache Kafka could not be started: {exc}", pytrace=False)
    yield broker
    failed = request.session.testsfailed > 0
    broker.stop(keep_workdir=failed)
    if failed:
        print(f"\nKafka broker log kept: {broker.log_path}")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller, or a run without xdist
        for old in JAVA_TESTER_REPORTS.glob("*.json"):
            old.unlink()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The Java round-trip tester's counts for this run (tests/test_java_tester.py)."""
    reports = [json.loads(p.read_text()) for p in sorted(JAVA_TESTER_REPORTS.glob("*.json"))]
    if not reports:
        return
    report = reports[0]
    total = {k: sum(r[k] for r in reports) for k in ("specVersions", "messages", "mismatches")}
    refused = sum(len(r["kafkaRefused"]) for r in reports)
    terminalreporter.section("Kafka Java round-trip tester")
    terminalreporter.write_line(
        f"{total['specVersions']} spec-versions, {total['messages']} messages "
        f"({report['examplesPerSpecVersion']} per spec-version), {total['mismatches']} mismatches, "
        f"{refused} refused by Kafka's classes")

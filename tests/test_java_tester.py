"""kprotocol's bytes and JSON judged by Apache Kafka's own generated Java classes, spec by spec.

For every spec of the resolved release, hypothesis-generated messages (unknown tagged fields and
nulls included) are encoded by kprotocol, read and re-written by Kafka's class in one long-lived
JVM, and must come back byte for byte, with Kafka's JSON converter output equal to `to_json`.
`KPROTOCOL_JAVA_TESTER_EXAMPLES` sets the messages per spec-version (default 50). Specs whose
wire structure in schemas/ differs from the release (kprotocol.toolchain.release_specs) are
counted as pending in the run's report instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from conftest import JAVA_TESTER_REPORTS
from kprotocol import message_class, spec_names
from kprotocol.fuzz.strategies import sample as draw
from kprotocol.toolchain.java_tester import JavaTester, Tally
from kprotocol.toolchain.release_specs import disagreements, kept_tagged, release_specs

EXAMPLES = int(os.environ.get("KPROTOCOL_JAVA_TESTER_EXAMPLES", "50"))
pytestmark = pytest.mark.xdist_group("jvm")
RELEASE = sorted(release_specs())
PENDING = disagreements()
TALLY = Tally()


@pytest.fixture(scope="module")
def java() -> Iterator[JavaTester]:
    with JavaTester() as tester:
        yield tester
    # this process's share; tests/conftest.py adds the workers' shares up
    report = {"specVersions": TALLY.spec_versions, "messages": TALLY.messages,
              "mismatches": len(TALLY.mismatches), "kafkaRefused": [vars(m) for m in TALLY.kafka_refused],
              "pending": PENDING, "examplesPerSpecVersion": EXAMPLES}
    JAVA_TESTER_REPORTS.mkdir(parents=True, exist_ok=True)
    (JAVA_TESTER_REPORTS / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.json").write_text(
        json.dumps(report, indent=1))


@pytest.mark.parametrize("name", RELEASE)
def test_spec_round_trips_through_kafka(java: JavaTester, name: str) -> None:
    known = java.known()
    if name not in known:  # a spec file without generated classes: every version retired
        assert release_specs()[name]["validVersions"] == "none"
        return
    if name in PENDING:
        return  # reported as pending in the run's summary (schemas/ lags the release)
    low, high = known[name]
    cls = message_class(name)
    ours = cls.valid_versions
    assert ours[0] <= low and high <= ours[1], f"kprotocol has {name} {ours}, Kafka {low}-{high}"
    before = len(TALLY.mismatches), len(TALLY.kafka_refused)
    kept = frozenset(n[:1].lower() + n[1:] for n in kept_tagged(name))
    for version in range(low, high + 1):
        java.compare(name, version, draw(cls, version, EXAMPLES), TALLY, kept)
    mismatches = TALLY.mismatches[before[0]:]
    refused = TALLY.kafka_refused[before[1]:]
    assert not mismatches, mismatches[:3]
    assert not refused, refused[:3]


def test_every_release_spec_is_known_to_kprotocol_or_pending() -> None:
    missing = sorted(set(RELEASE) - set(spec_names()))
    assert all(name in PENDING for name in missing)

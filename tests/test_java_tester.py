"""kprotocol's bytes and JSON judged by Apache Kafka's own generated Java classes, spec by spec.

For every spec of the resolved release, hypothesis-generated messages (unknown tagged fields and
nulls included) are encoded by kprotocol, read and re-written by Kafka's class in one long-lived
JVM, and must come back byte for byte, with Kafka's JSON converter output equal to `to_json`.
`KPROTOCOL_JAVA_TESTER_EXAMPLES` sets the messages per spec-version (default 50). A spec whose
wire structure in schemas/ differs from the release (kprotocol.toolchain.release_specs) fails,
except for the differences kprotocol decided on (README "schemas/ follows the release"), listed
below with their reasons.
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
from kprotocol.toolchain.release_specs import disagreements, kept_tagged, ours, release_specs

EXAMPLES = int(os.environ.get("KPROTOCOL_JAVA_TESTER_EXAMPLES", "50"))
pytestmark = pytest.mark.xdist_group("jvm")
RELEASE = sorted(release_specs())
DIFFERENCES = disagreements()
TALLY = Tally()

# kprotocol keeps versions the release retired, so that older clients' traffic and logs still decode:
# spec -> kprotocol's lowest version (the release's is higher), by reason.
KIP_896 = "Kafka 4.0 removed them (KIP-896); 3.x clients and brokers still send them"
KEPT_VERSIONS: dict[str, tuple[int, str]] = {
    **{f"{api}{kind}": (0, KIP_896) for kind in ("Request", "Response") for api in (
        "AlterPartition", "AlterReplicaLogDirs", "CreateAcls", "CreateDelegationToken", "CreateTopics",
        "DeleteAcls", "DeleteTopics", "DescribeAcls", "DescribeConfigs", "DescribeDelegationToken",
        "DescribeLogDirs", "ExpireDelegationToken", "Fetch", "ListOffsets", "OffsetCommit", "OffsetFetch",
        "OffsetForLeaderEpoch", "Produce", "RenewDelegationToken", "WriteTxnMarkers")},
    **{f"{api}{kind}": (0, "version 0 of KIP-932 share groups was Kafka 4.0's early access; 4.1 replaced it")
       for kind in ("Request", "Response")
       for api in ("ShareAcknowledge", "ShareFetch", "ShareGroupDescribe", "ShareGroupHeartbeat")},
    "RequestHeader": (0, "header v0 frames ControlledShutdown v0, which 3.x brokers still sent"),
}
# Tagged fields schemas/ has that the release's spec has not (the release reads them as unknown tags:
# the bytes agree): spec -> field -> reason.
KEPT_TAGGED: dict[str, dict[str, str]] = {
    "ConsumerGroupMetadataValue": {"CreationTimeMs": "KIP-1282 (Kafka trunk): records of newer brokers decode"},
    "UpdateMetadataRequest": {"Type": "3.x controllers sent it; the release retired UpdateMetadata"},
}


@pytest.fixture(scope="module")
def java() -> Iterator[JavaTester]:
    with JavaTester() as tester:
        yield tester
    # this process's share; tests/conftest.py adds the workers' shares up
    report = {"specVersions": TALLY.spec_versions, "messages": TALLY.messages,
              "mismatches": len(TALLY.mismatches), "kafkaRefused": [vars(m) for m in TALLY.kafka_refused],
              "examplesPerSpecVersion": EXAMPLES}
    JAVA_TESTER_REPORTS.mkdir(parents=True, exist_ok=True)
    (JAVA_TESTER_REPORTS / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.json").write_text(
        json.dumps(report, indent=1))


@pytest.mark.parametrize("name", RELEASE)
def test_spec_round_trips_through_kafka(java: JavaTester, name: str) -> None:
    known = java.known()
    if name not in known:  # a spec file without generated classes: every version retired
        assert release_specs()[name]["validVersions"] == "none"
        return
    assert name not in DIFFERENCES, f"schemas/ {name} {DIFFERENCES[name]} (the release's spec)"
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


def test_every_release_spec_is_known_to_kprotocol() -> None:
    missing = sorted(set(RELEASE) - set(spec_names()))
    assert not [name for name in missing if release_specs()[name]["validVersions"] != "none"], missing


def test_schemas_differ_from_the_release_only_as_decided() -> None:
    """Every difference from the release's specs is one of the listed decisions: disagreements() sets
    aside versions below the release's lowest and tagged fields the release lacks, so both are pinned here."""
    assert DIFFERENCES == {}
    kept_versions = {}
    for name in RELEASE:
        spec, mine = release_specs()[name], ours(name)
        if mine is not None and spec["validVersions"] != "none":
            low, release_low = int(mine["validVersions"].split("-")[0]), int(spec["validVersions"].split("-")[0])
            if low < release_low:
                kept_versions[name] = low
    assert kept_versions == {name: low for name, (low, _) in KEPT_VERSIONS.items()}
    assert {name: kept_tagged(name) for name in RELEASE if kept_tagged(name)} == \
        {name: set(fields) for name, fields in KEPT_TAGGED.items()}

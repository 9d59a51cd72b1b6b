"""The answers the gateway builds itself. Kafka's own Java message classes read each back to the same bytes at
its version: the migration coordinator's answers to the group APIs it takes over (EXAMPLES requests drawn by
hypothesis at every version Kafka's release still reads, each sent to a fresh streams group of a classic and a
streams-protocol member), and the offset commit refusals (every partition refused, each topic named as the
request named it: by id from OffsetCommit v10 and TxnOffsetCommit v6). That says they are well-formed, not that
they are the broker's: the streams-group coordinator's answers to drawn requests are compared with a real 4.4
broker's, field by field, holding a streams group of the same shape."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from compat.gateway.managed import commit_refusal
import coordinator_fuzz
from coordinator_fuzz import Differential, DifferentialMachine
from kprotocol.fuzz.strategies import sample as draw
from kprotocol.registry import api_classes
from kprotocol.toolchain.java_tester import JavaTester
from test_compat_convergence import Client, Group, header

pytestmark = pytest.mark.xdist_group("jvm")
EXAMPLES = 8
COORDINATED = {11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup", 88: "StreamsGroupHeartbeat",
               89: "StreamsGroupDescribe"}
tokens = itertools.count()


@pytest.fixture(scope="module")
def java() -> Iterator[JavaTester]:
    with JavaTester() as tester:
        yield tester


def populated() -> Group:
    """A streams group "app" with a streams-protocol member and a classic member."""
    g = Group(standbys=1)
    for client in (Client("s", classic=False), Client("c", classic=True)):
        g.clients[client.name] = client
        g.turn(client)
    return g


def versions(java: JavaTester, request_cls: type, response_cls: type) -> range:
    """The request's versions that Kafka's release still reads (it retires old ones)."""
    low, high = request_cls.valid_versions
    java_low, java_high = java.known()[response_cls.__name__]
    return range(max(low, java_low), min(high, java_high) + 1)


def judge(java: JavaTester, spec: str, version: int, answers: list) -> None:
    payloads = [a.encode(version) for a in answers]
    for payload, result in zip(payloads, java.round_trip(spec, version, payloads)):
        assert "error" not in result, f"{spec} v{version}: Kafka cannot read {payload.hex()}: {result['error']}"
        assert result["hex"] == payload.hex(), f"{spec} v{version}: Kafka re-wrote {payload.hex()} as {result['hex']}"


@pytest.mark.parametrize("api_key", sorted(COORDINATED), ids=COORDINATED.get)
def test_coordinator_answers_are_valid_at_every_version(java: JavaTester, api_key: int) -> None:
    """Each drawn request answered exactly once, by the API's response class, in a form Kafka reads."""
    request_cls, response_cls = api_classes(api_key)
    assert versions(java, request_cls, response_cls), "no version both sides read: nothing would be judged"
    for version in versions(java, request_cls, response_cls):
        answers = []
        for request in draw(request_cls, version, EXAMPLES):
            if hasattr(request, "group_id"):
                request = request.replace(group_id="app")
            g = populated()
            token = next(tokens)
            got, _ = g.c.handle(token, header(api_key, version), request, g.now)  # never raises
            for _ in range(5):  # a classic join may be answered later, by the timers
                if got:
                    break
                g.now += 5_000
                got, _, _ = g.c.poll(g.now)
            assert [t for t, _ in got if t == token] == [token], f"{request!r}: answered {len(got)} times"
            answer = next(response for t, response in got if t == token)
            assert type(answer) is response_cls, answer
            answers.append(answer)
        assert len(answers) == EXAMPLES
        judge(java, response_cls.__name__, version, answers)


@pytest.mark.parametrize("api_key", [8, 28], ids=["OffsetCommit", "TxnOffsetCommit"])
def test_commit_refusals_name_every_partition_as_the_request_did(java: JavaTester, api_key: int) -> None:
    request_cls, response_cls = api_classes(api_key)
    by_id = 10 if api_key == 8 else 6
    assert versions(java, request_cls, response_cls), "no version both sides read: nothing would be judged"
    for version in versions(java, request_cls, response_cls):
        requests = draw(request_cls, version, EXAMPLES)
        answers = [commit_refusal(api_key, r, 22) for r in requests]
        for request, answer in zip(requests, answers):
            assert len(answer.topics) == len(request.topics)
            for asked, answered in zip(request.topics, answer.topics):
                if version >= by_id:
                    assert answered.topic_id == asked.topic_id
                else:
                    assert answered.name == asked.name
                assert [(p.partition_index, p.error_code) for p in answered.partitions] == \
                       [(p.partition_index, 22) for p in asked.partitions]
        judge(java, response_cls.__name__, version, answers)


# --- the coordinator's answers are the broker's -----------------------------------------------------------------

DIFFERENTIAL = {88: 24, 89: 16, 8: 6, 9: 6, 13: 8}  # api key -> requests drawn per version, both sides answering
SESSION_TIMEOUT_MS = 30_000  # the members heartbeat once per version: their sessions outlive the run


def naming(request: Any, version: int, group: str, topic: str, partitions: int) -> Any:
    """`request` with every group id it carries replaced by `group`, and a commit's topics by `topic`, of its
    `partitions` (see coordinator_fuzz.EXEMPT: unknown topics)."""
    if request.api_key == 8:  # one topic: the broker's request layer also merges a topic named twice
        request = request.replace(topics=[t.replace(name=topic, partitions=[
            p.replace(partition_index=p.partition_index % partitions) for p in t.partitions])
            for t in request.topics[:1]])
    if request.api_key == 9 and version >= 8:
        return request.replace(groups=[g.replace(group_id=group) for g in request.groups])
    if request.api_key == 89:
        return request.replace(group_ids=[group] * len(request.group_ids))
    return request.replace(group_id=group)


@pytest.fixture(scope="module")
def shaped(kafka_broker) -> Iterator[DifferentialMachine]:
    """A stateful streams group of two members on a 2-partition source, stable, at the broker and at the
    coordinator: built by the same valid heartbeats on both sides (the differential fuzzer's join and round)."""
    machine = DifferentialMachine()
    machine.broker = kafka_broker
    fuzzer_sessions, coordinator_fuzz.SESSION_TIMEOUT_MS = coordinator_fuzz.SESSION_TIMEOUT_MS, SESSION_TIMEOUT_MS
    try:
        machine.start(kind="stateful", partitions=2, standbys=1, members=2)
    finally:
        coordinator_fuzz.SESSION_TIMEOUT_MS = fuzzer_sessions
    for _ in range(3):
        machine.round()
    yield machine
    machine.d.conn.close()


@pytest.mark.parametrize("api_key", sorted(DIFFERENTIAL), ids=lambda k: api_classes(k)[0].__name__[:-7])
def test_coordinator_answers_drawn_requests_as_the_broker_does(shaped: DifferentialMachine, api_key: int) -> None:
    """Requests drawn by hypothesis at every version both sides speak, their group ids naming the shaped group,
    sent to the broker and to the coordinator: the answers (mostly refusals: error codes, messages, which fields
    are set) equal field by field except what coordinator_fuzz.EXEMPT names; so are the members' heartbeats in
    between, and the records both sides wrote."""
    d = shaped.d
    request_cls, _ = api_classes(api_key)
    low, high = d.version(request_cls, high=9 if api_key in (8, 9) else 99)  # EXEMPT: topic ids
    name = request_cls.__name__[:-7]
    before = Differential.compared[name]
    drawn = 0
    for version in range(low, high + 1):
        shaped.round()
        for request in draw(request_cls, version, DIFFERENTIAL[api_key]):
            request = naming(request, version, d.group, d.source, 2)
            theirs, ours = d.exchange(request, request, version)
            try:
                d.compare(name, theirs, ours, d.group)
            except AssertionError as difference:
                raise AssertionError(f"v{version} {json.dumps(request.to_json(version))}\n{difference}") from None
            if api_key == 88:
                d.wait_for_internal_topics(theirs)
            drawn += 1
    compared = Differential.compared[name] - before
    print(f"{name} v{low}-{high}: {compared} drawn requests answered alike")
    assert compared == drawn > 0, (name, compared, drawn)
    d.check_records()

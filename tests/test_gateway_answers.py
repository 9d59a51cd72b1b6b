"""Every answer the gateway builds itself is a valid answer at the request's version, judged by Kafka's
own Java message classes: the migration coordinator's answers to the group APIs it takes over
(requests drawn by hypothesis at every version, sent to a streams group with a classic and a
streams-protocol member), and the offset commit refusals (every partition refused, each topic named
as the request named it: by id from OffsetCommit v10 and TxnOffsetCommit v6)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from compat.gateway.managed import commit_refusal
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
    request_cls, response_cls = api_classes(api_key)
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

"""The streams-group coordinator against Apache Kafka's broker: the same heartbeats to both, compared
field by field, and the records each writes compared record by record."""

from __future__ import annotations

import time
import uuid

import pytest

from streams_conformance import Twin, comparable, topology

pytestmark = pytest.mark.usefixtures("kafka_broker")


def same(broker: dict, ours: dict) -> None:
    assert _norm(ours) == _norm(broker)


def _norm(value):
    """Order-free where Kafka's order is a hash table's: task lists and described members."""
    if isinstance(value, dict):
        out = {k: _norm(v) for k, v in value.items() if k != "throttleTimeMs"}
        if isinstance(out.get("members"), list):
            out["members"] = sorted(out["members"], key=lambda m: m["memberId"])
        return out
    if isinstance(value, list):
        items = [_norm(v) for v in value]
        return sorted(items, key=repr) if all(isinstance(v, dict) and "subtopologyId" in v for v in value) else items
    return value


def twin(kafka_broker, **configs) -> tuple[Twin, str, str]:
    group = f"conformance-{uuid.uuid4().hex[:8]}"
    source = f"{group}-input"
    t = Twin(kafka_broker, group, configs)
    t.create_topic(source, 4)
    return t, group, source


def check_records(t: Twin) -> None:
    assert [comparable(r) for r in t.records] == [comparable(r) for r in t.broker_records()]


def test_join_reassign_leave(kafka_broker) -> None:
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source], "changelogs": [f"{group}-store-changelog"]}])
    same(*t.heartbeat("m1", 0, topology=topo))     # missing internal topics: the broker creates them
    same(*t.heartbeat("m1"))                       # configured: every task to m1
    same(*t.heartbeat("m1"))                       # steady
    same(*t.describe())
    same(*t.heartbeat("m2", 0, topology=topo))     # a second process joins: its tasks are unreleased
    same(*t.heartbeat("m1"))                       # m1 is asked to revoke
    same(*t.heartbeat("m1"))                       # m1 revoked: next epoch
    same(*t.heartbeat("m2"))                       # m2 gets the released tasks
    same(*t.describe())
    same(*t.heartbeat("m2", -1))                   # m2 leaves
    same(*t.heartbeat("m1"))                       # m1 takes everything back
    same(*t.describe())
    check_records(t)

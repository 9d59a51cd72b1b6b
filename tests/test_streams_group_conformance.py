"""The streams-group coordinator against Apache Kafka's broker: the same heartbeats to both, compared
field by field, and the records each writes compared record by record."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest

from streams_conformance import HB, Twin, comparable, topology

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
    ours, theirs = [comparable(r) for r in t.records], [comparable(r) for r in t.broker_records()]
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"record {i} differs:\n ours:  {a}\n Kafka: {b}"
    assert len(ours) == len(theirs), f"{len(ours)} records here, {len(theirs)} in Kafka's log: {theirs[len(ours):]}"


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


def test_every_validation_rule(kafka_broker) -> None:
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source]}])
    task = HB.TaskIds(subtopology_id="0", partitions=[0])
    bad = [
        t.request("", 0, topology=topo),                                    # empty member id
        t.request("m", 0, group_id="", topology=topo),                      # empty group id
        t.request("m", 0, instance_id=" ", topology=topo),                  # empty instance id
        t.request("m", 0, rack_id="", topology=topo),                       # empty rack id
        t.request("m", 0, rebalance_timeout_ms=-1, topology=topo),          # no rebalance time-out on join
        t.request("m", 0, active_tasks=None, topology=topo),                # null tasks on join
        t.request("m", 0, standby_tasks=[task], topology=topo),             # owned tasks on join
        t.request("m", 0, warmup_tasks=[task], topology=topo),
        t.request("m", 0, topology=None),                                   # no topology on join
        t.request("m", 0, topology=topology(0, [{"id": "0", "sources": [source], "changelogs": ["c"],
                                                  "changelog_partitions": 3}])),
        t.request("m", -2),                                                 # static leave without instance id
        t.request("m", -3),                                                 # epoch below -2
        t.request("m", 5, active_tasks=[], standby_tasks=None, warmup_tasks=[]),
        t.request("m", 5, topology=topo),                                   # topology when not joining
        t.request("m", 0, topology=topology(0, [{"id": "0", "sources": []}]).replace(subtopologies=[
            topo.subtopologies[0].replace(source_topic_regex=["in.*"])])),  # regular expressions
        t.request("m", 3),                                                  # unknown group
        t.request("m", -1),                                                 # leave of an unknown group
    ]
    for request in bad:
        same(*t.send(request))
    same(*t.heartbeat("m1", 0, topology=topo))
    for request in [t.request("nobody", 2),                                 # unknown member
                    t.request("m1", 99),                                    # epoch ahead: fenced
                    t.request("m1", 1),                                     # epoch behind: fenced
                    t.request("m1", 0, topology=topology(0, [{"id": "0", "sources": [source, "other"]}])),
                    t.request("m1", 0, instance_id="i1", topology=topo),
                    t.request("m1", 2, active_tasks=[task.replace(subtopology_id="9")]),
                    t.request("m1", 2, active_tasks=[task.replace(partitions=[7])]),
                    t.request("m1", -2, instance_id="i9"),                  # static leave of an unknown instance
                    t.request("nobody", -1)]:                               # leave of an unknown member
        same(*t.send(request))
    check_records(t)


def test_topology_statuses(kafka_broker) -> None:
    t, group, source = twin(kafka_broker)
    other = f"{group}-other"
    t.create_topic(other, 2)
    missing = topology(0, [{"id": "0", "sources": [source, f"{group}-absent"]}])
    same(*t.heartbeat("m1", 0, topology=missing))                            # MISSING_SOURCE_TOPICS
    same(*t.heartbeat("m1"))
    same(*t.describe())
    t2, group2, source2 = twin(kafka_broker)
    t2.create_topic(f"{group2}-two", 2)
    copartitioned = topology(0, [{"id": "0", "sources": [source2, f"{group2}-two"], "copartition": [[0, 1]]}])
    same(*t2.heartbeat("m1", 0, topology=copartitioned))                     # INCORRECTLY_PARTITIONED_TOPICS
    same(*t2.describe())
    t3, group3, source3 = twin(kafka_broker)
    t3.create_topic(f"{group3}-store-changelog", 2)                          # an internal topic with 2, not 4
    wrong = topology(0, [{"id": "0", "sources": [source3], "changelogs": [f"{group3}-store-changelog"]}])
    same(*t3.heartbeat("m1", 0, topology=wrong))
    t4, group4, source4 = twin(kafka_broker)
    repartitioned = topology(1, [
        {"id": "0", "sources": [source4], "repartition_sinks": [f"{group4}-rep"]},
        {"id": "1", "repartition_sources": {f"{group4}-rep": 0}, "changelogs": [f"{group4}-agg-changelog"]}])
    same(*t4.heartbeat("m1", 0, topology=repartitioned))                     # two internal topics to create
    same(*t4.heartbeat("m1"))
    same(*t4.describe())
    same(*t4.heartbeat("m2", 0, topology=repartitioned.replace(epoch=0)))    # STALE_TOPOLOGY
    same(*t4.heartbeat("m2"))
    same(*t4.heartbeat("m3", 0, topology=repartitioned.replace(epoch=2)))    # an update: refused
    for x in (t, t2, t3, t4):
        check_records(x)


def test_session_and_rebalance_timeouts(kafka_broker) -> None:
    t, group, source = twin(kafka_broker, **{"streams.session.timeout.ms": "3000",
                                             "streams.heartbeat.interval.ms": "500"})
    topo = topology(0, [{"id": "0", "sources": [source]}])
    same(*t.heartbeat("m1", 0, topology=topo))
    same(*t.heartbeat("m2", 0, topology=topo))
    same(*t.heartbeat("m1"))
    same(*t.heartbeat("m2"))
    silent_since = time.monotonic()                                          # m2 stops, m1 keeps heartbeating
    for at in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5):  # one near m2's expiry at 3 s waits past it (Twin.settle)
        time.sleep(max(0.0, silent_since + at - time.monotonic()))
        same(*t.heartbeat("m1"))
    t.poll()
    broker, ours = t.describe()
    same(broker, ours)
    assert [m["memberId"] for m in broker["members"]] == ["m1"], "m2 expired, m1 did not"
    same(*t.heartbeat("m1"))
    same(*t.heartbeat("m2", 2))                                              # the expired member is unknown
    check_records(t)


def test_static_members_and_shutdown(kafka_broker) -> None:
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source]}])
    same(*t.heartbeat("s1", 0, instance_id="i1", topology=topo))
    same(*t.heartbeat("s1", instance_id="i1"))
    same(*t.heartbeat("s2", 0, instance_id="i1", topology=topo))           # the instance id is taken
    same(*t.heartbeat("s1", -2, instance_id="i1"))                          # leaves for a while
    same(*t.describe())
    same(*t.heartbeat("s2", 0, instance_id="i1", topology=topo))           # comes back as a new member id
    same(*t.describe())
    same(*t.heartbeat("s2", instance_id="i1"))
    same(*t.heartbeat("d1", 0, topology=topo, shutdown_application=True))   # SHUTDOWN_APPLICATION
    same(*t.heartbeat("s2", instance_id="i1"))
    check_records(t)


def test_standbys_and_endpoints(kafka_broker) -> None:
    t, group, source = twin(kafka_broker, **{"streams.num.standby.replicas": "1"})
    endpoint = HB.Endpoint
    topo = topology(0, [{"id": "0", "sources": [source], "changelogs": [f"{group}-store-changelog"]}])
    same(*t.heartbeat("m1", 0, topology=topo, user_endpoint=endpoint(host="h1", port=1)))
    same(*t.heartbeat("m1"))
    same(*t.heartbeat("m2", 0, topology=topo, user_endpoint=endpoint(host="h2", port=2)))
    for _ in range(3):
        same(*t.heartbeat("m1"))
        same(*t.heartbeat("m2"))
    same(*t.describe())
    same(*t.heartbeat("m1", endpoint_information_epoch=0))
    check_records(t)


def test_group_max_size() -> None:
    """A broker of its own with `group.streams.max.size=1`: a second member is refused, the member
    already in the group may rejoin at epoch 0, and once it has left the other one gets in."""
    from kprotocol.toolchain import KafkaBroker

    with KafkaBroker.start(config={"group.streams.max.size": "1"}) as broker:
        t, group, source = twin(broker)
        t.coordinator.config = dataclasses.replace(t.coordinator.config, max_size=1)
        topo = topology(0, [{"id": "0", "sources": [source]}])
        same(*t.heartbeat("m1", 0, topology=topo))
        same(*t.heartbeat("m2", 0, topology=topo))   # GROUP_MAX_SIZE_REACHED
        same(*t.heartbeat("m1", 0, topology=topo))   # a known member rejoining
        same(*t.heartbeat("m1", -1))                  # the last member out: an empty target at the new epoch
        same(*t.describe())
        same(*t.heartbeat("m2", 0, topology=topo))
        same(*t.describe())
        check_records(t)

"""The streams-group coordinator against Apache Kafka 4.4's broker: the behaviours of issue 21, each
sent to both and compared field by field (records too), then a bounded run of the differential fuzzer
(tests/coordinator_fuzz.py; `make fuzz-coordinator SECONDS=...` runs it longer) and of the migration
coordinator's invariants (tests/compat_fuzz.py)."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from compat_fuzz import run_migration
from coordinator_fuzz import Differential, run_differential
from kprotocol.registry import message_class
from streams_conformance import Twin, comparable, topology
from test_streams_group_conformance import check_records, same

LEAVE = message_class("LeaveGroupRequest")
COMMIT = message_class("OffsetCommitRequest")
DESCRIBE = message_class("StreamsGroupDescribeRequest")
HB = message_class("StreamsGroupHeartbeatRequest")
FUZZ_SEQUENCES, FUZZ_STEPS = 5, 20  # in `make test`: about 20 s against the shared broker


def twin(broker, **configs) -> tuple[Twin, str, str]:
    group = f"differential-{uuid.uuid4().hex[:8]}"
    t = Twin(broker, group, configs)
    t.create_topic(f"{group}-input", 4)
    return t, group, f"{group}-input"


def check_group_records(t: Twin, group: str) -> None:
    t.group_id = group
    ours = [comparable(r) for r in t.records if r.group_id == group]
    assert ours == [comparable(r) for r in t.broker_records()]


def test_a_fenced_member_rejoins_at_epoch_zero_with_its_member_id(kafka_broker) -> None:
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source]}])
    same(*t.heartbeat("m1", 0, topology=topo))
    same(*t.heartbeat("m1"))
    same(*t.heartbeat("m2", 0, topology=topo))
    for _ in range(3):                                   # m1 gives up half its tasks: epochs move on
        same(*t.heartbeat("m1"))
        same(*t.heartbeat("m2"))
    same(*t.heartbeat("m1", 1))                          # a stale epoch: FENCED_MEMBER_EPOCH
    same(*t.heartbeat("m1", 0, topology=topo))           # rejoins as the Java client does: accepted as it is
    same(*t.heartbeat("m1"))
    same(*t.describe())
    check_records(t)


def test_a_static_member_that_left_with_minus_two_expires_at_its_session_time_out(kafka_broker) -> None:
    t, group, source = twin(kafka_broker, **{"streams.session.timeout.ms": "3000",
                                             "streams.heartbeat.interval.ms": "500"})
    topo = topology(0, [{"id": "0", "sources": [source]}])
    same(*t.heartbeat("s1", 0, instance_id="i1", topology=topo))
    same(*t.heartbeat("m2", 0, topology=topo))
    same(*t.heartbeat("s1", instance_id="i1"))
    same(*t.heartbeat("m2"))
    same(*t.heartbeat("s1", -2, instance_id="i1"))       # leaves for a while and never comes back
    left = time.monotonic()
    for at in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5):       # m2 heartbeats; near s1's expiry at 3 s it waits past it
        time.sleep(max(0.0, left + at - time.monotonic()))
        same(*t.heartbeat("m2"))
    t.poll()
    broker, ours = t.describe()
    same(broker, ours)                                   # s1 is gone, its tasks went to m2
    assert [m["memberId"] for m in broker["members"]] == ["m2"]
    same(*t.heartbeat("m2"))
    check_records(t)


@pytest.mark.parametrize("ids", [["m0-1", "m1-1", "m2-1", "m1-2", "m0-2", "m1-3"],   # the sixth grows the table
                                 ["m0-1", "m2-1", "m1-2", "m0-2", "m1-3"]])
def test_endpoints_are_listed_in_the_member_tables_order_with_the_joining_member_in_it(kafka_broker,
                                                                                      ids: list[str]) -> None:
    """Found by the fuzzer: Kafka lists the other members' endpoints in its member table's order (before the
    heartbeat's records are replayed); the fifth member's second put (its current assignment) doubles the table,
    which reorders it for the sixth."""
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source]}])
    for member in ids:
        same(*t.heartbeat(member, 0, topology=topo, user_endpoint=HB.Endpoint(host=member, port=1)))
    check_records(t)


def test_an_update_of_a_member_may_grow_the_member_table(kafka_broker) -> None:
    """Found by the fuzzer: Kafka's table of members checks its size on every put, also one that replaces a member,
    so a heartbeat that only changes a member's metadata may double the table and reorder the endpoints."""
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source]}])
    ids = ["m0-1", "m3-1", "m3-2", "m1-1", "m2-1"]                  # five members fill a table of four slots
    for member in ids:
        same(*t.heartbeat(member, 0, topology=topo, user_endpoint=HB.Endpoint(host=member, port=1)))
    for member in ids:
        same(*t.heartbeat(member, rack_id="r2", endpoint_information_epoch=0))  # a put of each: the table grows
    check_records(t)


def test_a_refused_static_join_relabels_the_cached_target(kafka_broker) -> None:
    """Found by the fuzzer: Kafka 4.4 hands the cached target of an instance id's owner to a new member id before
    it checks that the owner left; refused (UNRELEASED_INSTANCE_ID), the owner then reconciles towards nothing
    while the group is not stable, and a stable group whose member holds other tasks than its target bumps its
    epoch for the same target."""
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source]}])
    same(*t.heartbeat("d1", 0, topology=topo))
    same(*t.heartbeat("d1"))                                         # stable: every task to d1
    same(*t.heartbeat("s1", 0, instance_id="i1", topology=topo))     # half of them move: the group reconciles
    same(*t.heartbeat("s2", 0, instance_id="i1", topology=topo))     # refused: i1 is s1's
    for _ in range(4):
        same(*t.heartbeat("s1", instance_id="i1"))
        same(*t.heartbeat("d1"))
    same(*t.describe())
    check_records(t)


def test_describing_a_group_that_is_not_a_streams_group(kafka_broker) -> None:
    t, group, source = twin(kafka_broker)
    other = f"{group}-plain"
    commit = COMMIT(group_id=other, generation_id_or_member_epoch=-1, member_id="", topics=[
        COMMIT.OffsetCommitRequestTopic(name=source, partitions=[
            COMMIT.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])])
    broker, ours = t.send(commit, 9)                     # an admin's commit creates an empty classic group
    same(broker, ours)
    broker, ours = t.send(DESCRIBE(group_ids=[other]))
    assert broker["groups"][0]["errorMessage"] == f"Group {other} is not a streams group."
    same(broker, ours)
    same(*t.send(t.request("m1", 3, group_id=other)))    # a heartbeat: GROUP_ID_NOT_FOUND, the same message
    same(*t.send(t.request("m1", 0, group_id=other, topology=topology(0, [{"id": "0", "sources": [source]}]))))
    check_group_records(t, other)                        # the join replaced the classic group: a tombstone


def test_leave_group_naming_streams_members_answers_unknown_member_id(kafka_broker) -> None:
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source]}])
    same(*t.heartbeat("m1", 0, topology=topo))
    same(*t.heartbeat("s1", 0, instance_id="i1", topology=topo))
    for version in range(6):
        if version >= 3:
            request = LEAVE(group_id=group, members=[LEAVE.MemberIdentity(member_id="m1"),
                                                     LEAVE.MemberIdentity(member_id="s1", group_instance_id="i1"),
                                                     LEAVE.MemberIdentity(member_id="nobody")])
        else:
            request = LEAVE(group_id=group, member_id="m1")
        broker, ours = t.send(request, version)
        same(broker, ours)
    same(*t.send(LEAVE(group_id=f"{group}-absent", members=[LEAVE.MemberIdentity(member_id="m1")])))
    same(*t.describe())                                  # both members are still there
    same(*t.heartbeat("m1"))
    check_records(t)


def test_describe_shows_the_topology_configured_at_the_last_write(kafka_broker) -> None:
    """Found by the fuzzer: a heartbeat that configures the topology anew and then fails (here: endpoints over a
    topology whose repartition topic no longer matches its source) keeps it for the next heartbeats, but Kafka
    describes its last committed state, which shows the new configuration only after the next write."""
    t, group, source = twin(kafka_broker)
    CREATE_PARTITIONS = message_class("CreatePartitionsRequest")
    topo = topology(0, [{"id": "0", "sources": [source], "repartition_sinks": [f"{group}-rep"]},
                        {"id": "1", "repartition_sources": {f"{group}-rep": 0}, "changelogs": [f"{group}-agg"]}])
    same(*t.heartbeat("m1", 0, topology=topo))           # creates the internal topics, then configures
    same(*t.heartbeat("m1"))
    same(*t.heartbeat("m1", -1))                         # the group is empty, its topology configured
    answer = t.conn.send(CREATE_PARTITIONS(topics=[CREATE_PARTITIONS.CreatePartitionsTopic(
        name=source, count=6, assignments=None)], timeout_ms=30000))
    assert answer.results[0].error_code == 0
    t.wait_for_topics([source], partitions={source: 6})
    broker, ours = t.heartbeat("m2", 0, topology=topo, user_endpoint=HB.Endpoint(host="h", port=1))
    assert broker["errorCode"] != 0                       # 4.4 fails it: endpoints of an unconfigurable topology
    same(broker, ours)
    same(*t.describe())                                  # still the committed configuration (4 partitions)
    commit = COMMIT(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        COMMIT.OffsetCommitRequestTopic(name=source, partitions=[
            COMMIT.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])])
    same(*t.send(commit, 9))                             # a write: the configuration done in place is committed
    same(*t.describe())
    check_records(t)


def test_a_heartbeat_failing_late_keeps_its_shutdown_request(kafka_broker) -> None:
    """Found by the fuzzer: a heartbeat that asks for the application's shutdown and then fails mapping its endpoint
    over a topology that cannot be configured keeps the request (Kafka sets it in place before failing)."""
    t, group, source = twin(kafka_broker)
    topo = topology(0, [{"id": "0", "sources": [source, f"{group}-absent"]}])
    same(*t.heartbeat("m1", 0, topology=topo))           # a source is missing: not configured
    epoch = t.epochs["m1"]
    broker, ours = t.heartbeat("m1", shutdown_application=True, user_endpoint=HB.Endpoint(host="h", port=1))
    assert broker["errorCode"] != 0
    same(broker, ours)
    broker, ours = t.heartbeat("m1", epoch)
    assert any(s["statusCode"] == 4 for s in broker["status"]), broker  # SHUTDOWN_APPLICATION
    same(broker, ours)
    check_records(t)


@pytest.mark.parametrize("case, subtopologies", [
    ("repartition source of -3 partitions", lambda s, g: [
        {"id": "0", "sources": [s], "repartition_sinks": [f"{g}-r"]},
        {"id": "1", "repartition_sources": {f"{g}-r": -3}}]),
    ("co-partition group naming a missing source index", lambda s, g: [
        {"id": "0", "sources": [s], "copartition": [[0, 3]]}]),
    ("co-partition group of a negative index", lambda s, g: [{"id": "0", "sources": [s], "copartition": [[-1]]}]),
    ("duplicate subtopology ids", lambda s, g: [{"id": "0", "sources": [s]}, {"id": "0", "sources": [s]}]),
    ("a subtopology without sources", lambda s, g: [{"id": "0"}]),
    ("a repartition source never written", lambda s, g: [
        {"id": "0", "sources": [s]}, {"id": "1", "repartition_sources": {f"{g}-r": 0}}]),
    ("repartition topics in a loop", lambda s, g: [
        {"id": "0", "repartition_sources": {f"{g}-a": 0}, "repartition_sinks": [f"{g}-b"]},
        {"id": "1", "repartition_sources": {f"{g}-b": 0}, "repartition_sinks": [f"{g}-a"]}]),
    ("invalid topic names", lambda s, g: [{"id": "0", "sources": ["a b", s], "repartition_sinks": ["b?"],
                                           "changelogs": ["d/"]}, {"id": "1", "sources": [".."]}]),
    ("internal topics", lambda s, g: [{"id": "0", "sources": ["__consumer_offsets", s],
                                       "changelogs": ["__transaction_state"]}]),
])
def test_invalid_topologies_get_the_brokers_error_and_change_nothing(kafka_broker, case, subtopologies) -> None:
    t, group, source = twin(kafka_broker)
    broker, ours = t.send(t.request("m1", 0, topology=topology(0, subtopologies(source, group))))
    assert broker["errorCode"] != 0, case
    same(broker, ours)
    assert t.coordinator.groups == {}, "a refused join leaves no group behind"
    same(*t.describe())
    same(*t.heartbeat("m1", 0, topology=topology(0, [{"id": "0", "sources": [source]}])))  # then a valid one
    check_records(t)


def test_differential_fuzzing_bounded(kafka_broker) -> None:
    """FUZZ_SEQUENCES random sequences (derandomized) of up to FUZZ_STEPS rules, against the broker: every answer
    and record equal (tasks placed differently by the assignors fail too), and enough of each kind compared."""
    before, divergences = Counter(Differential.compared), len(Differential.divergences)
    run_differential(kafka_broker, FUZZ_SEQUENCES, FUZZ_STEPS, shrink=False, derandomize=True)
    assert Differential.divergences[divergences:] == []
    compared = Differential.compared - before
    print(f"compared: {dict(compared)}")
    assert all(compared[kind] for kind in ("LeaveGroup", "OffsetCommit", "OffsetFetch", "StreamsGroupDescribe")), \
        compared
    assert compared["heartbeat"] >= 20 and compared["record"] >= 40, compared


def test_migration_coordinator_invariants_bounded() -> None:
    run_migration(examples=40, steps=30)

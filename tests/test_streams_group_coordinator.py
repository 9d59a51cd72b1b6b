"""The streams-group coordinator on its own: warm-ups, offsets, time-outs, internal topics, settings."""

from __future__ import annotations

import pytest

from kprotocol.registry import message_class
from kprotocol.streams_group import AssignmentSettings, GroupConfig, StreamsGroupCoordinator, TaskSets

HB = message_class("StreamsGroupHeartbeatRequest")
Header = message_class("RequestHeader")
STATEFUL = HB.Topology(epoch=0, subtopologies=[HB.Subtopology(
    subtopology_id="0", source_topics=["in"], state_changelog_topics=[HB.TopicInfo(name="app-store-changelog")])])


def header(api_key: int, version: int) -> object:
    return Header(request_api_key=api_key, request_api_version=version, correlation_id=1, client_id="c")


def heartbeat(c: StreamsGroupCoordinator, member: str, epoch: int, now: int, owned: TaskSets | None = None, **kw):
    wire = lambda tasks: [HB.TaskIds(subtopology_id=s, partitions=sorted(p)) for s, p in tasks.items()]  # noqa
    owned = owned or TaskSets()
    fields = dict(group_id="app", member_id=member, member_epoch=epoch, process_id=f"process-{member}",
                  active_tasks=wire(owned.active), standby_tasks=wire(owned.standby), warmup_tasks=wire(owned.warmup))
    if epoch == 0:
        fields.update(rebalance_timeout_ms=10_000, topology=STATEFUL)
    fields.update(kw)
    response, records = c.handle(header(88, 1), HB(**fields), now)
    assert response.error_code == 0, response.error_message
    return response, records


def tasks_of(response) -> TaskSets:
    return TaskSets.from_wire(response.active_tasks, response.standby_tasks, response.warmup_tasks)


def test_missing_internal_topics_are_left_for_the_caller() -> None:
    c = StreamsGroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0), topics={"in": 2})
    response, _ = heartbeat(c, "m1", 0, 0)
    assert [(s.status_code, s.status_detail) for s in response.status] == \
        [(3, "Internal topics are missing: app-store-changelog")]
    topic = c.internal_topics_to_create["app-store-changelog"]
    assert (topic.partitions, topic.replication_factor) == (2, -1)
    c.set_topics({"in": 2, "app-store-changelog": 2})
    response, _ = heartbeat(c, "m1", response.member_epoch, 1_000)  # after the assignment interval
    assert tasks_of(response).active == {"0": frozenset({0, 1})} and not response.status


def test_warmups_catch_up_then_take_over() -> None:
    """highly_available: the new process warms up first; once its reported offsets catch up, the next
    assignment moves active tasks to it."""
    config = GroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0,
                         assignment=AssignmentSettings(assignor="highly_available", acceptable_recovery_lag=100))
    c = StreamsGroupCoordinator(config, topics={"in": 4, "app-store-changelog": 4})
    offset = lambda tasks, value: [HB.TaskOffset(subtopology_id="0", partition=p, offset=value)  # noqa
                                   for p in sorted(tasks.get("0", ()))]
    r1, _ = heartbeat(c, "m1", 0, 0)
    m1 = tasks_of(r1)
    r1, _ = heartbeat(c, "m1", r1.member_epoch, 10, m1, task_offsets=offset(m1.active, 5_000),
                      task_end_offsets=offset(m1.active, 5_000))
    assert m1.active == {"0": frozenset(range(4))}
    r2, _ = heartbeat(c, "m2", 0, 20)
    now, m2 = 20, tasks_of(r2)
    for _ in range(4):
        now += 10
        r1, _ = heartbeat(c, "m1", r1.member_epoch, now, m1)
        m1 = tasks_of(r1) if r1.active_tasks is not None else m1
        r2, _ = heartbeat(c, "m2", r2.member_epoch, now, m2)
        m2 = tasks_of(r2) if r2.active_tasks is not None else m2
    assert m2.active == {} and m2.warmup, "a process without state only warms up"
    warming, epoch = m2.warmup, c.group("app").epoch
    r2, _ = heartbeat(c, "m2", r2.member_epoch, now + 10, m2, task_offsets=offset(warming, 4_950))
    assert c.group("app").epoch == epoch + 1, "caught up: a new assignment"
    for _ in range(6):
        now += 10
        r1, _ = heartbeat(c, "m1", r1.member_epoch, now, m1)
        m1 = tasks_of(r1) if r1.active_tasks is not None else m1
        r2, _ = heartbeat(c, "m2", r2.member_epoch, now, m2, task_offsets=offset(warming, 4_950))
        m2 = tasks_of(r2) if r2.active_tasks is not None else m2
    assert m2.active and set(m2.active["0"]) <= set(warming["0"])
    assert c.group("app").state == "Stable"


def test_offsets_commit_and_fetch_follow_member_epochs() -> None:
    c = StreamsGroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0),
                                topics={"in": 2, "app-store-changelog": 2})
    r, _ = heartbeat(c, "m1", 0, 0)
    commit, fetch = message_class("OffsetCommitRequest"), message_class("OffsetFetchRequest")

    def commit_at(epoch: int, version: int = 9):
        request = commit(group_id="app", generation_id_or_member_epoch=epoch, member_id="m1", topics=[
            commit.OffsetCommitRequestTopic(name="in", partitions=[
                commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=42, committed_metadata="x")])])
        return c.handle(header(8, version), request, 5)

    stale, records = commit_at(r.member_epoch + 1)
    assert stale.topics[0].partitions[0].error_code == 113 and records == []
    old, _ = commit_at(r.member_epoch, version=8)
    assert old.topics[0].partitions[0].error_code == 35
    ok, records = commit_at(r.member_epoch)
    assert ok.topics[0].partitions[0].error_code == 0
    assert records[0].to_dict()["value"]["data"]["offset"] == 42
    request = fetch(groups=[fetch.OffsetFetchRequestGroup(group_id="app", member_id="m1", member_epoch=r.member_epoch,
                                                          topics=None)])
    fetched, _ = c.handle(header(9, 9), request, 6)
    partition = fetched.groups[0].topics[0].partitions[0]
    assert (fetched.groups[0].topics[0].name, partition.committed_offset, partition.metadata) == ("in", 42, "x")
    replayed = StreamsGroupCoordinator.from_records(records)
    assert replayed.groups["app"].offsets[("in", 0)].offset == 42


def test_session_timeout_fences_through_poll() -> None:
    c = StreamsGroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0, session_timeout_ms=1_000,
                                            assignment_interval_ms=0),
                                topics={"in": 2, "app-store-changelog": 2})
    heartbeat(c, "m1", 0, 0)
    r2, _ = heartbeat(c, "m2", 0, 500)
    assert c.poll(900) == ([], 1_000)
    records, deadline = c.poll(1_000)
    assert [type(r.key).__name__ for r in records] == [
        "StreamsGroupCurrentMemberAssignmentKey", "StreamsGroupTargetAssignmentMemberKey",
        "StreamsGroupMemberMetadataKey", "StreamsGroupMetadataKey"]
    assert set(c.group("app").members) == {"m2"} and deadline == 1_500


def test_group_config_from_kafka_names() -> None:
    config = GroupConfig.from_kafka({"streams.session.timeout.ms": "3000", "streams.num.standby.replicas": "1",
                                     "streams.assignor.name": "highly_available"})
    assert (config.session_timeout_ms, config.assignment.num_standby_replicas, config.assignment.assignor) == \
        (3000, 1, "highly_available")
    with pytest.raises(ValueError, match="streams.nope"):
        GroupConfig.from_kafka({"streams.nope": "1"})


def test_transactional_commits_apply_at_the_marker() -> None:
    c = StreamsGroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0), topics={"in": 2})
    txn = message_class("TxnOffsetCommitRequest")
    request = txn(transactional_id="t", group_id="app", producer_id=7, producer_epoch=0,
                  generation_id_or_member_epoch=-1, member_id="", topics=[txn.TxnOffsetCommitRequestTopic(
                      name="in", partitions=[txn.TxnOffsetCommitRequestPartition(partition_index=1,
                                                                                 committed_offset=9)])])
    response, records = c.handle(header(28, 4), request, 0)
    assert response.topics[0].partitions[0].error_code == 0 and len(records) == 1
    assert c.groups.get("app") is None or not c.groups["app"].offsets  # pending until the transaction commits
    assert c.complete_transaction(7, committed=True) == records
    assert c.groups["app"].offsets[("in", 1)].offset == 9

"""`kprotocol streams-groups`: a classic-phase group behind the gateway shown as the runbook needs it,
and list / describe --offsets / --state / reset-offsets / delete against Kafka's own kafka-streams-groups.sh
on a group the broker coordinates."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer

from kprotocol.connection import Connection
from kprotocol.registry import message_class
from kprotocol.streams import AssignmentInfo, SubscriptionInfo, TaskId
from kprotocol.streams_group.stability import classic_unsettled
from kprotocol.toolchain import KafkaBroker
from kprotocol.toolchain.broker import run_kafka_tool
from migration import GatewayProcess

pytestmark = pytest.mark.xdist_group("kafka")
Join, Sync, Commit, Leave = (message_class(n) for n in ("JoinGroupRequest", "SyncGroupRequest", "OffsetCommitRequest",
                                                        "LeaveGroupRequest"))
Subscription, Assignment = message_class("ConsumerProtocolSubscription"), message_class("ConsumerProtocolAssignment")
HB = message_class("StreamsGroupHeartbeatRequest")
KAFKA_TOOL = "org.apache.kafka.tools.streams.StreamsGroupCommand"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kprotocol", "streams-groups", *args], capture_output=True, text=True,
                          timeout=120)


def table(text: str) -> list[list[str]]:
    """Rows of a whitespace-aligned table without its header (cells without spaces)."""
    return [line.split() for line in text.strip().splitlines()[1:] if line.strip()]


def classic_join(conn: Connection, app: str, topic: str) -> tuple[str, int]:
    """A classic Kafka Streams member (cooperative, SubscriptionInfo v11) joins and syncs: (member id, generation)."""
    info = SubscriptionInfo(version=11, latest_supported_version=11, process_id=uuid.uuid4(), task_offset_sums=(),
                            user_end_point="host-a:7070")
    metadata = struct.pack(">h", 3) + Subscription(topics=[topic], user_data=info.encode(), owned_partitions=[]).encode(3)
    member_id = ""
    for _ in range(3):
        join = conn.send(Join(group_id=app, member_id=member_id, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                              protocol_type="consumer",
                              protocols=[Join.JoinGroupRequestProtocol(name="stream", metadata=metadata)]), 9)
        member_id = join.member_id
        if join.error_code != 79:  # MEMBER_ID_REQUIRED: join again with the id
            break
    assert join.error_code == 0, join
    assert join.leader == member_id  # the only member: it assigns, as a classic Streams leader does
    info = AssignmentInfo(version=11, active_tasks=[TaskId(0, p) for p in range(3)])
    assignment = struct.pack(">h", 3) + Assignment(assigned_partitions=[Assignment.TopicPartition(
        topic=topic, partitions=[0, 1, 2])], user_data=info.encode()).encode(3)
    sync = conn.send(Sync(group_id=app, generation_id=join.generation_id, member_id=member_id,
                          protocol_type="consumer", protocol_name="stream",
                          assignments=[Sync.SyncGroupRequestAssignment(member_id=member_id, assignment=assignment)]), 5)
    assert sync.error_code == 0 and sync.assignment == assignment, sync
    return member_id, join.generation_id


def commit(conn: Connection, app: str, topic: str, member_id: str, epoch: int, offsets: dict[int, int]) -> None:
    answer = conn.send(Commit(group_id=app, generation_id_or_member_epoch=epoch, member_id=member_id, topics=[
        Commit.OffsetCommitRequestTopic(name=topic, partitions=[Commit.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
            for p, o in offsets.items()])]), 9)
    assert [p.error_code for t in answer.topics for p in t.partitions] == [0] * len(offsets), answer


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for p, n in per_partition.items():
        for i in range(n):
            producer.send(topic, value=b"v%d" % i, partition=p)
    producer.flush()
    producer.close()


@pytest.fixture
def gateway(kafka_broker: KafkaBroker, tmp_path: Path) -> Iterator[tuple[GatewayProcess, str, str]]:
    app = f"classic-{uuid.uuid4().hex[:6]}"
    topic = f"{app}-in"
    kafka_broker.create_topic(topic, 3)
    running = GatewayProcess(kafka_broker.bootstrap, [app], tmp_path / "state", tmp_path / "gateway.log").start()
    try:
        yield running, app, topic
    finally:
        running.stop()


def test_a_classic_group_behind_the_gateway_is_described(gateway, kafka_broker: KafkaBroker) -> None:
    running, app, topic = gateway
    produce(kafka_broker.bootstrap, topic, {0: 5, 1: 3, 2: 0})
    with Connection("127.0.0.1", running.port) as conn:
        member_id, generation = classic_join(conn, app, topic)
        commit(conn, app, topic, member_id, generation, {0: 2, 1: 3})
        where = ["--gateway", running.bootstrap, "--group", app]

        members = cli("describe", *where, "--members")
        assert members.returncode == 0, members.stderr
        assert "classic protocol" in members.stderr
        [row] = [line for line in members.stdout.splitlines()[1:]]
        assert row.split()[:5] == [app, "-", "-", member_id, "classic"]
        assert row.endswith("ACTIVE:0:[0, 1, 2]")

        summary = table(cli("describe", *where).stdout)
        assert summary == [[app, "Stable", "-", "-", "1", "1"]]

        stable = cli("describe", *where, "--wait-stable", "--timeout", "10")
        assert stable.returncode == 0 and stable.stdout.startswith(f"{app}: stable after"), stable

        offsets = table(cli("describe", *where, "--offsets").stdout)
        assert [r[:6] for r in offsets] == [[app, topic, "0", "2", "5", "3"], [app, topic, "1", "3", "3", "0"],
                                            [app, topic, "2", "-", "0", "0"]]
        assert {r[6] for r in offsets} == {member_id}

        state = table(cli("describe", *where, "--state").stdout)
        assert state == [[app, running.bootstrap, "(gateway)", "consumer/stream(classic)", "Stable", "-", "-", "1"]]

        listed = table(cli("list", "--gateway", running.bootstrap, "--state").stdout)
        assert [app, "Stable", "classic"] in listed

        refused = cli("delete", "--gateway", running.bootstrap, "--group", app)
        assert refused.returncode == 1 and "NON_EMPTY_GROUP (68)" in refused.stderr
        busy = cli("reset-offsets", "--gateway", running.bootstrap, "--group", app, "--all-input-topics",
                   "--to-earliest", "--execute")
        assert busy.returncode == 2 and "is Stable" in busy.stderr

        left = conn.send(Leave(group_id=app, members=[Leave.MemberIdentity(member_id=member_id)]), 3)
        assert left.error_code == 0, left
    # the application stopped: its offsets can be reset and the group deleted, through the gateway
    reset = cli("reset-offsets", "--gateway", running.bootstrap, "--group", app, "--input-topic", topic,
                "--to-latest", "--execute")
    assert reset.returncode == 0, reset.stderr
    assert table(reset.stdout) == [[app, topic, "0", "5"], [app, topic, "1", "3"], [app, topic, "2", "0"]]
    offsets = table(cli("describe", *where, "--offsets").stdout)
    assert [r[:6] for r in offsets] == [[app, topic, "0", "5", "5", "0"], [app, topic, "1", "3", "3", "0"],
                                        [app, topic, "2", "0", "0", "0"]]
    deleted = cli("delete", "--gateway", running.bootstrap, "--group", app)
    assert deleted.returncode == 0, deleted.stderr
    with Connection("127.0.0.1", kafka_broker.port) as conn:  # its offsets went with it, at the brokers too
        fetch = message_class("OffsetFetchRequest")
        answer = conn.send(fetch(group_id=app, topics=None), 7)
        assert answer.error_code in (0, 69) and not [p for t in answer.topics for p in t.partitions]


def test_classic_rules_need_every_member_synced() -> None:
    Described = message_class("DescribeGroupsResponse")
    subscribed = struct.pack(">h", 3) + Subscription(topics=["in"], owned_partitions=[]).encode(3)
    group = Described.DescribedGroup(group_id="g", group_state="Stable", protocol_type="consumer", protocol_data="stream",
                                     members=[Described.DescribedGroupMember(member_id="m1", client_id="c",
                                                                              client_host="/h", member_metadata=subscribed,
                                                                              member_assignment=b"")])
    assert classic_unsettled(group, {"in": 1}) == [
        "member m1 has no assignment of the current generation (not synced)",
        "partition in-0 is assigned to 0 members"]


# --- beside Kafka's kafka-streams-groups.sh, on a group the broker coordinates ---------------------------


def kafka_tool(*args: str) -> list[list[str]]:
    done = run_kafka_tool(KAFKA_TOOL, *args)
    return table(done.stdout)


def streams_member(conn: Connection, app: str, topic: str) -> tuple[str, int]:
    """A streams-protocol member joins and holds every task: (member id, member epoch)."""
    topology = HB.Topology(epoch=0, subtopologies=[HB.Subtopology(subtopology_id="0", source_topics=[topic])])
    member_id = str(uuid.uuid4())
    answer = conn.send(HB(group_id=app, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30_000,
                          process_id=str(uuid.uuid4()), topology=topology, active_tasks=[], standby_tasks=[],
                          warmup_tasks=[], user_endpoint=None, client_tags=[], task_offsets=[], task_end_offsets=[]))
    assert answer.error_code == 0, answer
    for _ in range(20):
        if answer.active_tasks:
            break
        time.sleep(0.5)
        answer = conn.send(HB(group_id=app, member_id=member_id, member_epoch=answer.member_epoch))
    return member_id, answer.member_epoch


def test_beside_kafkas_streams_groups_tool(kafka_broker: KafkaBroker) -> None:
    app = f"streams-{uuid.uuid4().hex[:6]}"
    topic = f"{app}-in"
    kafka_broker.create_topic(topic, 3)
    produce(kafka_broker.bootstrap, topic, {0: 4, 1: 6, 2: 1})
    bootstrap = ["--bootstrap-server", kafka_broker.bootstrap]
    from kprotocol.streams_group.cli import find_coordinator

    with Connection(*find_coordinator("127.0.0.1", kafka_broker.port, app)) as conn:
        member_id, epoch = streams_member(conn, app, topic)
        commit(conn, app, topic, member_id, epoch, {0: 1, 1: 6})

        ours = table(cli("describe", *bootstrap, "--group", app, "--offsets").stdout)
        theirs = kafka_tool(*bootstrap, "--describe", "--group", app, "--offsets", "--verbose")
        # Kafka's columns: GROUP TOPIC PARTITION CURRENT-OFFSET LEADER-EPOCH LOG-END-OFFSET OFFSET-LAG
        assert sorted(r[:6] for r in ours) == sorted([r[0], r[1], r[2], r[3], r[5], r[6]] for r in theirs)
        assert {r[6] for r in ours} == {member_id}

        ours_state = table(cli("describe", *bootstrap, "--group", app, "--state").stdout)
        theirs_state = kafka_tool(*bootstrap, "--describe", "--group", app, "--state", "--verbose")
        # Kafka: GROUP COORDINATOR (ID) ASSIGNOR STATE GROUP-EPOCH TARGET-ASSIGNMENT-EPOCH #MEMBERS
        assert ours_state == theirs_state

        listed = {r[0]: r[1] for r in table(cli("list", *bootstrap, "--state").stdout)}
        theirs_listed = {r[0]: r[1] for r in kafka_tool(*bootstrap, "--list", "--state")}
        assert listed[app] == theirs_listed[app] == "Stable"
        assert {g: s for g, s in listed.items() if g in theirs_listed} == theirs_listed

        busy = cli("reset-offsets", *bootstrap, "--group", app, "--all-input-topics", "--to-earliest", "--dry-run")
        assert busy.returncode == 2 and "is Stable" in busy.stderr
        left = conn.send(HB(group_id=app, member_id=member_id, member_epoch=-1))  # leaves: the group is Empty
        assert left.error_code == 0

    for spec in (["--to-latest"], ["--shift-by", "-3"],
                 ["--to-datetime", "2000-01-01T00:00:00.000"]):
        ours = table(cli("reset-offsets", *bootstrap, "--group", app, "--all-input-topics", *spec, "--dry-run").stdout)
        theirs = kafka_tool(*bootstrap, "--reset-offsets", "--group", app, "--all-input-topics", *spec, "--dry-run")
        assert sorted(ours) == sorted(theirs), spec
    done = cli("reset-offsets", *bootstrap, "--group", app, "--input-topic", f"{topic}:0", "--to-latest", "--execute")
    assert done.returncode == 0, done.stderr
    after = table(cli("describe", *bootstrap, "--group", app, "--offsets").stdout)
    assert [r[3] for r in after if r[2] == "0"] == ["4"]

    deleted = cli("delete", *bootstrap, "--group", app)
    assert deleted.returncode == 0 and f"('{app}')" in deleted.stdout
    gone = cli("describe", *bootstrap, "--group", app)
    assert gone.returncode == 1 and "GROUP_ID_NOT_FOUND (69)" in gone.stderr

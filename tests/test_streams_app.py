"""The Kafka Streams test application against the real broker, on both group protocols and on older
Kafka Streams releases; the broker confirms which protocol each group really uses."""

from __future__ import annotations

import collections
import random
import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer

from kprotocol import message_class
from kprotocol.streams.nested import decode_member_metadata
from kprotocol.toolchain import KafkaBroker, legacy_streams_versions
from kprotocol.toolchain.streams_app import StreamsApp

PARTITIONS = 4


@pytest.fixture
def topics(kafka_broker: KafkaBroker) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    names = f"in-{suffix}", f"out-{suffix}"
    for name in names:
        kafka_broker.create_topic(name, PARTITIONS)
    return names


def produce(bootstrap: str, topic: str, n: int, seed: int) -> collections.Counter[str]:
    rng = random.Random(seed)
    expected: collections.Counter[str] = collections.Counter()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for _ in range(n):
        key = f"key-{rng.randrange(25)}"
        expected[key] += 1
        producer.send(topic, key=key.encode(), value=b"v")
    producer.flush()
    producer.close()
    return expected


def final_counts(bootstrap: str, topic: str, expected: collections.Counter[str], timeout_s: float = 60) -> dict:
    """The last count per key on the output topic, read until it matches `expected` or time runs out."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=int(timeout_s * 1000))
    latest: dict[str, int] = {}
    try:
        for message in consumer:
            latest[message.key.decode()] = int(message.value)
            if latest == dict(expected):
                break
    finally:
        consumer.close()
    return latest


@pytest.fixture
def apps() -> Iterator[list[StreamsApp]]:
    started: list[StreamsApp] = []
    yield started
    for app in started:
        app.stop()


@pytest.mark.parametrize("protocol", ["classic", "streams"])
def test_counts_on_each_group_protocol(kafka_broker, topics, apps, protocol) -> None:
    source, sink = topics
    expected = produce(kafka_broker.bootstrap, source, 400, seed=1)
    application_id = f"count-{protocol}-{uuid.uuid4().hex[:6]}"
    app = StreamsApp.start(kafka_broker.bootstrap, application_id, source, sink, group_protocol=protocol,
                           instances=2)
    apps.append(app)
    app.wait_for(app.running_with_tasks(2, PARTITIONS), 120)
    tasks = app.latest_tasks()
    assert sorted(t for e in tasks.values() for t in e["active"]) == [f"0_{p}" for p in range(PARTITIONS)]
    assert all(e["active"] for e in tasks.values())  # the work is split between both instances
    assert final_counts(kafka_broker.bootstrap, sink, expected) == dict(expected)

    with kafka_broker.connect() as conn:
        if protocol == "streams":
            described = conn.send(message_class("StreamsGroupDescribeRequest")(group_ids=[application_id]))
            group = described.groups[0]
            assert group.error_code == 0 and group.group_state == "Stable"
            assert len(group.members) == 2 and not any(m.is_classic for m in group.members)
            assert {s.subtopology_id for s in group.topology.subtopologies} == {"0"}
        else:
            described = conn.send(message_class("DescribeGroupsRequest")(groups=[application_id]))
            group = described.groups[0]
            assert (group.protocol_type, group.protocol_data, group.group_state) == ("consumer", "stream", "Stable")
            assert len(group.members) == 2
            for member in group.members:
                info = decode_member_metadata("consumer", "stream", member.member_metadata).streams_userdata
                assert info.version >= 11
    app.stop()
    assert any(e["event"] == "closed" for e in app.events)


def test_standby_replicas_are_reported(kafka_broker, topics, apps) -> None:
    source, sink = topics
    app = StreamsApp.start(kafka_broker.bootstrap, f"standby-{uuid.uuid4().hex[:6]}", source, sink, instances=2,
                           num_standby_replicas=1)
    apps.append(app)

    def standbys_everywhere(events: list[dict]) -> bool:
        latest = {e["instance"]: e for e in events if e.get("event") == "tasks"}
        return len(latest) == 2 and all(e["state"] == "RUNNING" and e["standby"] for e in latest.values())

    app.wait_for(standbys_everywhere, 120)
    for instance, event in app.latest_tasks().items():
        assert not set(event["active"]) & set(event["standby"])
    every = [t for e in app.latest_tasks().values() for t in e["standby"]]
    assert sorted(every) == [f"0_{p}" for p in range(PARTITIONS)]


@pytest.mark.parametrize("version", legacy_streams_versions())
def test_older_streams_releases_run_classic(kafka_broker, topics, apps, version) -> None:
    source, sink = topics
    expected = produce(kafka_broker.bootstrap, source, 200, seed=2)
    application_id = f"legacy-{version}-{uuid.uuid4().hex[:6]}"
    app = StreamsApp.start(kafka_broker.bootstrap, application_id, source, sink, streams_version=version)
    apps.append(app)
    app.wait_for(app.running_with_tasks(1, PARTITIONS), 120)
    assert final_counts(kafka_broker.bootstrap, sink, expected) == dict(expected)
    with kafka_broker.connect() as conn:
        group = conn.send(message_class("DescribeGroupsRequest")(groups=[application_id])).groups[0]
    info = decode_member_metadata("consumer", "stream", group.members[0].member_metadata).streams_userdata
    # Kafka Streams 2.8 writes SubscriptionInfo v9; 3.x and later v11.
    assert info.version == (9 if version.startswith("2.") else 11)

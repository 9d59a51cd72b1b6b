"""The gateway's state topic against a real broker that auto-creates topics: any size loads in bounded fetches
(a fetch ending mid-batch is normal), the topic is created with configs compaction keeps small and a wrong one
is refused in one line, a deleted topic is never re-created, unreadable records are skipped and reported, and
records deleted below the log start load from the start."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from compat.gateway.group_commit import EncodedRecord
from compat.gateway.state import StateTopic, StateTopicGone, config_problems
from compat.gateway.upstream import Upstream
from kprotocol.registry import message_class
from kprotocol.streams_group import GroupConfig, StreamsGroupCoordinator
from kprotocol.toolchain import KafkaBroker
from kprotocol.toolchain.broker import free_port
from tests.test_gateway_state import HB, HEADER, some_records

GATEWAY = [sys.executable, "-m", "kprotocol", "gateway"]
METADATA = message_class("MetadataRequest")


@pytest.fixture(scope="module")
def broker() -> Iterator[KafkaBroker]:
    """A broker that auto-creates topics, as clusters do by default: the gateway must never let it."""
    started = KafkaBroker.start(config={"auto.create.topics.enable": "true"})
    yield started
    started.stop()


def topic_name() -> str:
    return f"gateway-state-{uuid.uuid4().hex[:6]}"


def compacted(pairs: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """What a compacted log of `pairs` holds: each key's latest value, in the order of those values."""
    latest: dict[bytes, bytes | None] = {}
    for key, value in pairs:
        latest.pop(key, None)
        latest[key] = value
    return list(latest.items())


async def exists(upstream: Upstream, topic: str) -> bool:
    response = await upstream.bootstrap.send(METADATA(topics=[METADATA.MetadataRequestTopic(name=topic)],
                                                      allow_auto_topic_creation=False))
    return response.topics[0].error_code == 0


async def topic_configs(upstream: Upstream, topic: str) -> dict[str, str]:
    describe = message_class("DescribeConfigsRequest")
    response = await upstream.bootstrap.send(describe(resources=[describe.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=None)]))
    return {c.name: c.value for c in response.results[0].configs}


def big_group() -> tuple[StreamsGroupCoordinator, list]:
    """A group whose topology names 400 source topics: records of some 15 kB each."""
    topics = [f"a-source-topic-with-a-rather-long-name-{i:04d}" for i in range(400)]
    c = StreamsGroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0), topics=dict.fromkeys(topics, 1))
    _, records = c.handle(HEADER, HB(group_id="big", member_id="m1", member_epoch=0, rebalance_timeout_ms=1000,
                                     process_id="m1", active_tasks=[], standby_tasks=[], warmup_tasks=[],
                                     topology=HB.Topology(subtopologies=[HB.Subtopology(
                                         subtopology_id="0", source_topics=topics)])), 0)
    return c, records


def test_a_topic_past_8_mib_loads_in_bounded_fetches_and_resumes_the_groups(broker: KafkaBroker) -> None:
    live, records = some_records()
    big, big_records = big_group()
    pairs = [r.encode() for r in records]
    big_pairs = [r.encode() for r in big_records]
    size = sum(len(k) + len(v or b"") for k, v in big_pairs)
    chunk = [EncodedRecord("big", k, v) for k, v in big_pairs] * (900_000 // size)
    topic = topic_name()

    async def scenario() -> tuple[list, StateTopic, dict[str, str]]:
        upstream = Upstream(("127.0.0.1", broker.port))
        state = StateTopic(upstream, topic)
        assert await state.load() == []
        configs = await topic_configs(upstream, topic)
        written = 0
        while written <= 9 << 20:  # 900 kB batches: every 1.5 MiB fetch ends mid-batch
            await state.append(chunk)
            written += sum(len(r.key) + len(r.value or b"") for r in chunk)
        await state.append(records)
        upstream.close()
        upstream = Upstream(("127.0.0.1", broker.port))
        again = StateTopic(upstream, topic)
        again.fetch_max_bytes = 3 << 19
        loaded = await again.load()
        upstream.close()
        return loaded, again, configs

    loaded, state, configs = asyncio.run(scenario())
    assert state.loaded_bytes > 9 << 20 and state.skipped == []
    assert loaded == compacted(big_pairs + pairs)  # bounded by the live state, not by the history
    resumed = StreamsGroupCoordinator.from_records(loaded)
    assert resumed.group("app").hard_state() == live.group("app").hard_state()
    assert resumed.group("big").hard_state() == big.group("big").hard_state()
    assert (configs["cleanup.policy"], configs["segment.ms"], configs["segment.bytes"],
            configs["min.insync.replicas"]) == ("compact", "3600000", str(64 << 20), "1")


def test_a_wrong_topic_is_refused_in_one_line(broker: KafkaBroker) -> None:
    topic = topic_name()
    create = message_class("CreateTopicsRequest")

    async def make() -> None:
        upstream = Upstream(("127.0.0.1", broker.port))
        response = await upstream.bootstrap.send(create(topics=[create.CreatableTopic(
            name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[create.CreatableTopicConfig(
                name="segment.bytes", value=str(1 << 30))])], timeout_ms=30_000))
        assert response.topics[0].error_code == 0
        upstream.close()

    asyncio.run(make())  # cleanup.policy=delete and 7-day segments (the defaults), 1 GiB segments
    done = subprocess.run([*GATEWAY, "--upstream", broker.bootstrap, "--listen", f"127.0.0.1:{free_port()}",
                           "--no-uvloop", "--group", "app", "--state-topic", topic],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"--state-topic {topic}: topic {topic} cannot keep the state: cleanup.policy is delete, needs " \
           "compact; segment.ms is 604800000, needs 3600000; segment.bytes is 1073741824, needs 67108864; fix: " \
           f"kafka-configs.sh --bootstrap-server {broker.bootstrap} --alter --entity-type topics --entity-name " \
           f"{topic} --add-config cleanup.policy=compact,segment.ms=3600000,segment.bytes=67108864" in lines[0]


@pytest.mark.parametrize("configs, replication, brokers, wrong", [
    ({"cleanup.policy": "compact", "min.insync.replicas": "2"}, 3, 3, []),
    ({"cleanup.policy": "compact,delete"}, 1, 1, [("cleanup.policy", "compact,delete", "compact")]),
    ({"cleanup.policy": "compact", "min.insync.replicas": "1"}, 3, 5, [("min.insync.replicas", "1", "2")]),
    ({"cleanup.policy": "compact", "min.insync.replicas": "3"}, 2, 2, [("min.insync.replicas", "3", "1")]),
    ({"cleanup.policy": "compact"}, 1, 3, [("replication factor", "1", "3")]),
])
def test_config_problems(configs: dict, replication: int, brokers: int, wrong: list) -> None:
    assert config_problems(configs, replication, brokers) == wrong


def test_a_deleted_topic_is_not_created_again_and_said_loudly(broker: KafkaBroker, caplog) -> None:
    _, records = some_records()
    topic = topic_name()
    delete = message_class("DeleteTopicsRequest")

    async def scenario() -> None:
        upstream = Upstream(("127.0.0.1", broker.port))
        state = StateTopic(upstream, topic)
        await state.load()
        await state.append(records)
        response = await upstream.bootstrap.send(delete(topic_names=[topic], topics=[
            delete.DeleteTopicState(name=topic)], timeout_ms=30_000))
        assert response.responses[0].error_code == 0
        while await exists(upstream, topic):
            await asyncio.sleep(0.1)
        upstream._leaders.clear()  # as after a second: the leader is asked again (never auto-creating it)
        for _ in range(2):
            with pytest.raises(StateTopicGone, match=f"state topic {topic} was deleted; the gateway does not "
                                                     "create it again"):
                await asyncio.wait_for(state.append(records), 10)
        await asyncio.sleep(1)
        assert not await exists(upstream, topic)
        upstream.close()

    with caplog.at_level(logging.INFO, logger="kprotocol.gateway"):
        asyncio.run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # ManagedGroups says it, once


def test_unreadable_records_are_skipped_and_reported(broker: KafkaBroker, caplog) -> None:
    live, records = some_records()
    pairs = [r.encode() for r in records]
    key, value = pairs[0]
    bad = [(b"\x00", b"x"), (key, b"\x00\x63" + value[2:]), (b"\x03\xe7" + key[2:], value)]  # 1-byte key,
    topic = topic_name()  # value version 99, record type 999

    async def scenario() -> tuple[list, StateTopic]:
        upstream = Upstream(("127.0.0.1", broker.port))
        state = StateTopic(upstream, topic)
        await state.load()
        await state.append([EncodedRecord("app", k, v) for k, v in pairs[:1] + bad + pairs[1:]])
        again = StateTopic(upstream, topic)
        loaded = await again.load()
        upstream.close()
        return loaded, again

    with caplog.at_level(logging.INFO, logger="kprotocol.gateway"):
        loaded, state = asyncio.run(scenario())
    assert loaded == compacted(pairs) and state.skipped == [1, 2, 3]
    assert StreamsGroupCoordinator.from_records(loaded).group("app").hard_state() == live.group("app").hard_state()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith(f"state topic {topic}: 3 records the gateway cannot read skipped "
                                                 "(first at offsets 1, 2, 3; offset 1: a key of 1 bytes)"), said


async def set_policy(upstream: Upstream, topic: str, policy: str) -> None:
    alter = message_class("IncrementalAlterConfigsRequest")
    response = await upstream.bootstrap.send(alter(resources=[alter.AlterConfigsResource(
        resource_type=2, resource_name=topic, configs=[alter.AlterableConfig(
            name="cleanup.policy", config_operation=0, value=policy)])], validate_only=False))
    assert response.responses[0].error_code == 0


def test_records_deleted_below_the_log_start_load_from_it(broker: KafkaBroker) -> None:
    live, records = some_records()
    topic = topic_name()
    delete = message_class("DeleteRecordsRequest")

    async def scenario() -> tuple[list, int]:
        upstream = Upstream(("127.0.0.1", broker.port))
        state = StateTopic(upstream, topic)
        await state.load()
        await state.append(records)
        await state.append(records)  # the whole state again, from offset len(records)
        await set_policy(upstream, topic, "compact,delete")  # the broker deletes records of no compact-only topic
        leader = await upstream.leader(topic, 0)
        response = await leader.send(delete(topics=[delete.DeleteRecordsTopic(name=topic, partitions=[
            delete.DeleteRecordsPartition(partition_index=0, offset=len(records))])], timeout_ms=30_000))
        low = response.topics[0].partitions[0]
        assert low.error_code == 0
        await set_policy(upstream, topic, "compact")
        loaded = await StateTopic(upstream, topic).load()
        upstream.close()
        return loaded, low.low_watermark

    loaded, low_watermark = asyncio.run(scenario())
    assert low_watermark == len(records)
    assert loaded == compacted([r.encode() for r in records])
    assert StreamsGroupCoordinator.from_records(loaded).group("app").hard_state() == live.group("app").hard_state()


def test_a_deleted_topic_makes_the_groups_answer_coordinator_not_available(broker: KafkaBroker, caplog) -> None:
    from test_gateway_isolation import COORDINATOR_NOT_AVAILABLE, Managed, sync

    topic = topic_name()
    delete = message_class("DeleteTopicsRequest")
    managed = Managed(broker, ["g", "h", "i"], StateTopic(Upstream(("127.0.0.1", broker.port)), topic), write_timeout_s=5)

    async def synced(group: str) -> int:
        member, generation = await managed.joined(group)
        return (await managed.call(14, 3, sync(group, member, generation))).error_code

    async def deleted() -> None:
        upstream = Upstream(("127.0.0.1", broker.port))
        response = await upstream.bootstrap.send(delete(topic_names=[topic], topics=[
            delete.DeleteTopicState(name=topic)], timeout_ms=30_000))
        assert response.responses[0].error_code == 0
        while await exists(upstream, topic):
            await asyncio.sleep(0.1)
        upstream.close()

    try:
        with caplog.at_level(logging.INFO, logger="kprotocol.gateway"):
            assert managed.run(managed.stable("g"))  # written to the topic
            asyncio.run(deleted())
            time.sleep(1.1)  # the leader the gateway knew is asked again
            assert managed.run(synced("h")) == COORDINATOR_NOT_AVAILABLE
            assert managed.run(synced("i")) == COORDINATOR_NOT_AVAILABLE  # said once for both
            assert not asyncio.run(still_exists(topic, broker))
    finally:
        managed.close()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(said) == 1 and f"(StateTopicGone: state topic {topic} was deleted; " in said[0], said
    assert "group h answers COORDINATOR_NOT_AVAILABLE to every change" in said[0]


async def still_exists(topic: str, broker: KafkaBroker) -> bool:
    upstream = Upstream(("127.0.0.1", broker.port))
    try:
        return await exists(upstream, topic)
    finally:
        upstream.close()

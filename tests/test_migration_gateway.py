"""End to end: a Kafka Streams application migrates from the classic to the streams protocol through the
gateway while it processes a continuous input, survives a gateway restart, then cuts over to the broker."""

from __future__ import annotations

import collections
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from kprotocol import message_class
from kprotocol.connection import Connection
from kprotocol.toolchain import KafkaBroker
from kprotocol.toolchain.streams_app import StreamsApp
from migration import GatewayProcess, overlaps
from migration_scenario import read_committed

PARTITIONS, INSTANCES = 4, 3


class Input:
    """Keys produced continuously to the source topic, counted as they are acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self.topic, self.sent = topic, collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for i in itertools.count():
            if self._stop.is_set():
                return
            key = f"key-{i % 40}"
            self.producer.send(self.topic, key=key.encode(), value=b"v").get(10)
            self.sent[key] += 1
            time.sleep(0.01)

    def start(self) -> Input:
        self._thread.start()
        return self

    def stop(self) -> collections.Counter:
        self._stop.set()
        self._thread.join(30)
        self.producer.close()
        return self.sent


def wait_for_output(bootstrap: str, topic: str, expected: collections.Counter, timeout_s: float = 90) -> None:
    """Until the committed output's last count per key reaches `expected` (or time runs out): the input is
    processed and the apps can stop. The output is judged afterwards, read to its end (`final_output`)."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             isolation_level="read_committed", consumer_timeout_ms=int(timeout_s * 1000))
    latest: dict[str, int] = {}
    try:
        for message in consumer:
            latest[message.key.decode()] = int(message.value)
            if all(latest.get(k, 0) >= n for k, n in expected.items()):
                break
    finally:
        consumer.close()


def final_output(bootstrap: str, topic: str) -> tuple[dict, dict]:
    """The last count per key and every record's time, of every committed record up to the end offsets."""
    latest: dict[str, int] = {}
    times: dict[int, list[int]] = collections.defaultdict(list)  # per output partition (one task writes each)
    for message in read_committed(bootstrap, topic, PARTITIONS):
        latest[message.key.decode()] = int(message.value)
        times[message.partition].append(message.timestamp)
    return latest, times


def all_running(apps: list[StreamsApp]) -> bool:
    latest = [a.latest_tasks().get(0) for a in apps]
    return all(e and e["state"] == "RUNNING" for e in latest) and \
        sorted(t for e in latest for t in e["active"]) == [f"0_{p}" for p in range(PARTITIONS)]


def wait_all_running(apps: list[StreamsApp], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all_running(apps):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every task running: {[a.latest_tasks() for a in apps]}")
        time.sleep(0.2)


def assert_no_overlap(histories: list[list[dict]], where: Path) -> None:
    """No task active in two instances at once; if one is, every instance's events are kept for a look
    (with the gateway's log and each start's app log under `where`)."""
    found = overlaps(histories)
    if found:
        (where / "events.json").write_text(json.dumps(histories))
    assert found == [], f"events of every instance in {where / 'events.json'}"


def longest_pause(times: dict[int, list[int]], start: int, end: int) -> int:
    """The longest gap between records of one output partition that overlaps [start, end] (the input
    never stops, so a gap is a task not processing)."""
    gaps = [b - a for ordered in map(sorted, times.values()) for a, b in zip(ordered, ordered[1:])
            if b >= start and a <= end]
    return max(gaps, default=end - start)


# `make test` runs exactly-once (the stricter check: nothing lost, nothing doubled); `make test-migration` both.
GUARANTEES = ["at_least_once", "exactly_once_v2"] if os.environ.get("KPROTOCOL_MIGRATION") == "matrix" \
    else ["exactly_once_v2"]


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_rolling_migration_gateway_restart_and_cut_over(kafka_broker: KafkaBroker, tmp_path: Path,
                                                        guarantee: str) -> None:
    app_id = f"migrate-{guarantee[:5]}-{uuid.uuid4().hex[:6]}"
    source, sink = f"{app_id}-in", f"{app_id}-out"
    kafka_broker.create_topic(source, PARTITIONS)
    kafka_broker.create_topic(sink, PARTITIONS, {"message.timestamp.type": "LogAppendTime"})  # processing time
    gateway = GatewayProcess(kafka_broker.bootstrap, [app_id], tmp_path / "state", tmp_path / "gateway.log").start()
    apps: list[StreamsApp] = []
    retired: list[StreamsApp] = []
    feed = Input(kafka_broker.bootstrap, source).start()
    steps: list[tuple[str, int, int]] = []

    def start(i: int, protocol: str, bootstrap: str) -> StreamsApp:
        return StreamsApp.start(bootstrap, app_id, source, sink, group_protocol=protocol,
                                processing_guarantee=guarantee, state_dir=tmp_path / f"instance-{i}")

    def step(name: str, action) -> None:
        begin = int(time.time() * 1000)
        action()
        wait_all_running(apps)
        steps.append((name, begin, int(time.time() * 1000)))

    try:
        step("3 classic instances through the gateway",
             lambda: apps.extend(start(i, "classic", gateway.bootstrap) for i in range(INSTANCES)))
        for i in range(INSTANCES):
            def roll(i: int = i) -> None:
                apps[i].stop()
                retired.append(apps[i])
                apps[i] = start(i, "streams", gateway.bootstrap)
            step(f"instance {i} rolled to the streams protocol", roll)
            if i == 0:  # the runbook's view of the group: two classic members, one on the streams protocol
                shown = subprocess.run([sys.executable, "-m", "kprotocol", "streams-groups", "describe", "--gateway",
                                        gateway.bootstrap, "--group", app_id, "--members"],
                                       capture_output=True, text=True, check=True).stdout.splitlines()
                assert shown[0].split()[:5] == ["GROUP", "TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH", "MEMBER",
                                                "MEMBER-PROTOCOL"]
                assert sorted(line.split()[4] for line in shown[1:]) == ["classic", "classic", "streams"]
            if i == 1:
                step("gateway restarted", gateway.restart)
        def cut_over() -> None:
            for i, app in enumerate(apps):
                app.stop()
                retired.append(app)
            gateway.stop()
            apps[:] = [start(i, "streams", kafka_broker.bootstrap) for i in range(INSTANCES)]
        step("cut over to the broker", cut_over)
        time.sleep(3)
        sent = feed.stop()
        wait_for_output(kafka_broker.bootstrap, sink, sent)
        for app in apps:
            app.stop()  # cleanly: what they wrote is committed, nothing more comes
        counts, times = final_output(kafka_broker.bootstrap, sink)
        if guarantee == "exactly_once_v2":
            assert counts == dict(sent)  # no loss, no duplicate
        else:
            assert all(counts.get(k, 0) >= n for k, n in sent.items())  # no loss
        assert_no_overlap([a.events for a in retired + apps], tmp_path)
        with Connection("127.0.0.1", kafka_broker.port) as conn:
            fetch = message_class("OffsetFetchRequest")
            committed = conn.send(fetch(groups=[fetch.OffsetFetchRequestGroup(group_id=app_id, topics=None)]),
                                  version=9)  # v10 names topics by id
        offsets = {(t.name, p.partition_index): p.committed_offset
                   for t in committed.groups[0].topics for p in t.partitions}
        assert sorted(p for (t, p), o in offsets.items() if t == source and o > 0) == list(range(PARTITIONS))
        for name, begin, end in steps:
            print(f"{name}: {(end - begin) / 1000:.1f} s, longest output pause {longest_pause(times, begin, end)} ms")
    finally:
        feed.stop() if feed._thread.is_alive() else None
        for app in apps:
            app.stop()
        gateway.stop()


@pytest.mark.parametrize("version", ["2.8.2"])
def test_an_older_streams_release_takes_part(kafka_broker: KafkaBroker, tmp_path: Path, version: str) -> None:
    """A Kafka Streams 2.8 instance (SubscriptionInfo v9) stays classic while a current instance joins on
    the streams protocol: both run tasks, answered in the userdata version each understands."""
    app_id = f"migrate-legacy-{uuid.uuid4().hex[:6]}"
    source, sink = f"{app_id}-in", f"{app_id}-out"
    kafka_broker.create_topic(source, PARTITIONS)
    kafka_broker.create_topic(sink, PARTITIONS)
    gateway = GatewayProcess(kafka_broker.bootstrap, [app_id], tmp_path / "state", tmp_path / "gateway.log").start()
    apps: list[StreamsApp] = []
    feed = Input(kafka_broker.bootstrap, source).start()
    try:
        apps.append(StreamsApp.start(gateway.bootstrap, app_id, source, sink, streams_version=version,
                                     state_dir=tmp_path / "legacy"))
        wait_all_running(apps)
        apps.append(StreamsApp.start(gateway.bootstrap, app_id, source, sink, group_protocol="streams",
                                     state_dir=tmp_path / "current"))
        deadline = time.monotonic() + 120
        while not (all_running(apps) and all(a.latest_tasks()[0]["active"] for a in apps)):
            assert time.monotonic() < deadline, [a.latest_tasks() for a in apps]
            time.sleep(0.2)
        with Connection("127.0.0.1", gateway.port) as conn:
            group = conn.send(message_class("StreamsGroupDescribeRequest")(group_ids=[app_id])).groups[0]
        assert sorted(m.is_classic for m in group.members) == [False, True]
        time.sleep(2)
        sent = feed.stop()
        wait_for_output(kafka_broker.bootstrap, sink, sent)
        for app in apps:
            app.stop()
        counts, _ = final_output(kafka_broker.bootstrap, sink)
        assert all(counts.get(k, 0) >= n for k, n in sent.items())
        assert_no_overlap([a.events for a in apps], tmp_path)
    finally:
        if feed._thread.is_alive():
            feed.stop()
        for app in apps:
            app.stop()
        gateway.stop()

"""The gateway under hostile and faulty clients (issue 24): one bad request never disables a group, nothing
naming a managed group reaches the broker, the state survives a full disk, resources stay bounded. Each
finding is reproduced against a real broker, with a good kafka-python consumer running where it matters.
The longer battery (backpressure, large requests, connection floods) is tests/gateway_hostile_battery.py."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from compat.classic import ClassicConfig, ClassicGroup
from compat.coordinator import MigrationCoordinator
from compat.gateway.lenient import decode_request as lenient_decode
from compat.gateway.managed import ManagedGroups
from compat.gateway.state import StateLog
from compat.gateway.upstream import Upstream
from kprotocol.connection import Connection
from kprotocol.framing import decode_response, encode_request
from kprotocol.registry import api_classes, message_class
from kprotocol.toolchain import KafkaBroker
from kprotocol.toolchain.broker import free_port
from kprotocol.toolchain.processes import die_with_parent, stop_process

Join, Sync, Beat = (message_class(n) for n in ("JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest"))
HEADER = message_class("RequestHeader")
tokens = itertools.count()


def header(api_key: int, version: int) -> object:
    return HEADER(request_api_key=api_key, request_api_version=version, correlation_id=1, client_id="c")


def join(group: str, member: str = "", protocols: tuple[str, ...] = ("range",), session_ms: int = 10_000) -> object:
    return Join(group_id=group, member_id=member, session_timeout_ms=session_ms, rebalance_timeout_ms=10_000,
                protocol_type="consumer", protocols=[Join.JoinGroupRequestProtocol(name=p, metadata=b"m")
                                                     for p in protocols])


# --- Kafka's admission rules, sans-IO ----------------------------------------------------------------

def test_a_member_sharing_no_protocol_is_refused_and_the_rebalance_still_completes() -> None:
    """Item 1: the join the broker refuses with INCONSISTENT_GROUP_PROTOCOL used to be admitted, and the
    rebalance then raised StopIteration (which killed the gateway's timer task)."""
    group = ClassicGroup("g", initial_delay_ms=0)
    answers, _ = group.join(next(tokens), header(11, 3), join("g", protocols=("stream",)), 0, "/h")
    assert answers and answers[0][1].error_code == 0  # v3: joins without a member id round
    hostile, _ = group.join(next(tokens), header(11, 3), join("g", protocols=("range",)), 1, "/h")
    assert [a.error_code for _, a in hostile] == [23]
    member = answers[0][1].member_id
    rejoin, _ = group.join(next(tokens), header(11, 3), join("g", member, protocols=("stream",)), 2, "/h")
    assert group.poll(5_000) == ([], []) and group.generation == 2 and list(group.members) == [member]
    assert [a.error_code for _, a in rejoin] == [0]


@pytest.mark.parametrize("session_ms", [2**31 - 1, 0, -5, 5_999, 1_800_001])
def test_session_time_outs_outside_the_brokers_bounds_are_refused(session_ms: int) -> None:
    group = ClassicGroup("g", initial_delay_ms=0)
    answers, _ = group.join(next(tokens), header(11, 5), join("g", session_ms=session_ms), 0, "/h")
    assert [(a.error_code, a.member_id) for _, a in answers] == [(26, "")]
    assert group.members == {}


def test_session_bounds_come_from_kafkas_config_names() -> None:
    config = ClassicConfig.from_kafka({"group.min.session.timeout.ms": "1000",
                                       "group.max.session.timeout.ms": "2000"})
    group = ClassicGroup("g", initial_delay_ms=0, config=config)
    ok, _ = group.join(next(tokens), header(11, 5), join("g", session_ms=1500), 0, "/h")
    refused, _ = group.join(next(tokens), header(11, 5), join("g", session_ms=2500), 0, "/h")
    assert [a.error_code for _, a in ok] == [79] and [a.error_code for _, a in refused] == [26]
    with pytest.raises(ValueError, match="above"):
        ClassicConfig.from_kafka({"group.min.session.timeout.ms": "3000", "group.max.session.timeout.ms": "2000"})


def test_requests_are_routed_as_the_broker_reads_them() -> None:
    """Item 4: one trailing byte or a non-minimal varint (both accepted by Kafka) used to send a managed
    group's JoinGroup to the broker."""
    frame = encode_request(header(11, 9), join("app"))
    trailing = (len(frame) - 3).to_bytes(4, "big") + frame[4:] + b"\x00"
    body = frame[4:]
    assert body[11] == 0  # the header's tagged-field count
    padded_body = body[:11] + b"\x80\x00" + body[12:]
    padded = len(padded_body).to_bytes(4, "big") + padded_body
    for odd in (trailing, padded):
        for compiled in (True, False):
            header_, request = lenient_decode(odd, compiled)
            assert (header_.request_api_key, request.group_id, request.protocols[0].name) == (11, "app", "range")


def test_state_log_damage_is_reported_and_a_torn_tail_is_quiet(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    group = ClassicGroup("g", initial_delay_ms=0)
    log = StateLog(tmp_path)
    log.load()
    for generation in range(6):
        group.generation = generation
        log.append([group.record(generation)])
    data = bytearray(log.path.read_bytes())
    data[len(data) // 6 * 3 + 70] ^= 0xFF  # inside the CRC-covered part of the fourth batch
    log.path.write_bytes(bytes(data) + b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x01")  # a torn write
    caplog.set_level(logging.INFO, logger="kprotocol.gateway")
    again = StateLog(tmp_path)
    records = again.load()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(records) == 5 and again.next_offset == 6
    assert len(warnings) == 1 and "records at offsets 3..3 dropped" in warnings[0] and "position" in warnings[0]
    assert any("cut off 11 bytes of an unfinished write" in r.getMessage() for r in caplog.records
               if r.levelno == logging.INFO)
    again.append([group.record(7)])
    assert len(StateLog(tmp_path).load()) == 6  # appended right after the last whole batch


def test_bad_streams_metadata_never_loses_a_classic_group() -> None:
    """Item 8: when the first streams-protocol member arrived, the classic group was dropped before a
    member's "stream" metadata failed to decode; metadata under 2 bytes raised struct.error."""
    from test_compat import HB, TOPICS, TOPOLOGY, subscription

    from compat.classic import GroupMetadataKey, GroupMetadataValue
    from compat.translate import decode_subscription
    from kprotocol.errors import DecodeError
    from kprotocol.streams_group import GroupConfig
    from kprotocol.streams_group.records import CoordinatorRecord

    for metadata in (b"", b"\x00", b"\x00\x01\xff"):
        with pytest.raises(DecodeError):
            decode_subscription(metadata)
    coordinator = MigrationCoordinator(GroupConfig(initial_rebalance_delay_ms=0), TOPICS, classic_initial_delay_ms=0)
    value = GroupMetadataValue(protocol_type="consumer", generation=5, protocol="stream", leader="A",
                               current_state_timestamp=0, members=[GroupMetadataValue.MemberMetadata(
                                   member_id=name, client_id=name, client_host="/h", rebalance_timeout=30_000,
                                   session_timeout=30_000, subscription=metadata, assignment=b"")
                                   for name, metadata in (("A", subscription("A", "0_0", "")), ("B", b"\x00"))])
    coordinator.replay([CoordinatorRecord(GroupMetadataKey(group="app"), value)])
    joined = HB(group_id="app", member_id="C", member_epoch=0, process_id="c", rebalance_timeout_ms=30_000,
                topology=TOPOLOGY, active_tasks=[], standby_tasks=[], warmup_tasks=[])
    answers, records = coordinator.handle(next(tokens), header(88, 1), joined, 0)
    assert answers[0][1].error_code == 0 and records
    assert sorted(coordinator.streams.group("app").members) == ["A", "C"]  # B, unreadable, left behind


# --- the supervised coordinator, in process against the real broker ------------------------------------

class Managed:
    """ManagedGroups on its own event loop, talking to the real broker."""

    def __init__(self, broker: KafkaBroker, groups: list[str], state: StateLog | None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        coordinator = MigrationCoordinator(classic_initial_delay_ms=200)
        self.managed = ManagedGroups(groups, coordinator, Upstream(("127.0.0.1", broker.port)), state,
                                     lambda: (1, "127.0.0.1", 1))
        self.run(self.managed.start())

    def run(self, coroutine: object, timeout: float = 20) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)  # type: ignore[arg-type]

    def send(self, api_key: int, version: int, request: object) -> asyncio.Future:
        async def call() -> object:
            return await self.managed(header(api_key, version), request, "/127.0.0.1")  # type: ignore[misc]
        return asyncio.run_coroutine_threadsafe(call(), self.loop)  # type: ignore[return-value]

    def close(self) -> None:
        self.run(self.managed.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _stable_member(managed: Managed, group: str) -> tuple[str, int]:
    """A member that joined `group` and synced (v4+: member id first)."""
    first = managed.send(11, 5, join(group)).result(10)
    assert first.error_code == 79
    joined = managed.send(11, 5, join(group, first.member_id)).result(10)
    assert joined.error_code == 0, joined
    synced = managed.send(14, 3, Sync(group_id=group, generation_id=joined.generation_id,
                                      member_id=joined.member_id, assignments=[
                                          Sync.SyncGroupRequestAssignment(member_id=joined.member_id,
                                                                          assignment=b"a")])).result(10)
    assert synced.error_code == 0 and synced.assignment == b"a"
    return joined.member_id, joined.generation_id


def test_a_group_whose_handling_raises_is_rolled_back_and_nothing_else_stops(
        kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="kprotocol.gateway")
    managed = Managed(kafka_broker, ["bad", "good"], None)
    try:
        member, generation = _stable_member(managed, "bad")
        bad = managed.managed.coordinator.classic["bad"]
        before = bad.record(0)
        original = ClassicGroup.heartbeat

        def broken(self: ClassicGroup, req: object, now: int) -> int:
            if self.group_id == "bad":
                self.members.clear()  # half a change, then a bug
                raise RuntimeError("a bug in one group")
            return original(self, req, now)
        monkeypatch.setattr(ClassicGroup, "heartbeat", broken)
        for _ in range(5):
            answer = managed.send(12, 4, Beat(group_id="bad", generation_id=generation, member_id=member)).result(10)
            assert answer.error_code == 15  # COORDINATOR_NOT_AVAILABLE: retriable
        assert managed.managed.coordinator.classic["bad"].record(0) == before  # rolled back
        logged = [r.getMessage() for r in caplog.records if "a bug in one group" in r.getMessage()]
        assert len(logged) == 1 and "group bad" in logged[0]
        _stable_member(managed, "good")  # its initial delay ran on the ticker: the ticker lives
        monkeypatch.setattr(ClassicGroup, "poll", lambda self, now: 1 / 0 if self.group_id == "bad" else ([], []))
        time.sleep(0.5)
        assert not managed.managed._ticker.done()
        monkeypatch.undo()
        answer = managed.send(12, 4, Beat(group_id="bad", generation_id=generation, member_id=member)).result(10)
        assert answer.error_code == 0
    finally:
        managed.close()


def test_a_full_disk_answers_coordinator_not_available_until_writes_succeed(
        kafka_broker: KafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Item 5, with a real ENOSPC: the state segment is /dev/full for a while."""
    caplog.set_level(logging.INFO, logger="kprotocol.gateway")
    state = StateLog(tmp_path)
    managed = Managed(kafka_broker, ["app"], state)
    try:
        first = managed.send(11, 5, join("app")).result(10)
        joined = managed.send(11, 5, join("app", first.member_id)).result(10)
        segment = state.path
        segment.unlink()
        segment.symlink_to("/dev/full")
        sync = Sync(group_id="app", generation_id=joined.generation_id, member_id=joined.member_id,
                    assignments=[Sync.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"a")])
        for _ in range(3):
            assert managed.send(14, 3, sync).result(10).error_code == 15
        assert managed.managed.coordinator.classic["app"].state == "CompletingRebalance"  # not applied
        time.sleep(0.3)
        assert not managed.managed._ticker.done()
        segment.unlink()
        segment.write_bytes(b"")
        assert managed.send(14, 3, sync).result(10).assignment == b"a"
        messages = [r.getMessage() for r in caplog.records]
        assert len([m for m in messages if "state writes" in m and "failing" in m]) == 1
        assert len([m for m in messages if "succeed again" in m]) == 1
        assert len(state.load()) == 1
    finally:
        managed.close()


# --- the gateway process in front of the broker, a good consumer running ------------------------------

class GatewayProcess:
    """`kprotocol gateway` managing `groups`, stopped by its PID."""

    def __init__(self, broker: KafkaBroker, groups: list[str], state: Path, *options: str) -> None:
        self.port = free_port()
        self.log = state.parent / f"gateway-{self.port}.log"
        command = [sys.executable, "-m", "kprotocol", "gateway", "--upstream", broker.bootstrap, "--listen",
                   f"127.0.0.1:{self.port}", "--state", str(state), "--initial-rebalance-delay-ms", "300",
                   "--no-uvloop", *options, *itertools.chain.from_iterable(("--group", g) for g in groups)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log.open("ab"),
                                        stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                        preexec_fn=die_with_parent)
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("gateway on"), self.log.read_text()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> int | None:
        return stop_process(self.process, 20)


class GoodClient:
    """A producer writing to the broker and a kafka-python consumer of `group` through `bootstrap`."""

    def __init__(self, broker: KafkaBroker, bootstrap: str, group: str, topic: str) -> None:
        self.broker, self.bootstrap, self.group, self.topic = broker, bootstrap, group, topic
        self.sent, self.seen, self.stopping = 0, [], threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._produce, self._consume)]
        for thread in self.threads:
            thread.start()

    def _produce(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.broker.bootstrap, linger_ms=5)
        while not self.stopping.is_set():
            producer.send(self.topic, str(self.sent).encode()).get(10)
            self.sent += 1
            time.sleep(0.02)
        producer.close()

    def _consume(self) -> None:
        consumer = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                                 auto_offset_reset="earliest", auto_commit_interval_ms=500)
        while not self.stopping.is_set():
            for records in consumer.poll(200).values():
                self.seen += [int(r.value) for r in records]
        consumer.close()

    def wait_for(self, count: int, timeout: float = 40) -> None:
        deadline = time.monotonic() + timeout
        while len(self.seen) < count:
            assert time.monotonic() < deadline, f"the good client saw {len(self.seen)} of {count} records"
            time.sleep(0.1)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(20)


def hostile_requests(group: str, topic: str) -> list[tuple[str, int, int, object]]:
    """(what, api key, version, request): each a finding of the audit."""
    delete = message_class("OffsetDeleteRequest")
    return [
        ("join sharing no protocol", 11, 5, join(group, protocols=("zzz",))),
        ("session time-out 2^31-1", 11, 5, join(group, session_ms=2**31 - 1)),
        ("session time-out 0", 11, 5, join(group, session_ms=0)),
        ("session time-out -5", 11, 5, join(group, session_ms=-5)),
        ("offset delete", 47, 0, delete(group_id=group, topics=[delete.OffsetDeleteRequestTopic(
            name=topic, partitions=[delete.OffsetDeleteRequestPartition(partition_index=0)])])),
        ("delete groups", 42, 2, api_classes(42)[0](groups_names=[group])),
        ("consumer group heartbeat", 68, 0, api_classes(68)[0](
            group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=[topic], topic_partitions=[])),
        ("share group heartbeat", 76, 1, api_classes(76)[0](group_id=group, member_id=uuid.uuid4().hex,
                                                            member_epoch=0, subscribed_topic_names=[topic])),
    ]


def _codes(response: object) -> object:
    """The error codes of a response, wherever they sit."""
    if hasattr(response, "results"):
        return [r.error_code for r in response.results]
    if hasattr(response, "topics") and response.topics and hasattr(response.topics[0], "partitions"):
        return (response.error_code, [p.error_code for t in response.topics for p in t.partitions])
    return response.error_code


def test_hostile_requests_get_the_brokers_answers_and_the_good_client_goes_on(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """Items 1, 2, 4, 9 against the gateway and, for reference, the broker's own classic group: the same
    answers; the managed group's offsets survive, the broker never learns of a member."""
    group, reference = f"app-{uuid.uuid4().hex[:6]}", f"ref-{uuid.uuid4().hex[:6]}"
    topic = f"hostile-{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(topic, 2)
    gateway = GatewayProcess(kafka_broker, [group], tmp_path / "state")
    good = GoodClient(kafka_broker, gateway.bootstrap, group, topic)
    ref = GoodClient(kafka_broker, kafka_broker.bootstrap, reference, topic)
    try:
        good.wait_for(30)
        ref.wait_for(30)
        time.sleep(1.5)  # a commit or two of each
        with Connection("127.0.0.1", gateway.port) as through, Connection("127.0.0.1", kafka_broker.port) as direct:
            for what, api_key, version, request in hostile_requests(group, topic):
                ours = through.send(request, version=version)
                theirs = direct.send(request.replace(group_id=reference) if hasattr(request, "group_id")
                                     else request.replace(groups_names=[reference]), version=version)
                if api_key != 68:  # the broker turns its own classic group into a consumer group: refused here
                    assert _codes(ours) == _codes(theirs), what
            assert _codes(through.send(hostile_requests(group, topic)[6][3], version=0)) == 69
            seen = len(good.seen)
            described = through.send(api_classes(15)[0](groups=[group]), version=5).groups[0]
        odd = encode_request(header(11, 9), join(group, protocols=("zzz",)))
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as raw:  # one trailing byte
            raw.sendall((len(odd) - 3).to_bytes(4, "big") + odd[4:] + b"\x00")
            answer = raw.recv(4096)
        assert decode_response(answer, 11, 9)[1].error_code == 23  # answered by the gateway, as the broker would
        assert described.group_state == "Stable" and len(described.members) == 1
        good.wait_for(seen + 40)  # ~1 s of records at 50/s: still consuming
        with Connection("127.0.0.1", kafka_broker.port) as direct:
            fetched = direct.send(message_class("OffsetFetchRequest")(group_id=group, topics=None), version=7)
            described = direct.send(api_classes(69)[0](group_ids=[group]), version=0).groups[0]
            listed = {g.group_id: g for g in direct.send(api_classes(16)[0](), version=5).groups}
        assert sum(p.committed_offset for t in fetched.topics for p in t.partitions) > 0  # offsets kept
        assert described.error_code == 69  # no consumer group was created under the managed id
        assert listed[group].group_type == "classic" and listed[group].group_state == "Empty"
        with Connection("127.0.0.1", gateway.port) as through:
            shown = {g.group_id: g for g in through.send(api_classes(16)[0](), version=5).groups}
        assert (shown[group].group_type, shown[group].group_state) == ("classic", "Stable")
    finally:
        good.stop()
        ref.stop()
        gateway.stop()
    assert "Traceback" not in gateway.log.read_text()
    assert sorted(set(good.seen)) == list(range(len(set(good.seen))))  # nothing skipped


def test_limits_close_idle_stalled_and_surplus_connections_only(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """Item 10: idle connections, a slowloris frame, a claimed 100 MB frame and a connection flood."""
    gateway = GatewayProcess(kafka_broker, ["lim"], tmp_path / "state", "--limit", "connections.max.idle.ms=1000",
                             "--limit", "gateway.request.read.timeout.ms=1000", "--limit", "max.connections=20")
    try:
        idle = socket.create_connection(("127.0.0.1", gateway.port))
        slow = socket.create_connection(("127.0.0.1", gateway.port))
        slow.sendall(b"\x00\x00\x00\x40\x00\x03")
        claimed = socket.create_connection(("127.0.0.1", gateway.port))
        claimed.sendall((100 << 20).to_bytes(4, "big") + b"\x00\x03\x00\x0c")
        started = time.monotonic()
        for conn in (idle, slow, claimed):
            conn.settimeout(10)
            assert conn.recv(10) == b""
            conn.close()
        assert time.monotonic() - started < 5
        flood = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(60)]
        with Connection("127.0.0.1", gateway.port) as good:  # the idlest connection made way
            assert good.send(message_class("MetadataRequest")(topics=[])).brokers
        for conn in flood:
            conn.close()
    finally:
        gateway.stop()
    log = gateway.log.read_text()
    assert "connections.max.idle.ms" in log and "gateway.request.read.timeout.ms" in log
    assert "Traceback" not in log


def _closed_by_peer(conns: list[socket.socket], expected: int, timeout: float = 10) -> list[int]:
    """The indexes of the connections the peer closed, once `expected` of them are (or at `timeout`), then a
    moment more to see that no other follows."""
    closed: set[int] = set()
    deadline = time.monotonic() + timeout
    settled_at = None
    while time.monotonic() < deadline:
        for i, conn in enumerate(conns):
            if i not in closed:
                conn.setblocking(False)
                try:
                    if conn.recv(1) == b"":
                        closed.add(i)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    closed.add(i)
        if len(closed) >= expected:
            settled_at = settled_at or time.monotonic()
            if time.monotonic() - settled_at > 0.5:
                break
        time.sleep(0.05)
    return sorted(closed)


def test_connection_and_request_size_caps(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """max.connections: past the cap the idlest connection makes way (40 of 60 idle ones closed, oldest first);
    max.connections.per.ip closes a new connection past the cap (another address is still served);
    socket.request.max.bytes closes a connection announcing a larger frame at once, a smaller one is answered."""
    gateway = GatewayProcess(kafka_broker, ["caps"], tmp_path / "state", "--limit", "max.connections=20")
    try:
        flood = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(60)]
        closed = _closed_by_peer(flood, expected=40)
        assert closed == list(range(40)), f"max.connections=20: the gateway closed {closed} of 60 idle connections"
        with Connection("127.0.0.1", gateway.port) as good:
            assert good.send(message_class("MetadataRequest")(topics=[])).brokers
        assert _closed_by_peer(flood[40:], expected=1) == [0], "the idlest of the 20 left makes way"
        for conn in flood:
            conn.close()
    finally:
        gateway.stop()
    gateway = GatewayProcess(kafka_broker, ["caps"], tmp_path / "state", "--limit", "max.connections.per.ip=3",
                             "--limit", "socket.request.max.bytes=1000")
    try:
        conns = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(5)]
        assert _closed_by_peer(conns, expected=2) == [3, 4], "max.connections.per.ip=3"
        other = socket.create_connection(("127.0.0.1", gateway.port), source_address=("127.0.0.2", 0))
        assert _closed_by_peer([other], expected=1, timeout=1.5) == [], "another address has connections to spare"
        for conn in conns + [other]:
            conn.close()
        deadline = time.monotonic() + 10
        while True:  # until the gateway has seen the closes
            try:
                with Connection("127.0.0.1", gateway.port) as small:
                    assert small.send(message_class("MetadataRequest")(topics=[])).brokers
                break
            except ConnectionError:
                assert time.monotonic() < deadline, "no connection admitted after the others closed"
                time.sleep(0.1)
        large = socket.create_connection(("127.0.0.1", gateway.port))
        large.sendall((2000).to_bytes(4, "big") + b"\x00\x03\x00\x0c")  # 2000 bytes announced, never sent
        assert _closed_by_peer([large], expected=1, timeout=5) == [0], "socket.request.max.bytes=1000"
        large.close()
    finally:
        gateway.stop()
    log = gateway.log.read_text()
    assert "max.connections.per.ip (3) reached" in log and "Traceback" not in log


class Relay:
    """A TCP relay in front of the broker that notes when each request frame reaches it, by client id (the
    gateway's upstream)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream, self.arrivals = upstream, []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.bootstrap = f"127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            broker = socket.create_connection(self.upstream)
            threading.Thread(target=self._pipe, args=(client, broker, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(broker, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        buffer = b""
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
                buffer += data if requests else b""
                while requests and len(buffer) >= 8 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "big"):
                    client_id = buffer[14:14 + int.from_bytes(buffer[12:14], "big", signed=True)]
                    self.arrivals.append((client_id.decode(errors="replace"), time.monotonic()))
                    buffer = buffer[4 + int.from_bytes(buffer[:4], "big"):]
        except OSError:
            pass
        finally:
            sink.close()

    def close(self) -> None:
        self.server.close()


def _frame(message: object, version: int, correlation_id: int, client_id: str) -> bytes:
    return encode_request(HEADER(request_api_key=message.api_key, request_api_version=version,  # type: ignore
                                 correlation_id=correlation_id, client_id=client_id), message)


def _pipelined(port: int, requests: list[tuple[object, int]]) -> socket.socket:
    """A connection that sends `requests` at once (correlation ids 1...), reading nothing."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(b"".join(_frame(message, version, i + 1, "pipelined")
                          for i, (message, version) in enumerate(requests)))
    return conn


def test_in_flight_and_buffered_response_caps_stop_reading_a_client(kafka_broker: KafkaBroker,
                                                                    tmp_path: Path) -> None:
    """gateway.max.inflight.requests: with a Fetch the broker holds 2 s owed, the requests past the cap are not
    read (they reach the broker after its answer); gateway.max.buffered.response.bytes: past it the gateway stops taking
    answers for a client that reads nothing, its in-flight slots fill up and it stops being read: a few of its
    fetches of 1 MB reach the broker (the kernel's socket buffers hold some answers too)."""
    relay = Relay(("127.0.0.1", kafka_broker.port))
    upstream = type("Upstream", (), {"bootstrap": relay.bootstrap})()
    topic = f"caps-{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(topic, 1)
    fetch_cls = message_class("FetchRequest")

    def fetch(wait_ms: int, min_bytes: int) -> object:
        return fetch_cls(replica_id=-1, max_wait_ms=wait_ms, min_bytes=min_bytes, max_bytes=4 << 20,
                         isolation_level=0, topics=[fetch_cls.FetchTopic(topic=topic, partitions=[
                             fetch_cls.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=4 << 20)])])
    gateway = GatewayProcess(upstream, ["caps"], tmp_path / "state", "--limit", "gateway.max.inflight.requests=1")
    try:
        versions = message_class("ApiVersionsRequest")()
        conn = _pipelined(gateway.port, [(fetch(2000, 1 << 20), 12), (versions, 0), (versions, 0)])
        deadline = time.monotonic() + 10
        while len([a for a in relay.arrivals if a[0] == "pipelined"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        (_, fetched), (_, second), _ = [a for a in relay.arrivals if a[0] == "pipelined"]
        assert second - fetched > 1.5, f"the second request reached the broker {second - fetched:.2f} s after " \
                                       "the first: gateway.max.inflight.requests=1 did not hold it back"
        conn.close()
    finally:
        gateway.stop()
    with KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=50) as producer:
        for _ in range(256):
            producer.send(topic, b"x" * 4096)  # 1 MB to fetch, again and again

    def forwarded(buffered: int) -> int:
        """Of 80 fetches of 1 MB from a client reading nothing, how many reach the broker."""
        relay.arrivals.clear()
        gateway = GatewayProcess(upstream, ["caps"], tmp_path / "state", "--limit", "gateway.max.inflight.requests=4",
                                 "--limit", f"gateway.max.buffered.response.bytes={buffered}")
        try:
            conn = socket.create_connection(("127.0.0.1", gateway.port))
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            for i in range(80):  # one at a time, as the gateway's answers pile up unread
                conn.sendall(_frame(fetch(0, 1), 12, i + 1, "never-reads"))
                time.sleep(0.05)
            time.sleep(1)
            conn.close()
            assert "Traceback" not in gateway.log.read_text()
            return len([a for a in relay.arrivals if a[0] == "never-reads"])
        finally:
            gateway.stop()
    try:
        small, large = forwarded(65536), forwarded(32 << 20)  # the kernel's socket buffers hold a few more
        assert small < 16 and large - small >= 16, \
            f"gateway.max.buffered.response.bytes: {small} fetches read at 64 KB, {large} at 32 MB"
    finally:
        relay.close()


@pytest.mark.parametrize("options, says", [
    (["--state", "{file}"], "a file, not a directory"),
    (["--group-config", "group.max.bogus=1"], "unknown"),
    (["--group-config", "group.min.session.timeout.ms=x"], "integer"),
    (["--limit", "max.connections=0"], "at least 1"),
    (["--upstream", "127.0.0.1:1"], "upstream 127.0.0.1:1 unreachable"),
    (["--listen", "127.0.0.1:{busy}"], "cannot listen"),
])
def test_cli_mistakes_are_one_line_and_exit_2(kafka_broker: KafkaBroker, tmp_path: Path, options: list[str],
                                              says: str) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    values = {"file": str(file), "busy": str(busy.getsockname()[1])}
    command = [sys.executable, "-m", "kprotocol", "gateway", "--upstream", kafka_broker.bootstrap, "--listen",
               f"127.0.0.1:{free_port()}", "--group", "g", "--no-uvloop"]
    command += [o.format(**values) for o in options]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    busy.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr


def test_sigterm_drains_and_exits_cleanly(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    gateway = GatewayProcess(kafka_broker, ["t"], tmp_path / "state")
    with Connection("127.0.0.1", gateway.port) as conn:
        conn.send(message_class("MetadataRequest")(topics=[]))
        os.kill(gateway.process.pid, signal.SIGTERM)
        assert gateway.process.wait(20) == 0
    log = gateway.log.read_text()
    assert "Traceback" not in log and "CancelledError" not in log, log

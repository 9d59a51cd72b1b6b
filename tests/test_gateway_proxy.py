"""The gateway as a Kafka proxy in front of the real broker: real clients stay on it end to end."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from compat.gateway import Gateway
from kprotocol import message_class
from kprotocol.connection import Connection
from kprotocol.toolchain import KafkaBroker


class RunningGateway:
    """A Gateway on its own event loop thread."""

    def __init__(self, broker: KafkaBroker, **options: object) -> None:
        self.loop = asyncio.new_event_loop()
        self.gateway = Gateway(("127.0.0.1", broker.port), ("127.0.0.1", 0), **options)  # type: ignore[arg-type]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.gateway.start(), self.loop).result(30)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.gateway.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.gateway.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def gateway(kafka_broker: KafkaBroker) -> Iterator[RunningGateway]:
    running = RunningGateway(kafka_broker, extra_api_versions={88: (0, 0), 89: (0, 0)})
    yield running
    running.close()


def _topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"gw-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def test_clients_stay_on_the_gateway(gateway: RunningGateway, kafka_broker: KafkaBroker) -> None:
    topic = _topic(gateway.bootstrap)
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, compression_type="gzip", linger_ms=5)
    for i in range(200):
        producer.send(topic, key=str(i % 7).encode(), value=f"v{i}".encode())
    producer.flush()
    brokers = {(b.host, b.port) for b in producer._metadata.brokers()}
    producer.close()
    listeners = set(gateway.gateway.brokers.local_port.values())
    assert brokers and {port for _, port in brokers} <= listeners
    assert kafka_broker.port not in {port for _, port in brokers}

    consumer = KafkaConsumer(topic, bootstrap_servers=gateway.bootstrap, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", consumer_timeout_ms=15000)
    values = set()
    for message in consumer:
        values.add(message.value)
        if len(values) == 200:
            break
    consumer.commit()
    coordinator = consumer._coordinator.coordinator_id
    consumer.close()
    assert values == {f"v{i}".encode() for i in range(200)}
    assert coordinator is not None


def _request(api_key: int, api_version: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhi", api_key, api_version, 7) + struct.pack(">h", 1) + b"c" + body
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("bad, then_close_writes, logged", [
    (b"\xff\xff\xff\xff garbage", False, "frame size -1 is outside"),
    (struct.pack(">i", 200 * 1024 * 1024) + b"x" * 64, False, "frame size 209715200 is outside"),  # oversize
    (struct.pack(">i", 3) + b"abc", False, "frame size 3 is outside"),
    (struct.pack(">i", 100) + b"\x00\x03\x00\x0c", True, "connection closed inside a 100-byte frame"),
    (_request(3, 99), False, "upstream closed before answering api 3 v99"),           # a version nobody has: upstream hangs up
    (_request(11, 42, b"\x00" * 40), False, "before answering api 11 v42"),
])
def test_bad_input_closes_only_its_own_connection(gateway: RunningGateway, caplog: pytest.LogCaptureFixture,
                                                  bad: bytes, then_close_writes: bool, logged: str) -> None:
    caplog.set_level(logging.WARNING, logger="kprotocol.gateway")
    good = Connection("127.0.0.1", gateway.gateway.port)
    with socket.create_connection(("127.0.0.1", gateway.gateway.port), timeout=10) as conn:
        conn.sendall(bad)
        if then_close_writes:
            conn.shutdown(socket.SHUT_WR)
        assert conn.recv(10) == b""  # closed by the gateway
    deadline = time.monotonic() + 5
    while not any(logged in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(logged in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    metadata = good.send(message_class("MetadataRequest")(topics=[]))  # the other connection carries on
    assert [b.port for b in metadata.brokers] == list(gateway.gateway.brokers.local_port.values())
    good.close()


def test_api_versions_advertise_streams_group_apis(gateway: RunningGateway) -> None:
    with Connection("127.0.0.1", gateway.gateway.port) as conn:
        assert {88, 89} <= set(conn.api_versions)


def test_acks_zero_produce_keeps_responses_in_order(gateway: RunningGateway) -> None:
    topic = _topic(gateway.bootstrap, 1)
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, acks=0)
    for i in range(50):
        producer.send(topic, value=b"x")
    producer.flush()
    producer.close()
    deadline = time.monotonic() + 15
    count = 0
    while time.monotonic() < deadline and count < 50:
        consumer = KafkaConsumer(topic, bootstrap_servers=gateway.bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=3000)
        count = sum(1 for _ in consumer)
        consumer.close()
    assert count == 50


def test_acls_are_known_unenforced_only_while_every_broker_says_so(kafka_broker) -> None:
    """A broker without an authorizer answers DescribeAcls SECURITY_DISABLED: then the gateway asks nothing on
    clients' behalf (every request is allowed there). A broker it cannot ask leaves the probes on."""
    from compat.gateway.authorization import ClusterAcls
    from compat.gateway.upstream import Upstream

    async def check(address: tuple[str, int]) -> bool:
        upstream = Upstream(address)
        try:
            return await ClusterAcls(upstream).check()
        finally:
            upstream.close()

    assert asyncio.run(check(("127.0.0.1", kafka_broker.port))) is False
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        assert asyncio.run(check(unused.getsockname())) is True  # nobody answers: enforced

"""Real client<->broker traffic, recorded byte for byte, decodes and re-encodes to the same bytes:
kafka-python, confluent-kafka (librdkafka), Kafka's Java clients and Kafka Streams (both group
protocols), against the real broker; and the small recordings kept in fixtures/traffic/.

The same run is captured by tcpdump on the loopback interface: the capture decoder must find
every exchange the recording proxy saw, field for field, in the pcap and in its pcapng copy, and
tshark's Kafka dissector decodes what its version supports: those requests and responses are compared with
kprotocol's field by field (tests/tshark_dissection.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kprotocol.toolchain import KafkaBroker, free_port
from kprotocol.toolchain.maven import java_command
from kprotocol.toolchain.recorder import RecordingProxy, RoundTripReport, check_round_trip
from kprotocol.toolchain.streams_app import StreamsApp
from kprotocol.toolchain.tcpdump import Tcpdump, to_pcapng
from proxy_capture import assert_capture_matches_proxy
from tshark_dissection import judge

TRAFFIC = Path(__file__).resolve().parents[1] / "fixtures" / "traffic"
CLIENTS_PCAP = TRAFFIC.parent / "captures" / "clients.pcap"
pytestmark = pytest.mark.xdist_group("kafka")


@dataclass
class Traffic:
    broker: KafkaBroker
    proxy: RecordingProxy
    pcap: Path
    pcapng: Path


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    """Every client below, through the recording proxy, captured by tcpdump on both ports."""
    port = free_port()
    broker = KafkaBroker.start(config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    proxy = RecordingProxy(("127.0.0.1", broker.port), port)
    directory = tmp_path_factory.mktemp("capture")
    capture = Tcpdump.start(directory / "traffic.pcap", (port, broker.port))
    try:
        broker.create_topic("traffic", 2)
        bootstrap = f"127.0.0.1:{proxy.port}"
        _kafka_python(bootstrap)
        _confluent(bootstrap)
        _java(bootstrap)
        _streams(bootstrap, broker)
        proxy.stop()
        pcap = capture.stop()
        if keep := os.environ.get("KPROTOCOL_KEEP_TRAFFIC"):  # a directory: keep the capture there too
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(pcap, keep)
        yield Traffic(broker, proxy, pcap, to_pcapng(pcap, directory / "traffic.pcapng"))
    finally:
        capture.stop()
        proxy.stop()
        broker.stop()


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    for codec in ("gzip", "snappy", "lz4", "zstd"):
        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
        for i in range(20):
            producer.send("traffic", key=str(i).encode(), value=codec.encode() * 10)
        producer.close()
    consumer = KafkaConsumer("traffic", bootstrap_servers=bootstrap, group_id="py-classic",
                             auto_offset_reset="earliest", consumer_timeout_ms=4000)
    assert sum(1 for _ in consumer) >= 80
    consumer.commit()
    consumer.close()


def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "rd-tx", "compression.type": "zstd"})
    producer.init_transactions()
    for outcome in ("commit", "abort"):
        producer.begin_transaction()
        for i in range(10):
            producer.produce("traffic", key=str(i), value=outcome)
        getattr(producer, f"{outcome}_transaction")()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rd-848", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["traffic"])
    got = 0
    for _ in range(40):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    consumer.commit(asynchronous=False) if got else None
    consumer.close()
    assert got > 0


def _java(bootstrap: str) -> None:
    producer = subprocess.run(java_command("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bootstrap,
                                           "--topic", "traffic", "--producer-property", "compression.type=lz4"),
                              input="".join(f"java-{i}\n" for i in range(30)), capture_output=True, text=True,
                              timeout=120)
    assert producer.returncode == 0, producer.stderr[-2000:]
    consumer = subprocess.run(java_command(
        "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap, "--topic", "traffic",
        "--group", "java-848", "--from-beginning", "--max-messages", "30", "--timeout-ms", "30000",
        "--consumer-property", "group.protocol=consumer"), capture_output=True, text=True, timeout=120)
    assert consumer.returncode == 0, consumer.stderr[-2000:]


def _streams(bootstrap: str, broker: KafkaBroker) -> None:
    broker.create_topic("traffic-out", 2)
    for protocol in ("classic", "streams"):
        app = StreamsApp.start(bootstrap, f"traffic-{protocol}", "traffic", "traffic-out", group_protocol=protocol)
        try:
            app.wait_for(app.running_with_tasks(1, 2), 120)
        finally:
            app.stop()


def test_real_clients_round_trip_byte_exact(traffic: Traffic) -> None:
    proxy = traffic.proxy
    report = RoundTripReport()
    keep = os.environ.get("KPROTOCOL_KEEP_TRAFFIC")  # a directory: write every recording there
    for number, connection in enumerate(list(proxy.connections)):
        check_round_trip(connection.client, connection.server, report)
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / f"conn-{number:02d}.client.bin").write_bytes(connection.client)
            (Path(keep) / f"conn-{number:02d}.server.bin").write_bytes(connection.server)
    assert report.mismatches == []
    apis = {name for name, _ in report.exchanges}
    assert {"Produce", "Fetch", "JoinGroup", "SyncGroup", "ConsumerGroupHeartbeat", "StreamsGroupHeartbeat",
            "InitProducerId", "AddPartitionsToTxn", "EndTxn", "OffsetCommit", "Metadata", "ApiVersions"} <= apis
    print(f"\n{sum(report.exchanges.values())} exchanges over {len(proxy.connections)} connections byte-exact:",
          ", ".join(f"{n} v{v}: {c}" for (n, v), c in sorted(report.exchanges.items())))


@pytest.mark.parametrize("client", sorted({p.name.split(".")[0] for p in TRAFFIC.glob("*.client.bin")}))
def test_kept_recordings_round_trip(client: str) -> None:
    report = RoundTripReport()
    check_round_trip((TRAFFIC / f"{client}.client.bin").read_bytes(), (TRAFFIC / f"{client}.server.bin").read_bytes(),
                     report)
    assert report.mismatches == [] and sum(report.exchanges.values()) > 0


@pytest.mark.parametrize("form", ["pcap", "pcapng"])
def test_capture_decodes_every_exchange_the_proxy_saw(traffic: Traffic, form: str) -> None:
    proxy, path = traffic.proxy, getattr(traffic, form)
    # Every connection's exchanges field for field; the proxy's own connections to the broker carry the
    # same requests (plus the test's admin calls).
    total = assert_capture_matches_proxy(path, proxy, traffic.broker.port)
    assert total > 100
    print(f"\n{form}: {total} exchanges over {len(proxy.connections)} connections match the proxy's bytes")


def test_tshark_differential(traffic: Traffic) -> None:
    """Every request and response tshark's Kafka dissector decodes, field by field (tests/tshark_dissection.py)."""
    judged = judge(traffic.pcap, traffic.proxy.port)
    assert judged.differences == [], "\n".join(judged.differences[:20])
    assert judged.compared["request"] >= 20 and judged.compared["response"] >= 20, judged.summary()
    print("\n" + judged.summary())


def test_tshark_differential_on_the_kept_capture() -> None:
    """The same on fixtures/captures/clients.pcap, whose counts are known."""
    judged = judge(CLIENTS_PCAP, 60127)
    assert judged.differences == [], "\n".join(judged.differences[:20])
    assert judged.compared == {"request": 22, "response": 21}, judged.summary()

"""The gateway in front of a three-node SASL_SSL cluster while brokers restart and leaders move.

A Kafka Streams application (two instances, classic protocol, SCRAM over TLS to the gateway) is
migrated by the gateway (one instance rolled to the streams protocol) while the cluster restarts
the node the gateway bootstraps from and another, and partition leaders move; no input record is lost,
the state topic has the cluster's replication, and the metrics scraped throughout match what happened.

Minutes long (four JVMs): not collected by `make test` (its name is not test_*); `make test-gateway-cluster` runs it.
"""

from __future__ import annotations

import collections
import itertools
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from kprotocol import message_class
from kprotocol.connection import Connection
from kprotocol.toolchain.broker import BrokerTLS
from kprotocol.toolchain.certs import CertificateAuthority
from kprotocol.toolchain.cluster import KafkaCluster
from kprotocol.toolchain.processes import die_with_parent, stop_process
from kprotocol.toolchain.streams_app import StreamsApp

pytestmark = pytest.mark.xdist_group("cluster")
USERS = {"app": "app-secret", "gateway": "gateway-secret"}
PARTITIONS = 4


def _client_options(bootstrap: str, ca: Path) -> dict:
    return dict(bootstrap_servers=bootstrap, security_protocol="SASL_SSL", ssl_cafile=str(ca),
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="app", sasl_plain_password=USERS["app"])


def _java_security(ca: Path) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                f'username="app" password="{USERS["app"]}";'}


class Input:
    """Keys produced continuously to the source topic straight to the cluster; only acknowledged ones count."""

    def __init__(self, options: dict, topic: str) -> None:
        self.producer = KafkaProducer(acks="all", linger_ms=5, **options)
        self.topic, self.sent, self.failed = topic, collections.Counter(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for i in itertools.count():
            if self._stop.is_set():
                return
            key = f"key-{i % 40}"
            try:
                self.producer.send(self.topic, key=key.encode(), value=b"v").get(15)
                self.sent[key] += 1
            except KafkaError:
                self.failed += 1  # not acknowledged: not expected downstream either
            time.sleep(0.01)

    def stop(self) -> collections.Counter:
        self._stop.set()
        self._thread.join(60)
        self.producer.close()
        return self.sent


class Scraper:
    """The gateway's /metrics every second, kept."""

    def __init__(self, url: str) -> None:
        self.url, self.samples = url, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    self.samples.append(response.read().decode())
            except OSError as exc:
                self.samples.append(f"# scrape failed: {exc}")

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(20)
        return self.samples


def epochs_seen(samples: list[str]) -> list[int]:
    return sorted({int(e) for s in samples if (e := metric(s, "kprotocol_gateway_group_epoch")) is not None})


def metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, CertificateAuthority]]:
    certs = tmp_path_factory.mktemp("cluster-certs")
    ca = CertificateAuthority.create(certs, "cluster-ca")
    broker = ca.issue("broker", hosts=["127.0.0.1", "localhost"])
    with KafkaCluster.start(tls=BrokerTLS(broker.pem, ca.cert), scram_users=USERS) as running:
        yield running, ca


def test_migration_across_broker_restarts_and_leader_moves(cluster: tuple[KafkaCluster, CertificateAuthority],
                                                           tmp_path: Path) -> None:
    kafka, ca = cluster
    app_id = f"cluster-{uuid.uuid4().hex[:6]}"
    source, sink, state_topic = f"{app_id}-in", f"{app_id}-out", f"{app_id}-gateway-state"
    kafka.create_topic(source, PARTITIONS)
    kafka.create_topic(sink, PARTITIONS)
    gateway_cert = ca.issue("gateway", hosts=["127.0.0.1", "localhost"])
    config = tmp_path / "gateway.toml"
    config.write_text(f'''upstream = "{kafka.nodes[1].sasl_ssl_bootstrap}"
listen = "127.0.0.1:0"
group = ["{app_id}"]
state_topic = "{state_topic}"
tls_cert = "{gateway_cert.cert}"
tls_key = "{gateway_cert.key}"
metrics = "127.0.0.1:0"
initial_rebalance_delay_ms = 1000
uvloop = false

[group_config]
"streams.session.timeout.ms" = "10000"

[upstream_config]
"security.protocol" = "SASL_SSL"
"ssl.truststore.type" = "PEM"
"ssl.truststore.location" = "{ca.cert}"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "gateway"
"sasl.password" = "{USERS['gateway']}"
''')
    log = tmp_path / "gateway.log"
    gateway = subprocess.Popen([sys.executable, "-m", "kprotocol", "gateway", "--config", str(config), "--verbose"],
                               stdout=subprocess.PIPE, stderr=log.open("wb"), text=True, start_new_session=True,
                               preexec_fn=die_with_parent)
    apps: list[StreamsApp] = []
    feed = scraper = None
    try:
        line = gateway.stdout.readline()  # type: ignore[union-attr]
        match = re.match(r"gateway TLS on 127\.0\.0\.1:(\d+) .*\((.*)\)", line)
        assert match, f"{line!r}; {log.read_text()[-2000:]}"
        assert len(match.group(2).split(", ")) == 3  # a listener for each of the three brokers
        bootstrap = f"127.0.0.1:{match.group(1)}"
        metrics_url = re.search(r"(http://\S+/metrics)", gateway.stdout.readline()).group(1)  # type: ignore
        scraper = Scraper(metrics_url)
        direct = _client_options(kafka.sasl_ssl_bootstrap, ca.cert)
        feed = Input(direct, source)

        with Connection("127.0.0.1", kafka.nodes[2].port) as conn:  # the state topic: the cluster's replication
            request = message_class("MetadataRequest")
            topics = conn.send(request(topics=[request.MetadataRequestTopic(name=state_topic)])).topics
        assert [len(p.replica_nodes) for p in topics[0].partitions] == [3]

        def start(i: int, protocol: str) -> StreamsApp:
            return StreamsApp.start(bootstrap, app_id, source, sink, group_protocol=protocol,
                                    state_dir=tmp_path / f"instance-{i}", extra=_java_security(ca.cert))

        def wait_running(timeout: float = 180) -> None:
            deadline = time.monotonic() + timeout
            while True:
                latest = [a.latest_tasks().get(0) for a in apps]
                if all(e and e["state"] == "RUNNING" for e in latest) and sorted(
                        t for e in latest for t in e["active"]) == [f"0_{p}" for p in range(PARTITIONS)]:
                    return
                assert time.monotonic() < deadline, f"not every task running: {latest}"
                time.sleep(0.3)

        apps += [start(0, "classic"), start(1, "classic")]
        wait_running()
        for p in range(PARTITIONS):  # leaders move while the application runs
            kafka.move_leader(source, p, to=1 + (kafka.leader(source, p) % 3))
        kafka.restart(2)
        apps[1].stop()
        apps[1] = start(1, "streams")  # the migration: one instance on the streams protocol
        wait_running()
        kafka.stop_node(1)  # the node the gateway bootstrapped from
        late = KafkaProducer(acks="all", **_client_options(bootstrap, ca.cert))  # a new client bootstraps meanwhile
        late.send(source, key=b"late", value=b"v").get(60)
        late.close()
        kafka.start_node(1)
        wait_running()
        time.sleep(3)
        sent = feed.stop()
        feed_failed, feed = feed.failed, None
        samples = scraper.samples
        latest: dict[str, int] = {}
        consumer = KafkaConsumer(sink, auto_offset_reset="earliest", consumer_timeout_ms=90_000, **direct)
        try:
            for message in consumer:
                latest[message.key.decode()] = int(message.value)
                if all(latest.get(k, 0) >= n for k, n in sent.items()) and "late" in latest:
                    break
        finally:
            consumer.close()
        print(f"\n{sum(sent.values())} records acknowledged ({feed_failed} sends failed during restarts), "
              f"group epochs {epochs_seen(samples)}, {len(samples)} scrapes")
        assert sum(sent.values()) > 500
        sent["late"] += 1
        assert {k: n for k, n in sent.items() if latest.get(k, 0) < n} == {}  # nothing acknowledged was lost

        samples = scraper.stop()
        scraper = None
        final = samples[-1]
        assert metric(final, "kprotocol_gateway_group_members", group=app_id, protocol="classic") == 1
        assert metric(final, "kprotocol_gateway_group_members", group=app_id, protocol="streams") == 1
        assert metric(final, "kprotocol_gateway_group_state", group=app_id, state="stable") == 1
        epochs = [metric(s, "kprotocol_gateway_group_epoch", group=app_id) for s in samples]
        epochs = [e for e in epochs if e is not None]
        assert epochs == sorted(epochs) and epochs[-1] >= 2  # the group's epoch only grows, once per rebalance
        assert metric(final, "kprotocol_gateway_group_rebalances_total", group=app_id) == epochs[-1] - epochs[0]
        assert metric(final, "kprotocol_gateway_state_persistence_failures_total") == 0
        assert metric(final, "kprotocol_gateway_group_tasks_unowned", group=app_id) == 0
        assert (metric(final, "kprotocol_gateway_request_latency_seconds_count", api="StreamsGroupHeartbeat",
                       version="0", answered_by="gateway") or 0) + (metric(
            final, "kprotocol_gateway_request_latency_seconds_count", api="StreamsGroupHeartbeat",
            version="1", answered_by="gateway") or 0) > 0
    finally:
        if feed is not None:
            feed.stop()
        if scraper is not None:
            scraper.stop()
        for app in apps:
            app.stop()
        stop_process(gateway, 20)

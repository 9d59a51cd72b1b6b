"""A three-node Apache Kafka cluster (KRaft, each node broker and controller) on 127.0.0.1.

    with KafkaCluster.start() as cluster:
        cluster.bootstrap               # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        cluster.restart(2)              # a clean stop of node 2, then the same node again
        cluster.move_leader("orders", 0, to=3)

Replication factor 3 and min.insync.replicas=2 everywhere (internal topics included), so the cluster
keeps serving acks=all writes while one node is down. `tls` and `scram_users` add SSL and SASL_SSL
listeners to every node as for KafkaBroker (the inter-broker listener stays PLAINTEXT).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from kprotocol.connection import Connection
from kprotocol.registry import message_class
from kprotocol.toolchain.broker import (BASE_CONFIG, BrokerTLS, KafkaBroker, free_port, run_kafka_tool,
                                        sasl_plain_config, scram_arguments, tls_config)
from kprotocol.toolchain.maven import ToolchainError, java_command, kafka_libs
from kprotocol.toolchain.processes import die_with_parent

NODES = 3
NODE_READY_TIMEOUT_S = 120.0  # three JVMs starting at once on a busy machine
REPLICATED = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "num.partitions": "3",
}


@dataclass
class KafkaCluster:
    workdir: Path
    nodes: dict[int, KafkaBroker] = field(default_factory=dict)
    keep_workdir: bool = False

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values())

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return ",".join(node.sasl_ssl_bootstrap for node in self.nodes.values())

    @classmethod
    def start(cls, workdir: Path | None = None, config: dict[str, str] | None = None, heap: str = "512m", *,
              tls: BrokerTLS | None = None, scram_users: dict[str, str] | None = None,
              sasl_plain_users: dict[str, str] | None = None) -> KafkaCluster:
        """Format three nodes with one cluster id and a static controller quorum, start them, wait for all."""
        libs = kafka_libs()
        keep = workdir is not None
        workdir = Path(workdir or tempfile.mkdtemp(prefix="kprotocol-cluster-"))
        ports = {n: {"PLAINTEXT": free_port(), "CONTROLLER": free_port(),
                     **({"SSL": free_port()} if tls else {}),
                     **({"SASL_SSL": free_port()} if tls and (scram_users or sasl_plain_users) else {})}
                 for n in range(1, NODES + 1)}
        voters = ",".join(f"{n}@127.0.0.1:{p['CONTROLLER']}" for n, p in ports.items())
        cluster_id = run_kafka_tool("kafka.tools.StorageTool", "random-uuid", libs=libs).stdout.strip()
        cluster = cls(workdir, keep_workdir=keep)
        security = dict(tls_config(tls, sasl_plain_users, bool(scram_users))) if tls else {}
        if sasl_plain_users and tls:
            security["sasl.enabled.mechanisms"] = sasl_plain_config(sasl_plain_users)["sasl.enabled.mechanisms"]
        protocols = ",".join(f"{name}:{'PLAINTEXT' if name == 'CONTROLLER' else name}" for name in ports[1])
        try:
            for n, p in ports.items():
                node_dir = workdir / f"node-{n}"
                node_dir.mkdir(parents=True, exist_ok=True)
                broker_listeners = [f"{name}://127.0.0.1:{port}" for name, port in p.items() if name != "CONTROLLER"]
                props = {**BASE_CONFIG, **REPLICATED, "node.id": str(n),
                         "listeners": ",".join([*broker_listeners, f"CONTROLLER://127.0.0.1:{p['CONTROLLER']}"]),
                         "advertised.listeners": ",".join(broker_listeners),
                         "listener.security.protocol.map": protocols,
                         "controller.quorum.voters": voters, "log.dirs": str(node_dir / "data"),
                         **security, **(config or {})}
                (node_dir / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()),
                                                            encoding="utf-8")
                run_kafka_tool("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                               str(node_dir / "server.properties"), *scram_arguments(scram_users or {}), libs=libs)
            for n, p in ports.items():
                cluster.nodes[n] = KafkaBroker(workdir / f"node-{n}", p["PLAINTEXT"], p["CONTROLLER"],
                                               cluster._launch(n, heap), keep_workdir=True,
                                               ssl_port=p.get("SSL"), sasl_ssl_port=p.get("SASL_SSL"))
            for node in cluster.nodes.values():
                node._wait_ready(NODE_READY_TIMEOUT_S)
            cluster.wait_for_brokers(NODES)
        except BaseException:
            cluster.stop(keep_workdir=True)
            raise
        cluster._heap = heap
        return cluster

    _heap: str = "512m"

    def _launch(self, node_id: int, heap: str) -> subprocess.Popen[bytes]:
        node_dir = self.workdir / f"node-{node_id}"
        log = (node_dir / "broker.log").open("ab")
        try:
            return subprocess.Popen(java_command("kafka.Kafka", str(node_dir / "server.properties"), heap=heap),
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, preexec_fn=die_with_parent)
        finally:
            log.close()

    def stop_node(self, node_id: int) -> None:
        """A clean shutdown of one node (SIGTERM to its PID: controlled shutdown moves its leaders away)."""
        node = self.nodes[node_id]
        node.stop(keep_workdir=True)

    def start_node(self, node_id: int) -> None:
        """The stopped node again, same id, ports and data; returns once the cluster sees every node."""
        node = self.nodes[node_id]
        node.process = self._launch(node_id, self._heap)
        node._wait_ready(NODE_READY_TIMEOUT_S)
        self.wait_for_brokers(NODES)

    def restart(self, node_id: int) -> None:
        self.stop_node(node_id)
        self.start_node(node_id)

    def _any(self) -> KafkaBroker:
        for node in self.nodes.values():
            if node.process.poll() is None:
                return node
        raise ToolchainError("no node of the cluster is running")

    def wait_for_brokers(self, count: int, timeout: float = 120.0) -> None:
        """Until Metadata lists `count` brokers and every partition has its full ISR."""
        deadline = time.monotonic() + timeout
        metadata = message_class("MetadataRequest")
        while time.monotonic() < deadline:
            try:
                with Connection("127.0.0.1", self._any().port, timeout=5.0) as conn:
                    response = conn.send(metadata(topics=None))
                if len(response.brokers) >= count and all(
                        len(p.isr_nodes) == len(p.replica_nodes) for t in response.topics for p in t.partitions):
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise ToolchainError(f"the cluster did not show {count} brokers with full ISRs within {timeout:.0f} s")

    def leader(self, topic: str, partition: int) -> int:
        metadata = message_class("MetadataRequest")
        with Connection("127.0.0.1", self._any().port, timeout=10.0) as conn:
            response = conn.send(metadata(topics=[metadata.MetadataRequestTopic(name=topic)]))
        return next(p.leader_id for t in response.topics for p in t.partitions if p.partition_index == partition)

    def move_leader(self, topic: str, partition: int, to: int, timeout: float = 60.0) -> None:
        """Make node `to` the leader: it becomes the preferred replica (a reassignment reordering the
        replicas), then a preferred leader election, as an operator does with Kafka's tools."""
        reassign, elect = message_class("AlterPartitionReassignmentsRequest"), message_class("ElectLeadersRequest")
        replicas = [to, *(n for n in self.nodes if n != to)]
        with Connection("127.0.0.1", self._any().port, timeout=30.0) as conn:
            response = conn.send(reassign(timeout_ms=30_000, topics=[reassign.ReassignableTopic(
                name=topic, partitions=[reassign.ReassignablePartition(partition_index=partition,
                                                                       replicas=replicas)])]))
            errors = [p.error_code for t in response.responses for p in t.partitions]
            if response.error_code or any(errors):
                raise ToolchainError(f"reassigning {topic}-{partition}: {response.error_code} {errors}")
            deadline = time.monotonic() + timeout
            while self.leader(topic, partition) != to:
                if time.monotonic() > deadline:
                    raise ToolchainError(f"{topic}-{partition} still led by {self.leader(topic, partition)}")
                conn.send(elect(election_type=0, timeout_ms=10_000, topic_partitions=[
                    elect.TopicPartitions(topic=topic, partitions=[partition])]))
                time.sleep(0.3)

    def create_topic(self, name: str, partitions: int = 3, config: dict[str, str] | None = None) -> None:
        request = message_class("CreateTopicsRequest")
        topic = request.CreatableTopic(name=name, num_partitions=partitions, replication_factor=NODES, configs=[
            request.CreatableTopicConfig(name=k, value=v) for k, v in (config or {}).items()])
        with Connection("127.0.0.1", self._any().port, timeout=30.0) as conn:
            response = conn.send(request(topics=[topic], timeout_ms=30_000))
        if response.topics[0].error_code not in (0, 36):
            raise ToolchainError(f"CreateTopics {name}: {response.topics[0].error_code}")
        self.wait_for_brokers(NODES)

    def stop(self, keep_workdir: bool | None = None) -> None:
        for node in self.nodes.values():
            node.stop(keep_workdir=True)
        keep = self.keep_workdir if keep_workdir is None else keep_workdir
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(keep_workdir=True if exc is not None else None)

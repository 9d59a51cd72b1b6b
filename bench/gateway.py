"""Throughput and latency through the gateway against direct to the broker: same client, same run.

    python bench/gateway.py [--records 200000] [--record-size 1024] [--rounds 2] [--tls]

Starts a real broker and `kprotocol gateway` (its own process, uvloop when installed) in front of
it, then runs Kafka's own perf tools alternately against each address:
- ProducerPerformance (acks=1): MB/s and latency percentiles,
- ConsumerPerformance: MB/s of fetching the same records,
- EndToEndLatency (acks=1, 1 KB): produce-to-consume round trip percentiles (Kafka's tool counts whole ms),
- a Produce round trip (acks=1, one 1 KB record, one request at a time over one kprotocol Connection)
  timed in microseconds: the gateway's added latency at a resolution the 2 ms target needs,
and prints each figure for both, the throughput ratio and the added p99 latency. Then it times the
convergence of a classic consumer group (kafka-python consumers joining at once, leader-based
assignment), five times each alternately: coordinated by the broker directly, and by the gateway itself
(`--group`); the medians are compared.

With --tls every leg speaks TLS (certificates made for the run): the clients to the broker's SSL
listener directly, and to the gateway's TLS listeners, the gateway to the broker's SSL listener
(--upstream-config security.protocol=SSL); the gateway decrypts and encrypts again, the price shown.
"""

from __future__ import annotations

import argparse
import re
import socket
import ssl
import statistics
import tempfile
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kprotocol import message_class  # noqa: E402
from kprotocol.connection import Connection  # noqa: E402
from kprotocol.records import Record, write_batch  # noqa: E402
from kprotocol.toolchain import KafkaBroker, free_port, java_command  # noqa: E402

PRODUCER = re.compile(r"records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                      r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")
E2E = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)")


class Tls:
    """The run's CA and certificates, and the client settings that trust them (None: plaintext)."""

    def __init__(self, directory: Path) -> None:
        from kprotocol.toolchain.certs import CertificateAuthority

        self.directory = directory
        self.ca = CertificateAuthority.create(directory, "bench-ca")
        self.broker = self.ca.issue("broker", hosts=["127.0.0.1", "localhost"])
        self.gateway = self.ca.issue("gateway", hosts=["127.0.0.1", "localhost"])
        self.client_props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                             "ssl.truststore.location": str(self.ca.cert)}
        self.client_file = directory / "client.properties"
        self.client_file.write_text("".join(f"{k}={v}\n" for k, v in self.client_props.items()))
        self.context = ssl.create_default_context(cafile=str(self.ca.cert))


TLS: Tls | None = None


def tool(main_class: str, *args: str) -> str:
    done = subprocess.run(java_command(main_class, *args, heap="1g"), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{main_class} failed: {done.stderr[-2000:]}")
    return done.stdout


def create_topic(broker: KafkaBroker, name: str, partitions: int) -> None:
    request = message_class("CreateTopicsRequest")
    topic = request.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
    with broker.connect() as conn:
        response = conn.send(request(topics=[topic], timeout_ms=30000))
    assert response.topics[0].error_code == 0, response


def produce(bootstrap: str, topic: str, records: int, size: int) -> dict[str, float]:
    out = tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
               "--record-size", str(size), "--throughput", "-1", "--producer-props",
               f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=5", "batch.size=131072",
               *(f"{k}={v}" for k, v in (TLS.client_props.items() if TLS else ())))
    m = PRODUCER.findall(out)[-1]
    return {"MB/s": float(m[1]), "p50 ms": float(m[4]), "p99 ms": float(m[6])}


def consume(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    out = tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
               "--num-records", str(records), "--timeout", "30000",
               *(("--command-config", str(TLS.client_file)) if TLS else ()))
    header, row = [line for line in out.splitlines() if line.strip()][-2:]
    values = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")]))
    return {"MB/s": float(values["MB.sec"])}


def end_to_end(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    out = tool("org.apache.kafka.tools.EndToEndLatency", bootstrap, topic, str(records), "1", "1024",
               *((str(TLS.client_file),) if TLS else ()))
    m = E2E.search(out)
    return {"p50 ms": float(m[1]), "p99 ms": float(m[2]), "p99.9 ms": float(m[3])}


def produce_round_trips(port: int, topic: str, samples: int) -> dict[str, float]:
    """Percentiles (ms, microsecond resolution) of one synchronous Produce after another."""
    request_cls = message_class("ProduceRequest")
    batch = write_batch([Record(offset=0, timestamp=0, key=None, value=b"x" * 1024)])
    request = request_cls(acks=1, timeout_ms=30_000, topic_data=[request_cls.TopicProduceData(
        name=topic, partition_data=[request_cls.PartitionProduceData(index=0, records=batch)])])
    times = []
    with connect(port) as conn:
        for i in range(samples + samples // 10):  # the first tenth warms up
            start = time.perf_counter_ns()
            response = conn.send(request, version=9)
            if i >= samples // 10:
                times.append((time.perf_counter_ns() - start) / 1e6)
            assert response.responses[0].partition_responses[0].error_code == 0, response
    times.sort()
    return {f"p{q} ms": times[min(len(times) - 1, int(len(times) * q / 100))] for q in (50, 99, 99.9)}


def connect(port: int) -> Connection:
    if TLS is None:
        return Connection("127.0.0.1", port)
    conn = Connection.__new__(Connection)  # the same requests over a TLS socket
    conn.client_id, conn._correlation_id, conn.api_versions = "kprotocol", 0, {}
    conn.last_request_frame = conn.last_response_frame = b""
    conn._sock = TLS.context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                         server_hostname="127.0.0.1")
    return conn


CONVERGENCE_ROUNDS = 5
CONVERGENCE_GROUPS = [f"bench-converge-{i}" for i in range(2 * CONVERGENCE_ROUNDS)]


def convergence(bootstrap: str, topic: str, group: str, consumers: int, partitions: int) -> float:
    """Seconds from `consumers` consumers starting at once until their assignments cover every partition
    exactly once and stay unchanged for 2 s (that quiet time excluded)."""
    from kafka import KafkaConsumer

    stop, last_change, owned = threading.Event(), [time.monotonic()], [frozenset()] * consumers

    def run(i: int) -> None:
        security = dict(security_protocol="SSL", ssl_cafile=str(TLS.ca.cert)) if TLS else {}
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                 session_timeout_ms=10_000, heartbeat_interval_ms=500, **security)
        try:
            while not stop.is_set():
                consumer.poll(timeout_ms=50)
                now_owned = frozenset(consumer.assignment())
                if now_owned != owned[i]:
                    owned[i], last_change[0] = now_owned, time.monotonic()
        finally:
            consumer.close()

    start = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(consumers)]
    for t in threads:
        t.start()
    while not (sum(len(o) for o in owned) == partitions and time.monotonic() - last_change[0] > 2.0):
        time.sleep(0.05)
        if time.monotonic() - start > 120:
            raise TimeoutError(f"group {group} did not converge: {owned}")
    stop.set()
    for t in threads:
        t.join(30)
    return last_change[0] - start


def start_gateway(broker: KafkaBroker) -> tuple[subprocess.Popen, int]:
    port = free_port()
    groups = [arg for g in CONVERGENCE_GROUPS for arg in ("--group", g)]
    upstream, tls = broker.bootstrap, []
    if TLS is not None:
        upstream = broker.ssl_bootstrap
        tls = ["--tls-cert", str(TLS.gateway.cert), "--tls-key", str(TLS.gateway.key),
               "--upstream-config", str(TLS.client_file)]
    process = subprocess.Popen([sys.executable, "-m", "kprotocol", "gateway", "--upstream", upstream,
                                "--listen", f"127.0.0.1:{port}", "--initial-rebalance-delay-ms", "0", *groups, *tls],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = process.stdout.readline()  # type: ignore[union-attr]
    if not line.startswith("gateway "):
        process.kill()
        raise RuntimeError(f"gateway did not start: {line!r}")
    return process, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--latency-records", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=2, choices=(1, 2))
    parser.add_argument("--tls", action="store_true", help="TLS on every leg (client-broker, client-gateway-broker)")
    parser.add_argument("--skip-convergence", action="store_true", help="only throughput and latency")
    args = parser.parse_args()
    global TLS
    if args.tls:
        from kprotocol.toolchain.broker import BrokerTLS

        TLS = Tls(Path(tempfile.mkdtemp(prefix="kprotocol-bench-tls-")))
    results: dict[str, dict[str, list[float]]] = {"direct": {}, "gateway": {}}
    converged: dict[str, list[float]] = {}
    with KafkaBroker.start(config={"num.network.threads": "3", "num.io.threads": "4"}, heap="1g",
                           tls=BrokerTLS(TLS.broker.pem, TLS.ca.cert) if TLS else None) as broker:
        gateway, port = start_gateway(broker)
        try:
            targets = {"direct": broker.ssl_bootstrap if TLS else broker.bootstrap, "gateway": f"127.0.0.1:{port}"}
            for round_number in range(args.rounds):
                for name, bootstrap in (targets.items() if round_number % 2 == 0 else reversed(targets.items())):
                    topic = f"bench-{uuid.uuid4().hex[:8]}"
                    create_topic(broker, topic, 6)
                    figures = {f"produce {k}": v for k, v in produce(bootstrap, topic, args.records,
                                                                     args.record_size).items()}
                    figures.update({f"fetch {k}": v for k, v in consume(bootstrap, topic, args.records).items()})
                    latency_topic = f"bench-e2e-{uuid.uuid4().hex[:8]}"
                    create_topic(broker, latency_topic, 1)
                    figures.update({f"end-to-end {k}": v for k, v in
                                    end_to_end(bootstrap, latency_topic, args.latency_records).items()})
                    figures.update({f"produce round trip {k}": v for k, v in
                                    produce_round_trips(int(bootstrap.rsplit(":", 1)[1]), latency_topic,
                                                        args.latency_records).items()})
                    for key, value in figures.items():
                        results[name].setdefault(key, []).append(value)
                    time.sleep(1)
            # Convergence is bimodal (whether every consumer joins before the first rebalance completes):
            # alternating samples, the median of each.
            for sample in range(0 if args.skip_convergence else CONVERGENCE_ROUNDS):
                for name, bootstrap in targets.items():
                    group_topic = f"bench-group-{uuid.uuid4().hex[:8]}"
                    create_topic(broker, group_topic, 12)
                    group = CONVERGENCE_GROUPS[sample * 2 + (name == "gateway")]
                    converged.setdefault(name, []).append(convergence(bootstrap, group_topic, group, 6, 12))
        finally:
            gateway.terminate()
            gateway.wait(10)
    best = {name: {k: (max(v) if "MB/s" in k else min(v)) for k, v in figures.items()}
            for name, figures in results.items()}
    for name, samples in converged.items():
        best[name][f"classic group of 6: convergence (median of {len(samples)}) s"] = statistics.median(samples)
    print(f"\n{args.records:,} records of {args.record_size} B, best of {args.rounds} alternating rounds"
          f"{', TLS on every leg' if TLS else ''}\n")
    print("| figure | direct | gateway | gateway / direct |\n|---|---|---|---|")
    for key in best["direct"]:
        d, g = best["direct"][key], best["gateway"].get(key, float("nan"))
        ratio = f"{g / d:.0%}" if "MB/s" in key else f"{g - d:+.2f} s" if key.endswith(" s") else f"{g - d:+.3f} ms"
        print(f"| {key} | {d:.3f} | {g:.3f} | {ratio} |")
    print("\ntargets: throughput >= 70% of direct; p99 added latency < 2 ms; convergence no slower than the broker")


if __name__ == "__main__":
    main()

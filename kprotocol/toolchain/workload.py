"""A workload that makes a broker's group and transaction coordinators write every kind of record:
classic groups (offset commits, GroupMetadata), a KIP-848 consumer group (Kafka's console consumer),
a KIP-1071 streams group (the Streams test app), and transactions committed and aborted with their
offset commits. Used by the kafka-dump-log differential and to make fixtures/kafka/."""

from __future__ import annotations

import subprocess
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from kprotocol.toolchain.broker import KafkaBroker
from kprotocol.toolchain.maven import java_command
from kprotocol.toolchain.streams_app import StreamsApp


def coordinator_workload(broker: KafkaBroker) -> None:
    """Classic, KIP-848 and KIP-1071 groups, offset commits, transactions committed and aborted."""
    bootstrap = broker.bootstrap
    for topic in ("data", "out"):
        broker.create_topic(topic, 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4")
    for i in range(60):
        producer.send("data", key=f"k{i % 6}".encode(), value=b"v")
    producer.flush()
    producer.close()
    consumer = KafkaConsumer("data", bootstrap_servers=bootstrap, group_id="classic-g", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    consumed = sum(1 for _ in consumer)
    if consumed != 60:
        raise RuntimeError(f"the classic consumer read {consumed} of 60 records")
    consumer.commit({TopicPartition("data", 0): OffsetAndMetadata(1, "with metadata", -1)})
    consumer.commit()
    consumer.close()
    transactional = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-1")
    transactional.init_transactions()
    for outcome, offset in (("commit", 5), ("abort", 7)):
        transactional.begin_transaction()
        transactional.send("data", outcome.encode())
        transactional.send_offsets_to_transaction({TopicPartition("data", 0): OffsetAndMetadata(offset, "", -1)},
                                                  "txn-g")
        getattr(transactional, f"{outcome}_transaction")()
    transactional.close()
    console = subprocess.run(java_command(
        "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap, "--topic", "data",
        "--group", "consumer-g", "--from-beginning", "--max-messages", "20", "--timeout-ms", "30000",
        "--consumer-property", "group.protocol=consumer"), capture_output=True, text=True, timeout=180)
    if console.returncode != 0:
        raise RuntimeError(f"the console consumer failed: {console.stderr[-2000:]}")
    app = StreamsApp.start(bootstrap, "streams-g", "data", "out", group_protocol="streams")
    try:
        app.wait_for(app.running_with_tasks(1, 2), 120)
        time.sleep(1)
    finally:
        app.stop()

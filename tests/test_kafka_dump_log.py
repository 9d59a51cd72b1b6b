"""kprotocol's `__consumer_offsets` and `__transaction_state` decoding against Kafka's own
kafka-dump-log, on segments a real broker wrote for classic, consumer (KIP-848) and streams
(KIP-1071) groups, offset commits and transactions committed and aborted; the replayed group
state against what the broker itself describes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kprotocol import message_class
from kprotocol.coordinator_topics import CONSUMER_OFFSETS, TRANSACTION_STATE, decode_record
from kprotocol.coordinator_topics.state import replay
from kprotocol.records import decode_control
from kprotocol.records.segment import read_logs
from kprotocol.toolchain import KafkaBroker
from kprotocol.toolchain.dump_log import dump_log
from kprotocol.toolchain.workload import coordinator_workload

pytestmark = pytest.mark.xdist_group("kafka")
TRANSACTION_STATUS = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
                      "PrepareEpochFence"]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def broker_data() -> Iterator[Path]:
    """A broker's data directory after a workload that writes every kind of group record."""
    broker = KafkaBroker.start()
    try:
        coordinator_workload(broker)
        DESCRIBED.update(_describe(broker))  # after every member left: the log holds the same final state
    finally:
        broker.stop(keep_workdir=True)
    yield broker.data_dir
    shutil.rmtree(broker.workdir, ignore_errors=True)


DESCRIBED: dict[str, Any] = {}


def _describe(broker: KafkaBroker) -> dict[str, Any]:
    with broker.connect() as conn:
        streams = conn.send(message_class("StreamsGroupDescribeRequest")(group_ids=["streams-g"])).groups[0]
        consumer = conn.send(message_class("ConsumerGroupDescribeRequest")(group_ids=["consumer-g"])).groups[0]
        offsets = conn.send(message_class("OffsetFetchRequest")(groups=[
            message_class("OffsetFetchRequest").OffsetFetchRequestGroup(group_id=g, topics=None)
            for g in ("classic-g", "txn-g", "consumer-g")]), version=8)
    return {"streams": streams, "consumer": consumer, "offsets": {g.group_id: g for g in offsets.groups}}


def _kafka_shape(decoded: dict[str, Any], topic: str) -> tuple[dict, dict | None]:
    """kprotocol's decode_record output in kafka-dump-log's rendering: type and version as strings,
    consumer-protocol payloads of classic groups decoded in place (kprotocol keeps the base64 and adds
    `decoded*`), transaction states by name."""
    key = {"type": str(decoded["key"]["type"]), "data": decoded["key"]["data"]}
    value = decoded["value"]
    if value is None:
        return key, None
    data = dict(value["data"])
    if topic == CONSUMER_OFFSETS and decoded["key"]["type"] == 2:
        data["members"] = [_member(m) for m in data.get("members", [])]
    if topic == TRANSACTION_STATE:
        data["transactionStatus"] = TRANSACTION_STATUS[data["transactionStatus"]]
    return key, {"version": str(value["version"]), "data": data}


def _member(member: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in member.items() if not k.startswith("decoded")}
    for field in ("subscription", "assignment"):
        decoded = member.get("decoded" + field.capitalize())
        if decoded and "data" in decoded:
            out[field] = {k: v for k, v in decoded["data"].items() if not k.startswith("streamsUserData")}
    return out


def _compare(data_dir: Path, topic: str, decoder: str) -> dict[str, int]:
    """Batches and records of every segment of `topic`, Kafka's tool against kprotocol; returns the
    count of each record type seen (and 'control' for transaction markers)."""
    files = sorted(data_dir.glob(f"{topic}-*/*.log"))
    theirs = dump_log(files, decoder)
    ours = [(file, batch) for file, batch in read_logs(files)]
    assert len(ours) == len(theirs) > 0
    seen: dict[str, int] = {}
    position: dict[str, int] = {}
    for (file, batch), kafka in zip(ours, theirs):
        assert str(file) == kafka["file"]
        at = position.get(kafka["file"], 0)
        position[kafka["file"]] = at + batch.size
        assert (kafka["baseOffset"], kafka["lastOffset"], kafka["count"], kafka["position"], kafka["size"]) == \
            (batch.base_offset, batch.last_offset, len(batch.records), at, batch.size)
        assert (kafka["producerId"], kafka["producerEpoch"], kafka["isTransactional"], kafka["isControl"]) == \
            (batch.producer_id, batch.producer_epoch, batch.is_transactional, batch.is_control)
        assert (kafka["magic"], kafka["crc"], kafka["isvalid"], kafka["compresscodec"]) == \
            (batch.magic, batch.crc, True, CODECS[int(batch.compression)])
        assert kafka["CreateTime"] == batch.max_timestamp
        for record, theirs_record in zip(batch.records, kafka["records"], strict=True):
            assert theirs_record["offset"] == record.offset and theirs_record["CreateTime"] == record.timestamp
            if batch.is_control:
                marker = decode_control(record)
                assert (theirs_record["endTxnMarker"], theirs_record["coordinatorEpoch"]) == \
                    (marker["type"], marker["coordinatorEpoch"])
                seen["control"] = seen.get("control", 0) + 1
                continue
            key, value = _kafka_shape(decode_record(record.key, record.value, topic=topic), topic)
            assert key == theirs_record["key"], (file, record.offset)
            assert value == theirs_record["payload"], (file, record.offset)
            seen[key["type"]] = seen.get(key["type"], 0) + 1
    return seen


def test_consumer_offsets_match_kafka_dump_log(broker_data: Path) -> None:
    seen = _compare(broker_data, CONSUMER_OFFSETS, "--offsets-decoder")
    # Offset commits (1; a 4.x broker never writes the legacy type-0 key), classic group metadata (2),
    # consumer-group (3, 5-8) and streams-group (17, 19-23) records, and transaction markers.
    assert {"1", "2", "3", "5", "6", "7", "8", "17", "19", "20", "21", "22", "23", "control"} <= set(seen), seen


def test_transaction_state_matches_kafka_dump_log(broker_data: Path) -> None:
    seen = _compare(broker_data, TRANSACTION_STATE, "--transaction-log-decoder")
    assert seen.get("0", 0) >= 4  # Empty, Ongoing, PrepareCommit/Abort, Complete...


def test_replayed_state_agrees_with_the_broker(broker_data: Path) -> None:
    state = replay(batch for _, batch in read_logs(sorted(broker_data.glob(f"{CONSUMER_OFFSETS}-*/*.log"))))
    groups = state["groups"]
    streams, consumer = DESCRIBED["streams"], DESCRIBED["consumer"]
    assert groups["streams-g"]["type"] == "streams"
    assert groups["streams-g"]["streams"]["metadata"]["epoch"] == streams.group_epoch
    assert groups["streams-g"]["streams"]["targetAssignmentMetadata"]["assignmentEpoch"] == streams.assignment_epoch
    assert groups["consumer-g"]["consumer"]["metadata"]["epoch"] == consumer.group_epoch
    for group_id, described in DESCRIBED["offsets"].items():
        replayed = groups[group_id].get("offsets", {})
        for topic in described.topics:
            for partition in topic.partitions:
                if partition.committed_offset >= 0:
                    assert replayed[topic.name][str(partition.partition_index)]["offset"] == \
                        partition.committed_offset, (group_id, topic.name, partition.partition_index)
    assert groups["txn-g"]["offsets"]["data"]["0"]["offset"] == 5  # the aborted commit of 7 is dropped

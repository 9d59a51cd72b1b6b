"""Decode/encode throughput of kprotocol against kio and kafka-python on the same bytes.

    python bench/codec.py [--seconds 1.0] [--case NAME]

Every peer decodes to fully materialized objects. Bytes are produced once by kprotocol's
encoder and checked to decode in every peer before timing.
"""

from __future__ import annotations

import argparse
import io
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import kprotocol

M = kprotocol.message_class


def metadata_response() -> tuple[Any, int]:
    cls = M("MetadataResponse")
    t = cls._spec[4].struct  # topics
    p = t._spec[4].struct  # partitions
    b = cls._spec[1].struct
    topics = tuple(
        t(error_code=0, name=f"topic-{i:04d}", topic_id=uuid.UUID(int=i + 1), is_internal=False,
          partitions=tuple(p(error_code=0, partition_index=j, leader_id=j % 5, leader_epoch=7,
                             replica_nodes=(j % 5, (j + 1) % 5, (j + 2) % 5), isr_nodes=(j % 5, (j + 1) % 5),
                             offline_replicas=()) for j in range(50)),
          topic_authorized_operations=-2147483648)
        for i in range(200)
    )
    brokers = tuple(b(node_id=i, host=f"broker-{i}.kafka.svc", port=9092, rack=f"rack-{i % 3}") for i in range(5))
    return cls(throttle_time_ms=0, brokers=brokers, cluster_id="cluster", controller_id=1, topics=topics), 13


def join_group_response() -> tuple[Any, int]:
    cls = M("JoinGroupResponse")
    member = cls._spec[8].struct
    members = tuple(member(member_id=f"consumer-{i}-{uuid.UUID(int=i)}", group_instance_id=None,
                           metadata=bytes((i + k) % 256 for k in range(300))) for i in range(500))
    return cls(generation_id=5, protocol_type="consumer", protocol_name="stream", leader=members[0].member_id,
               member_id=members[0].member_id, members=members), 9


def fetch_response() -> tuple[Any, int]:
    cls = M("FetchResponse")
    hi = cls.valid_versions[1]
    topic = cls._spec[3].struct
    part = topic._spec[2].struct
    payload = bytes(range(256)) * 40
    topics = tuple(topic(topic_id=uuid.UUID(int=i + 1), partitions=tuple(
        part(partition_index=j, high_watermark=1000, last_stable_offset=1000, log_start_offset=0,
             records=payload) for j in range(10))) for i in range(10))
    return cls(session_id=1, responses=topics), hi


def offset_commit_request() -> tuple[Any, int]:
    cls = M("OffsetCommitRequest")
    version = 9
    topic = cls._spec[5].struct
    part = topic._spec[2].struct
    topics = tuple(topic(name=f"topic-{i}", partitions=tuple(
        part(partition_index=j, committed_offset=123456789 + j, committed_leader_epoch=3,
             committed_metadata="") for j in range(100))) for i in range(10))
    return cls(group_id="app", generation_id_or_member_epoch=4, member_id="member-1", topics=topics), version


def streams_heartbeat() -> tuple[Any, int]:
    cls = M("StreamsGroupHeartbeatRequest")
    f = {fld.name: fld for fld in cls._spec}
    topology_cls = f["topology"].struct
    tf = {fld.name: fld for fld in topology_cls._spec}
    sub_cls = tf["subtopologies"].struct
    sf = {fld.name: fld for fld in sub_cls._spec}
    topic_info = sf["state_changelog_topics"].struct
    subs = tuple(sub_cls(subtopology_id=str(i), source_topics=(f"in-{i}",), repartition_sink_topics=(),
                         state_changelog_topics=(topic_info(name=f"app-store-{i}-changelog"),),
                         repartition_source_topics=(), copartition_groups=()) for i in range(100))
    tasks_cls = f["active_tasks"].struct
    active = tuple(tasks_cls(subtopology_id=str(i), partitions=tuple(range(10))) for i in range(100))
    return cls(group_id="app", member_id="m-1", member_epoch=3, endpoint_information_epoch=1,
               rebalance_timeout_ms=30000, process_id="p-1", topology=topology_cls(epoch=1, subtopologies=subs),
               active_tasks=active, standby_tasks=(), warmup_tasks=()), 0


@dataclass
class Case:
    name: str
    build: Callable[[], tuple[Any, int]]
    kio_module: str | None
    kafka_python: str | None


CASES = [
    Case("MetadataResponse v13, 200 topics x 50 partitions", metadata_response, "metadata.v13.response",
         "kafka.protocol.metadata:MetadataResponse"),
    Case("JoinGroupResponse v9, 500 members x 300 B", join_group_response, "join_group.v9.response",
         "kafka.protocol.consumer:JoinGroupResponse"),
    Case("FetchResponse v18 (newest), 100 partitions x 10 KB", fetch_response, "fetch.v18.response",
         "kafka.protocol.consumer:FetchResponse"),
    Case("OffsetCommitRequest v9, 1000 partitions", offset_commit_request, "offset_commit.v9.request",
         "kafka.protocol.consumer:OffsetCommitRequest"),
    Case("StreamsGroupHeartbeatRequest v0, 100 subtopologies, 1000 tasks", streams_heartbeat,
         "streams_group_heartbeat.v0.request", None),
]


def rate(fn: Callable[[], Any], seconds: float) -> float:
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def kio_pair(module: str, version: int, raw: bytes) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import importlib

    from kio.serial import entity_reader, entity_writer

    mod = importlib.import_module(f"kio.schema.{module}")
    cls = next(getattr(mod, n) for n in dir(mod) if n.endswith(("Request", "Response")) and
               getattr(getattr(mod, n), "__module__", "") == mod.__name__)
    reader, writer = entity_reader(cls), entity_writer(cls)
    obj, _ = reader(raw, 0)

    def encode() -> bytes:
        buf = io.BytesIO()
        writer(buf, obj)
        return buf.getvalue()

    assert len(encode()) == len(raw), "kio re-encodes to a different size"
    return (lambda: reader(raw, 0)), encode


def kafka_python_pair(path: str, version: int, raw: bytes) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import importlib

    module, name = path.split(":")
    cls = getattr(importlib.import_module(module), name)
    obj = cls.decode(raw, version=version)
    obj._header = None  # decoded responses lack the slot that encode() reads
    assert len(obj.encode(version=version)) == len(raw), "kafka-python re-encodes to a different size"
    return (lambda: cls.decode(raw, version=version)), (lambda: obj.encode(version=version))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--case", default="")
    args = parser.parse_args()
    print(f"{'case':<62} {'op':<7} {'kprotocol/s':>12} {'MB/s':>7} {'kio/s':>9} {'ratio':>6} {'kafka-py/s':>11} {'ratio':>6}")
    for case in CASES:
        if args.case and args.case.lower() not in case.name.lower():
            continue
        msg, version = case.build()
        cls = type(msg)
        raw = msg.encode(version)
        assert cls.decode(raw, version) == msg
        ours = {"decode": lambda: cls.decode(raw, version), "encode": lambda: msg.encode(version)}
        peers: dict[str, dict[str, Callable[[], Any]]] = {}
        if case.kio_module:
            d, e = kio_pair(case.kio_module, version, raw)
            peers["kio"] = {"decode": d, "encode": e}
        if case.kafka_python:
            d, e = kafka_python_pair(case.kafka_python, version, raw)
            peers["kafka-python"] = {"decode": d, "encode": e}
        for op in ("decode", "encode"):
            mine = rate(ours[op], args.seconds)
            cells = []
            for peer in ("kio", "kafka-python"):
                if peer in peers:
                    theirs = rate(peers[peer][op], args.seconds)
                    cells += [f"{theirs:>9.1f}" if peer == "kio" else f"{theirs:>11.1f}", f"{mine / theirs:>5.2f}x"]
                else:
                    cells += [f"{'-':>9}" if peer == "kio" else f"{'-':>11}", f"{'-':>6}"]
            mb = mine * len(raw) / 1e6
            print(f"{case.name:<62} {op:<7} {mine:>12.1f} {mb:>7.1f} {' '.join(cells)}", flush=True)


if __name__ == "__main__":
    main()

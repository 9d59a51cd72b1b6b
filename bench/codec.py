"""Decode/encode throughput of kprotocol against kio and kafka-python on the same bytes.

    python bench/codec.py [--seconds 1.0] [--rounds 7] [--case NAME]

Every peer decodes to fully materialized objects. Bytes are produced once by kprotocol's
encoder and checked to decode in every peer before timing. Rates are per second of the process's
CPU time. On a shared machine the load moves under a run: each round times every peer for a slice
of `--seconds`, one after the other, and the table shows the median rate and the median of the
rounds' ratios.
"""

from __future__ import annotations

import argparse
import io
import statistics
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


def _struct(cls: Any, field: str) -> Any:
    """The struct class of `cls`'s field `field`."""
    return next(f.struct for f in cls._spec if f.name == field)


def fetch_response_batches() -> tuple[Any, int]:
    from kprotocol.records.model import Header, Record
    from kprotocol.records.writer import write_batch

    cls = M("FetchResponse")
    hi = cls.valid_versions[1]
    topic = _struct(cls, "responses")
    part = _struct(topic, "partitions")
    records = [Record(i, 1_700_000_000_000 + i, f"key-{i:05d}".encode(), bytes(range(i % 7, i % 7 + 60)),
                      (Header("trace", b"abc"),)) for i in range(50)]
    batch = write_batch(records, base_offset=1000)
    topics = tuple(topic(topic_id=uuid.UUID(int=i + 1), partitions=tuple(
        part(partition_index=j, high_watermark=5000, last_stable_offset=5000, log_start_offset=0,
             records=batch * 2) for j in range(5))) for i in range(20))
    return cls(session_id=1, responses=topics), hi


def api_versions_response() -> tuple[Any, int]:
    cls = M("ApiVersionsResponse")
    keys, supported, finalized = (_struct(cls, n) for n in ("api_keys", "supported_features", "finalized_features"))
    return cls(error_code=0, throttle_time_ms=0,
               api_keys=tuple(keys(api_key=k, min_version=0, max_version=k % 17 + 1) for k in range(90)),
               supported_features=(supported(name="metadata.version", min_version=1, max_version=27),
                                   supported(name="kraft.version", min_version=0, max_version=1),
                                   supported(name="group.version", min_version=0, max_version=1),
                                   supported(name="streams.version", min_version=0, max_version=1)),
               finalized_features_epoch=4711,
               finalized_features=(finalized(name="metadata.version", max_version_level=27, min_version_level=27),
                                   finalized(name="group.version", max_version_level=1, min_version_level=1)),
               zk_migration_ready=False), 4


def _tasks(cls: Any, count: int, partitions: int) -> tuple[Any, ...]:
    return tuple(cls(subtopology_id=f"{i}", partitions=tuple(range(i % 3, i % 3 + partitions))) for i in range(count))


def streams_heartbeat_response() -> tuple[Any, int]:
    cls = M("StreamsGroupHeartbeatResponse")
    tasks = _struct(cls, "active_tasks")
    by_endpoint = _struct(cls, "partitions_by_user_endpoint")
    endpoint, topic_partitions = _struct(by_endpoint, "user_endpoint"), _struct(by_endpoint, "active_partitions")
    endpoints = tuple(by_endpoint(
        user_endpoint=endpoint(host=f"app-{i}.streams.svc", port=8080),
        active_partitions=tuple(topic_partitions(topic=f"input-{t}", partitions=(i % 4, i % 4 + 4)) for t in range(20)),
        standby_partitions=tuple(topic_partitions(topic=f"input-{t}", partitions=((i + 1) % 4,)) for t in range(20)))
        for i in range(50))
    return cls(member_id="m-1", member_epoch=12, heartbeat_interval_ms=5000, acceptable_recovery_lag_legacy=10000,
               task_offset_interval_ms=60000, active_tasks=_tasks(tasks, 100, 10), standby_tasks=_tasks(tasks, 100, 4),
               warmup_tasks=(), endpoint_information_epoch=3, partitions_by_user_endpoint=endpoints), 0


def streams_describe_response() -> tuple[Any, int]:
    cls = M("StreamsGroupDescribeResponse")
    group = _struct(cls, "groups")
    topology, member = _struct(group, "topology"), _struct(group, "members")
    subtopology = _struct(topology, "subtopologies")
    topic_info = _struct(subtopology, "state_changelog_topics")
    endpoint, offsets, assignment = (_struct(member, n) for n in ("user_endpoint", "task_offsets", "assignment"))
    tasks = _struct(assignment, "active_tasks")
    subs = tuple(subtopology(subtopology_id=f"{i}", source_topics=(f"input-{i}",), repartition_sink_topics=(),
                             state_changelog_topics=(topic_info(name=f"app-store-{i}-changelog", partitions=8,
                                                                replication_factor=3),),
                             repartition_source_topics=()) for i in range(50))
    members = tuple(member(
        member_id=f"member-{m}-{uuid.UUID(int=m)}", member_epoch=12, instance_id=None, rack_id=f"rack-{m % 3}",
        client_id=f"app-{m}-StreamThread-1-consumer", client_host=f"/10.0.{m // 200}.{m % 200}", topology_epoch=1,
        process_id=str(uuid.UUID(int=m + 1000)), user_endpoint=endpoint(host=f"app-{m}.svc", port=8080),
        client_tags=(), task_offsets=tuple(offsets(subtopology_id=f"{t}", partition=m % 8, offset=100_000 + t)
                                           for t in range(20)),
        task_end_offsets=tuple(offsets(subtopology_id=f"{t}", partition=m % 8, offset=100_500 + t) for t in range(20)),
        assignment=assignment(active_tasks=_tasks(tasks, 10, 4), standby_tasks=_tasks(tasks, 5, 2), warmup_tasks=()),
        target_assignment=assignment(active_tasks=_tasks(tasks, 10, 4), standby_tasks=_tasks(tasks, 5, 2),
                                     warmup_tasks=()),
        is_classic=False) for m in range(100))
    return cls(groups=(group(error_code=0, error_message=None, group_id="app", group_state="Stable", group_epoch=12,
                             assignment_epoch=12, topology=topology(epoch=1, subtopologies=subs), members=members,
                             authorized_operations=-2147483648),)), 0


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
    Case("FetchResponse v18, 100 partitions x 2 batches of 50 records", fetch_response_batches,
         "fetch.v18.response", "kafka.protocol.consumer:FetchResponse"),
    Case("ApiVersionsResponse v4, 90 APIs, features (tagged)", api_versions_response, "api_versions.v4.response",
         "kafka.protocol.metadata:ApiVersionsResponse"),
    Case("StreamsGroupHeartbeatResponse v0, 200 tasks, 50 endpoints", streams_heartbeat_response,
         "streams_group_heartbeat.v0.response", None),
    Case("StreamsGroupDescribeResponse v0, 50 subtopologies, 100 members", streams_describe_response,
         "streams_group_describe.v0.response", None),
]


def rate(fn: Callable[[], Any], seconds: float) -> float:
    """Calls per second of CPU time this process spent (time waiting for a core does not count)."""
    n, start = 0, time.process_time()
    while True:
        fn()
        n += 1
        elapsed = time.process_time() - start
        if elapsed >= seconds:
            return n / elapsed


def rounds(fns: dict[str, Callable[[], Any]], seconds: float, count: int) -> dict[str, list[float]]:
    """Rates of each function in `count` rounds, each round timing them one after the other."""
    for fn in fns.values():
        fn()
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(count):
        for name, fn in fns.items():
            out[name].append(rate(fn, seconds / count))
    return out


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
    parser.add_argument("--seconds", type=float, default=1.0, help="time per peer and operation, over all rounds")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--case", default="")
    args = parser.parse_args()
    print(f"{'case':<66} {'op':<7} {'kprotocol/s':>12} {'MB/s':>7} {'kio/s':>9} {'ratio':>6} {'kafka-py/s':>11} "
          f"{'ratio':>6}")
    for case in CASES:
        if args.case and args.case.lower() not in case.name.lower():
            continue
        msg, version = case.build()
        cls = type(msg)
        raw = msg.encode(version)
        assert cls.decode(raw, version) == msg
        fns: dict[str, dict[str, Callable[[], Any]]] = {
            "kprotocol": {"decode": lambda: cls.decode(raw, version), "encode": lambda: msg.encode(version)}}
        if case.kio_module:
            d, e = kio_pair(case.kio_module, version, raw)
            fns["kio"] = {"decode": d, "encode": e}
        if case.kafka_python:
            d, e = kafka_python_pair(case.kafka_python, version, raw)
            fns["kafka-python"] = {"decode": d, "encode": e}
        for op in ("decode", "encode"):
            rates = rounds({peer: ops[op] for peer, ops in fns.items()}, args.seconds, args.rounds)
            mine = statistics.median(rates["kprotocol"])
            cells = []
            for peer, width in (("kio", 9), ("kafka-python", 11)):
                if peer in rates:
                    ratio = statistics.median(a / b for a, b in zip(rates["kprotocol"], rates[peer]))
                    cells += [f"{statistics.median(rates[peer]):>{width}.1f}", f"{ratio:>5.2f}x"]
                else:
                    cells += [f"{'-':>{width}}", f"{'-':>6}"]
            print(f"{case.name:<66} {op:<7} {mine:>12.1f} {mine * len(raw) / 1e6:>7.1f} {' '.join(cells)}", flush=True)


if __name__ == "__main__":
    main()

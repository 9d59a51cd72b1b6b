"""The online migration of a real Kafka Streams application, step by step, with kills in between.

A `Shape` names the application (one of Apache Kafka's published examples, run as they ship) and how
it is configured; `run_migration` puts the gateway in front of its own broker, feeds a continuous
deterministic input, starts three classic instances, rolls them one by one to the streams protocol
with kill -9 of a classic instance, of a streams instance and of the gateway at different steps,
then cuts over to the broker. After every step the group must settle within the bound (the
runbook's `streams-groups describe --wait-stable` check, then every input partition's committed
offset must move); at the end every word's count equals its occurrences in the input (at least them
with at-least-once), and every instance stopped cleanly when asked.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from kprotocol import message_class
from kprotocol.connection import Connection
from kprotocol.streams_group.stability import describe_settled
from kprotocol.toolchain import KafkaBroker
from kprotocol.toolchain.example_app import EXAMPLES, ExampleApp
from kprotocol.toolchain.streams_app import StreamsApp
from migration import GatewayProcess, overlaps

INSTANCES = 3
SESSION_TIMEOUT_S = 10  # the apps' classic session time-out and the gateway's streams.session.timeout.ms
SETTLE_BOUND_S = SESSION_TIMEOUT_S + 35  # a session time-out (a killed member's tasks) plus rejoins and restoring
WORDS = 60


COUNT_APP_SHAPES = {"count", "stateless", "join"}  # the project's Streams app (CountApp) topologies
KEYS = 40
TAIL = b"tail"  # records sent after the counted ones (never counted)


@dataclass(frozen=True)
class Shape:
    app: str = "wordcount"  # one of Apache Kafka's examples (EXAMPLES), or a CountApp topology
    standbys: int = 1
    guarantee: str = "exactly_once_v2"
    threads: int = 1
    classic_version: str | None = None  # an older Kafka Streams release for the classic instances
    partitions: int = 4  # of the input and output topics (the tasks per subtopology)

    @property
    def name(self) -> str:
        version = f"-classic{self.classic_version}" if self.classic_version else ""
        partitions = f"-p{self.partitions}" if self.partitions != 4 else ""
        return f"{self.app}-sb{self.standbys}-{self.guarantee}-t{self.threads}{version}{partitions}"

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly_once_v2"


@dataclass
class StepResult:
    name: str
    settle_s: float
    longest_stall_ms: int


@dataclass
class RunResult:
    shape: Shape
    steps: list[StepResult] = field(default_factory=list)
    records: int = 0
    exact: bool = False
    shutdown_s: list[float] = field(default_factory=list)


class Workload:
    """What an application reads and writes, and what its output must be for the input sent."""

    def __init__(self, shape: Shape, app_id: str) -> None:
        self.shape = shape
        if shape.app in EXAMPLES:
            example = EXAMPLES[shape.app]
            (self.source,), self.sink = example.input_topics, example.output_topic
            self.table = None
        else:
            self.source, self.sink = f"{app_id}-in", f"{app_id}-out"
            self.table = f"{app_id}-table" if shape.app == "join" else None

    def record(self, i: int) -> tuple[bytes | None, bytes]:
        if self.shape.app == "wordcount-processor":
            # it counts per task without a repartition step (its demo reads one partition): one word per
            # line, keyed by the word, so that each word is counted by one task
            word = f"w{(i * 7) % WORDS}".encode()
            return word, word
        if self.shape.app in EXAMPLES:  # a line of three words
            return None, " ".join(f"w{(i * 7 + j * 13) % WORDS}" for j in range(3)).encode()
        return f"k{i % KEYS}".encode(), f"r{i}".encode()

    def wrong(self, sent: list[tuple[bytes | None, bytes]], latest: dict[str, bytes],
              values: list[bytes]) -> dict[str, tuple]:
        """What the output gets wrong: (output, input) per word, key or record; nothing when right. With
        exactly-once every count is exact and every record once; with at-least-once nothing is missing."""
        exact = self.shape.exactly_once
        if self.shape.app in EXAMPLES or self.shape.app == "count":
            if self.shape.app in EXAMPLES:
                expected = collections.Counter(w.decode() for _, v in sent for w in v.split())
                count = EXAMPLES[self.shape.app].count
            else:
                expected = collections.Counter(k.decode() for k, _ in sent)
                count = int
            got = {k: count(v) for k, v in latest.items()}
            return {k: (got.get(k), n) for k, n in expected.items()
                    if (got.get(k) != n if exact else got.get(k, 0) < n)}
        expected = collections.Counter(v.upper() if self.shape.app == "stateless" else v for _, v in sent)
        got = collections.Counter(v if self.shape.app == "stateless" else v.split(b"|")[0] for v in values)
        return {k.decode(): (got.get(k, 0), n) for k, n in expected.items()
                if (got.get(k, 0) != n if exact else got.get(k, 0) < n)}


class Feed:
    """The workload's records produced continuously and acknowledged one by one, kept as sent."""

    def __init__(self, bootstrap: str, workload: Workload) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self.workload, self.sent = workload, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            key, value = self.workload.record(i)
            self.producer.send(self.workload.source, key=key, value=value).get(30)
            self.sent.append((key, value))
            i += 1
            time.sleep(0.01)

    def start(self) -> Feed:
        self._thread.start()
        return self

    def stop(self) -> list[tuple[bytes | None, bytes]]:
        """Stop the counted records, then send uncounted ones to every partition for a few seconds: an
        application punctuating on stream time (WordCountProcessorDemo) emits the last counts only
        when its stream time moves on."""
        self._stop.set()
        self._thread.join(60)
        for _ in range(30):
            for partition in range(self.workload.shape.partitions):
                self.producer.send(self.workload.source, key=TAIL, value=TAIL, partition=partition)
            time.sleep(0.1)
        self.producer.flush()
        self.producer.close()
        return self.sent


class Output:
    """The output topic read as it grows (committed records only): the latest value per key, every value,
    and the times records arrived per partition (a gap is a task not processing: the input never stops)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                      isolation_level="read_committed", consumer_timeout_ms=500)
        self.latest: dict[str, bytes] = {}
        self.values: list[bytes] = []
        self.arrivals: dict[int, list[float]] = collections.defaultdict(list)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self.consumer:
                with self._lock:
                    self.latest[message.key.decode()] = message.value
                    self.values.append(message.value)
                    self.arrivals[message.partition].append(time.time())
                if self._stop.is_set():
                    break

    def start(self) -> Output:
        self._thread.start()
        return self

    def longest_stall_ms(self, start: float, end: float) -> int:
        with self._lock:
            gaps = [b - a for times in self.arrivals.values() for a, b in zip(times, times[1:])
                    if b >= start and a <= end]
        return int(1000 * max(gaps, default=end - start))

    def wait_until(self, done: Callable[[dict[str, bytes], list[bytes]], bool],
                   timeout_s: float) -> tuple[dict[str, bytes], list[bytes]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if done(self.latest, self.values):
                    break
            time.sleep(0.5)
        time.sleep(2)  # anything past the expected output (a duplicate) arrives too
        with self._lock:
            return dict(self.latest), list(self.values)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def read_committed(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60) -> list[ConsumerRecord]:
    """Every committed record of `topic`, read up to its partitions' end offsets (under read_committed the last
    stable offsets: an open transaction holds them back); fails when they are not reached within `timeout_s`."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(assigned)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in assigned):
            assert time.monotonic() < deadline, \
                f"{topic}: end offsets {end} not reached in {timeout_s} s: {[consumer.position(t) for t in assigned]}"
            for batch in consumer.poll(500).values():
                records += batch
        return records
    finally:
        consumer.close()


# Kafka Streams' StreamTask logs (INFO) when an active task starts or stops running in a stream thread.
TASK_LOG_LINE = re.compile(r"^\[([\d-]+T[\d:,]+)\] INFO stream-thread \[(\S+)\] task \[(\d+_\d+)\] "
                           r"(Initialized|Resumed|Suspended|Closed)\b.*\(StreamTask\)$")


def task_histories(log_path: Path) -> list[list[dict]]:
    """The active tasks of each stream thread of a published example's run, from its log, as `overlaps` reads
    the project's app events: a task is active from its StreamTask's `Initialized` (or `Resumed`) until its
    `Suspended` or `Closed`, or until the log's last line (a kill -9)."""
    threads: dict[str, tuple[set[str], list[dict]]] = {}
    last = 0
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        stamp = re.match(r"^\[([\d-]+T[\d:,]+)\]", line)
        if stamp:
            last = int(datetime.strptime(stamp.group(1), "%Y-%m-%dT%H:%M:%S,%f").timestamp() * 1000)
        found = TASK_LOG_LINE.match(line)
        if not found:
            continue
        active, events = threads.setdefault(found.group(2), (set(), []))
        (active.add if found.group(4) in ("Initialized", "Resumed") else active.discard)(found.group(3))
        events.append({"event": "tasks", "timeMs": last, "state": "RUNNING", "active": sorted(active)})
    return [events + [{"event": "end", "timeMs": last}] for _, events in threads.values()]


class CountAppInstance:
    """The project's Streams app (one instance) with the stop and kill of an ExampleApp."""

    def __init__(self, app: StreamsApp) -> None:
        self.app = app
        self.log_path = app.stderr_path

    def alive(self) -> bool:
        return self.app.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.kill(self.app.pid, signal.SIGKILL)
            self.app.process.wait()

    def stop(self, timeout: float = 60.0) -> float | None:
        begin = time.monotonic()
        self.app.stop(timeout)
        took = time.monotonic() - begin
        return None if took >= timeout else took


def committed(broker: KafkaBroker, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of `topic`, as the brokers hold them (the gateway writes them there)."""
    fetch = message_class("OffsetFetchRequest")
    with Connection("127.0.0.1", broker.port) as conn:
        answer = conn.send(fetch(groups=[fetch.OffsetFetchRequestGroup(group_id=group, topics=None)]), version=9)
    return {p.partition_index: p.committed_offset for t in answer.groups[0].topics if t.name == topic
            for p in t.partitions}


def set_standbys(broker: KafkaBroker, group: str, standbys: int) -> None:
    """The group's `streams.num.standby.replicas` on the broker (a group config, KIP-1071)."""
    alter = message_class("IncrementalAlterConfigsRequest")
    resource = alter.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
        alter.AlterableConfig(name="streams.num.standby.replicas", config_operation=0, value=str(standbys))])
    with Connection("127.0.0.1", broker.port) as conn:
        answer = conn.send(alter(resources=[resource]))
    assert answer.responses[0].error_code == 0, answer


def settle(where: str, group: str, broker: KafkaBroker, topic: str, partitions: int, step: str) -> float:
    """Wait for the group to settle (describe, as the runbook's --wait-stable) and for every input
    partition's committed offset to move; the seconds it took. Fails with the reasons otherwise."""
    begin = time.monotonic()
    host, port = where.rsplit(":", 1)
    with Connection(host, int(port)) as conn:
        settled, reasons, _ = describe_settled(conn, group, SETTLE_BOUND_S)
    assert settled, f"{step}: the group did not settle within {SETTLE_BOUND_S} s: {reasons}"
    before = committed(broker, group, topic)
    while True:
        now = committed(broker, group, topic)
        stuck = [p for p in range(partitions) if now.get(p, -1) <= before.get(p, -1)]
        if not stuck:
            return time.monotonic() - begin
        assert time.monotonic() - begin < SETTLE_BOUND_S, \
            f"{step}: committed offsets of {topic} partitions {stuck} do not move: {now}"
        time.sleep(0.5)


def run_migration(shape: Shape, workdir: Path, log: Callable[[str], None] = print) -> RunResult:
    app_id = f"migrate-{shape.app}-{uuid.uuid4().hex[:6]}"
    workload = Workload(shape, app_id)
    source, sink = workload.source, workload.sink
    result = RunResult(shape)
    broker = KafkaBroker.start(workdir / "broker", config={"group.streams.session.timeout.ms": "10000",
                                                          "group.streams.heartbeat.interval.ms": "1000"})
    gateway = feed = output = None
    apps: list[ExampleApp | CountAppInstance | None] = [None] * INSTANCES
    every_count_app: list[CountAppInstance] = []  # their own task events: no task active on two at once
    every_example_app: list[ExampleApp] = []  # their logs tell their tasks
    try:
        broker.create_topic(source, shape.partitions)
        broker.create_topic(sink, shape.partitions)
        if workload.table is not None:  # the join's table, co-partitioned with the input, filled first
            broker.create_topic(workload.table, shape.partitions)
            with KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all") as producer:
                for k in range(KEYS):
                    producer.send(workload.table, key=f"k{k}".encode(), value=f"profile-{k}".encode())
                producer.flush()
        gateway = GatewayProcess(broker.bootstrap, [app_id], workdir / "state", workdir / "gateway.log",
                                 {"streams.num.standby.replicas": str(shape.standbys)}).start()
        feed = Feed(broker.bootstrap, workload).start()
        output = Output(broker.bootstrap, sink).start()

        def start(i: int, protocol: str, bootstrap: str) -> None:
            version = shape.classic_version if protocol == "classic" else None
            if shape.app in EXAMPLES:
                apps[i] = ExampleApp.start(shape.app, bootstrap, app_id, workdir / f"instance-{i}",
                                           group_protocol=protocol, num_standby_replicas=shape.standbys,
                                           processing_guarantee=shape.guarantee, threads=shape.threads,
                                           streams_version=version)
                every_example_app.append(apps[i])
                return
            extra = {"topology": shape.app, "num.stream.threads": str(shape.threads),
                     **({"table": workload.table} if workload.table else {})}
            apps[i] = CountAppInstance(StreamsApp.start(
                bootstrap, app_id, source, sink, group_protocol=protocol, num_standby_replicas=shape.standbys,
                processing_guarantee=shape.guarantee, state_dir=workdir / f"instance-{i}", streams_version=version,
                extra=extra))
            every_count_app.append(apps[i])

        def stop(i: int) -> None:
            took = apps[i].stop()
            assert took is not None, f"instance {i} ({apps[i].log_path}) hung on shutdown"
            result.shutdown_s.append(took)
            if took > SESSION_TIMEOUT_S:
                log(f"{shape.name}: instance {i} took {took:.1f} s to stop (log: {apps[i].log_path})")

        def step(name: str, action: Callable[[], None], where: str | None = None) -> None:
            begin = time.time()
            action()
            took = settle(where or gateway.bootstrap, app_id, broker, source, shape.partitions, name)
            stall = output.longest_stall_ms(begin, time.time())
            result.steps.append(StepResult(name, took, stall))
            log(f"{shape.name}: {name}: settled in {took:.1f} s, longest output stall {stall} ms")

        def roll(i: int) -> None:
            stop(i)
            start(i, "streams", gateway.bootstrap)

        def kill_restart(i: int, protocol: str) -> None:
            apps[i].kill()
            start(i, protocol, gateway.bootstrap)

        step("3 classic instances through the gateway",
             lambda: [start(i, "classic", gateway.bootstrap) for i in range(INSTANCES)])
        step("instance 0 rolled to the streams protocol", lambda: roll(0))
        step("kill -9 of classic instance 2, restarted", lambda: kill_restart(2, "classic"))
        step("instance 1 rolled to the streams protocol", lambda: roll(1))
        step("kill -9 of streams instance 0, restarted", lambda: kill_restart(0, "streams"))
        step("kill -9 of the gateway, restarted", lambda: (gateway.kill(), gateway.start()))
        step("instance 2 rolled to the streams protocol", lambda: roll(2))

        def cut_over() -> None:
            for i in range(INSTANCES):
                stop(i)
            gateway.stop()
            set_standbys(broker, app_id, shape.standbys)
            for i in range(INSTANCES):
                start(i, "streams", broker.bootstrap)
        step("cut over to the broker", cut_over, where=broker.bootstrap)
        time.sleep(2)
        sent = feed.stop()
        result.records = len(sent)
        at_least = Workload(dataclasses.replace(shape, guarantee="at_least_once"), app_id)
        latest, values = output.wait_until(lambda latest, values: not at_least.wrong(sent, latest, values), 90)
        wrong = workload.wrong(sent, latest, values)
        assert not wrong, f"{shape.name}: output differs (output, input) for {len(wrong)} keys: " \
                          f"{dict(list(wrong.items())[:20])}"
        result.exact = not Workload(dataclasses.replace(shape, guarantee="exactly_once_v2"), app_id).wrong(
            sent, latest, values)
        for i in range(INSTANCES):
            stop(i)
        final = read_committed(broker.bootstrap, sink, shape.partitions)  # all of it: a later duplicate too
        wrong = workload.wrong(sent, {r.key.decode(): r.value for r in final}, [r.value for r in final])
        assert not wrong, f"{shape.name}: output read to its end differs (output, input) for {len(wrong)} keys: " \
                          f"{dict(list(wrong.items())[:20])}"
        histories = [x.app.events for x in every_count_app] + \
            [h for x in every_example_app for h in task_histories(x.log_path)]
        seen = {t for h in histories for e in h if e.get("event") == "tasks" for t in e["active"]}
        tasks = {f"{s}_{p}" for s in range(EXAMPLES[shape.app].subtopologies if shape.app in EXAMPLES else 1)
                 for p in range(shape.partitions)}
        assert tasks <= seen, f"{shape.name}: tasks never seen active (the check would prove nothing): {tasks - seen}"
        doubled = overlaps(histories)
        assert not doubled, f"{shape.name}: tasks active on two instances at once: {doubled}"
        return result
    finally:
        if feed is not None and feed._thread.is_alive():
            feed.stop()
        if output is not None:
            output.stop()
        for app in apps:
            if app is not None:
                app.kill()
        if gateway is not None:
            gateway.stop()
        broker.stop()

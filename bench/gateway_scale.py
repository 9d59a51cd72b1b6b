"""Kafka Streams groups at scale: the gateway beside the broker, simulated members over TCP (issue 35).

    python bench/gateway_scale.py [--sizes 100,1000] [--kinds streams,classic,mixed] [--groups 100x50]
                                  [--timeout 180] [--steady-s 30] [--sides broker,gateway] [--json OUT] [--quick]

Every member is a coroutine with its own TCP connection, speaking raw size-prefixed frames through
kprotocol's codec (one event loop, uvloop when installed). The same driver runs each scenario against
a real Kafka 4.4 broker, then against `kprotocol gateway` in front of it (a fresh gateway process per
scenario, its --state directory new), and prints both sides and their ratio:

- streams: streams-protocol members (StreamsGroupHeartbeat with a topology; each applies the tasks it is
  answered and acknowledges them at once, then heartbeats at the answered interval);
- classic: Kafka Streams members of the classic protocol (JoinGroup/SyncGroup/Heartbeat, protocol "stream",
  a real SubscriptionInfo in the subscription's userdata); whoever is named leader computes a round robin and
  sends every member an AssignmentInfo (Streams' own encoding, every host's partitions included): the broker
  and the gateway both leave a classic group's assignment to its leader; once a group is a streams group the
  gateway names no leader and its own assignor answers every SyncGroup;
- mixed (gateway only): a classic group migrated instance by instance (one instance's classic members leave,
  as many streams-protocol members of the same process join; each step timed), then measured mid-migration.
  The broker cannot host it: its reference is the broker's streams figure at the same size.

Members are grouped in instances of --threads members sharing a process id and an endpoint (stream threads;
--no-endpoints: no application.server). Every member connects first, then all join at once.
Per side: join storm to stable (first join to every member holding exactly its tasks at one final epoch,
checked for one more heartbeat interval and by the group's describe), steady heartbeat round trip
p50/p99 (the StreamsGroupHeartbeats, or the classic Heartbeats, answered in the window; those still unanswered
at its end count with the time they waited), the server process's CPU per heartbeat (/proc/PID/stat of the
broker's JVM or the gateway), RSS per member (/proc/PID/status VmRSS delta), state bytes (the gateway's --state
directory or --state-topic, the broker's __consumer_offsets logs) written by the join and per minute of steady
state, and the driver's own CPU (flagged when it nears a core: then the figures measure the driver). A scenario not stable within
--timeout is reported "not stable in T s" and measured as it is. The broker started here takes 100 MB
batches: a 1000-member classic Streams group's GroupMetadata record is about 10 MB, over Kafka's default limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kprotocol import decode_response, encode_request, message_class  # noqa: E402
from kprotocol.streams import AssignmentInfo, HostInfo, SubscriptionInfo, TaskId, TopicPartition  # noqa: E402
from kprotocol.streams.model import LATEST_OFFSET  # noqa: E402
from kprotocol.toolchain import KafkaBroker  # noqa: E402
from kprotocol.toolchain.processes import die_with_parent, stop_process  # noqa: E402

HEADER = message_class("RequestHeader")
HB = message_class("StreamsGroupHeartbeatRequest")
JOIN, SYNC = message_class("JoinGroupRequest"), message_class("SyncGroupRequest")
HEARTBEAT, LEAVE = message_class("HeartbeatRequest"), message_class("LeaveGroupRequest")
SUBSCRIPTION, ASSIGNMENT = message_class("ConsumerProtocolSubscription"), message_class("ConsumerProtocolAssignment")
CONSUMER_PROTOCOL_VERSION = 3
USERDATA_VERSION = 11
SUBTOPOLOGY = "0"

NONE, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = 0, 25, 22, 27
MEMBER_ID_REQUIRED, FENCED_MEMBER_EPOCH = 79, 110
CONNECTING = 100  # connections opened at once (a listen backlog is not what the bench measures)
RETRIABLE = {14, 15, 16}  # coordinator loading, not available, not the coordinator
SESSION_TIMEOUT_MS = 45_000  # Kafka's default, classic consumers and streams groups alike
REBALANCE_TIMEOUT_MS = 300_000  # Streams' max.poll.interval.ms
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

TARGETS = {
    "cpu": "steady heartbeat CPU per request <= 2x the broker's (mixed: the broker's streams figure)",
    "p99": "steady heartbeat p99 < 10 ms",
    "join": "join storm stable within 2x the broker's time",
    "steps": "every migration step stable within a session time-out (45 s)",
    "groups": "100 groups x 50 members under half a core (at the default intervals)",
    "rss": "memory per member < 20 KB",
}


# --- the server processes --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (every thread) from /proc/PID/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def tree_bytes(paths: Iterable[Path]) -> int:
    total = 0
    for top in paths:
        for directory, _, files in os.walk(top):
            for name in files:
                try:
                    total += os.stat(os.path.join(directory, name)).st_size
                except FileNotFoundError:
                    pass  # a segment deleted while walking
    return total


class Side:
    """One server the members talk to: its address, its PID and where its group state grows."""

    name: str
    port: int
    pid: int

    def state_bytes(self) -> int:
        raise NotImplementedError


class BrokerSide(Side):
    name = "broker"

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker, self.port, self.pid = broker, broker.port, broker.pid

    def state_bytes(self) -> int:
        return tree_bytes(self.broker.data_dir.glob("__consumer_offsets-*"))


class GatewaySide(Side):
    """`kprotocol gateway` in front of the broker, coordinating `groups`, started and stopped by its PID."""

    name = "gateway"

    def __init__(self, broker: KafkaBroker, groups: list[str], workdir: Path, initial_delay_ms: int,
                 group_configs: dict[str, str], state_topic: str | None) -> None:
        self.broker, self.workdir, self.state_topic = broker, workdir, state_topic
        self.state_dir = workdir / "state"
        self.log = workdir / "gateway.log"
        arguments = ["--upstream", broker.bootstrap, "--initial-rebalance-delay-ms", str(initial_delay_ms),
                     *(["--state-topic", state_topic] if state_topic else ["--state", str(self.state_dir)])]
        for name, value in group_configs.items():
            arguments += ["--group-config", f"{name}={value}"]
        for group in groups:
            arguments += ["--group", group]
        for attempt in range(3):  # a free port is a guess: a port taken meanwhile is picked anew
            self.port = quiet_port()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kprotocol", "gateway", "--listen", f"127.0.0.1:{self.port}",
                 "--broker-port-base", str(quiet_port() - 1), *arguments], stdout=subprocess.PIPE,
                stderr=self.log.open("ab"), stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=die_with_parent)
            line = self.process.stdout.readline()  # type: ignore[union-attr]
            if line.startswith("gateway on"):
                self.pid = self.process.pid
                return
            stop_process(self.process, 10)
            if "address already in use" not in self.log.read_text()[-500:] or attempt == 2:
                raise RuntimeError(f"gateway did not start: {line!r}; log: {self.log.read_text()[-2000:]}")

    def state_bytes(self) -> int:
        if self.state_topic:
            return tree_bytes(self.broker.data_dir.glob(f"{self.state_topic}-*"))
        return tree_bytes([self.state_dir])

    def stop(self) -> None:
        stop_process(self.process, 20)


def quiet_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999), where the thousands of connections of the
    driver's members take theirs."""
    for _ in range(1000):
        port = random.randrange(20_000, 32_000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 20000-32000")


# --- the wire ----------------------------------------------------------------------------------------


class Wire:
    """One member's connection: a request at a time, its size-prefixed response read back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader, self.writer, self.client_id = reader, writer, client_id
        self.correlation = 0

    @classmethod
    async def open(cls, port: int, client_id: str) -> Wire:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
        return cls(reader, writer, client_id)

    async def call(self, request: Any, version: int) -> Any:
        self.correlation += 1
        header = HEADER(request_api_key=request.api_key, request_api_version=version,
                        correlation_id=self.correlation, client_id=self.client_id)
        self.writer.write(encode_request(header, request))
        size = await self.reader.readexactly(4)
        body = await self.reader.readexactly(int.from_bytes(size, "big"))
        head, response = decode_response(size + body, request.api_key, version)
        if head.correlation_id != self.correlation:
            raise RuntimeError(f"correlation {head.correlation_id} answers {self.correlation}")
        return response

    def close(self) -> None:
        self.writer.close()


# --- what the driver knows of a group --------------------------------------------------------------


class Tracker:
    """The members of one group as they report themselves: stable when every expected member holds its tasks
    at one epoch (the highest any answer named) and the tasks are covered exactly once."""

    def __init__(self, group: str, tasks: int, expected: int) -> None:
        self.group, self.tasks, self.expected = group, tasks, expected
        self.held: dict[str, tuple[int, frozenset[int]]] = {}
        self.max_epoch = 0
        self.last_change = time.monotonic()
        self.dirty = True

    def saw_epoch(self, epoch: int) -> None:
        if epoch > self.max_epoch:
            self.max_epoch, self.last_change, self.dirty = epoch, time.monotonic(), True

    def update(self, member: str, epoch: int, owned: frozenset[int]) -> None:
        self.saw_epoch(epoch)
        if self.held.get(member) != (epoch, owned):
            self.held[member] = (epoch, owned)
            self.last_change, self.dirty = time.monotonic(), True

    def remove(self, member: str) -> None:
        if self.held.pop(member, None) is not None:
            self.last_change, self.dirty = time.monotonic(), True

    def stable(self) -> bool:
        if len(self.held) != self.expected or self.max_epoch <= 0:
            return False
        covered = 0
        seen: set[int] = set()
        for epoch, owned in self.held.values():
            if epoch != self.max_epoch:
                return False
            covered += len(owned)
            seen |= owned
        return covered == self.tasks and len(seen) == self.tasks


@dataclass
class Stats:
    """The driver's counters; the round trips of heartbeats answered inside the measuring window are kept."""

    measuring: bool = False
    rtts: list[float] = field(default_factory=list)
    heartbeats: int = 0
    requests: int = 0
    rebalances_in_window: int = 0
    fenced: int = 0
    errors: Counter = field(default_factory=Counter)

    def heartbeat(self, start: float, end: float) -> None:
        self.requests += 1
        if self.measuring:
            self.rtts.append((end - start) * 1000)
            self.heartbeats += 1

    def rebalance(self) -> None:
        if self.measuring:
            self.rebalances_in_window += 1


# --- members -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """A Streams instance: its process id and endpoint, shared by its stream threads (members)."""

    process_id: uuid.UUID
    host: str | None  # None: no application.server (no interactive queries)
    port: int = 7070

    @property
    def endpoint(self) -> str | None:
        return None if self.host is None else f"{self.host}:{self.port}"


class Member:
    """One simulated member: its own connection, its group's tracker, the run's counters."""

    kind = ""

    def __init__(self, name: str, group: str, instance: Instance, tracker: Tracker, stats: Stats, topic: str,
                 versions: dict[int, int]) -> None:
        self.name, self.group, self.instance, self.tracker, self.stats = name, group, instance, tracker, stats
        self.topic, self.versions = topic, versions
        self.wire: Wire | None = None
        self.inflight_since: float | None = None
        self.failed: str | None = None

    async def call(self, request: Any, heartbeat: bool = False) -> Any:
        start = time.monotonic()
        if heartbeat:
            self.inflight_since = start
        try:
            response = await self.wire.call(request, self.versions[request.api_key])  # type: ignore[union-attr]
        finally:
            self.inflight_since = None
        if heartbeat:
            self.stats.heartbeat(start, time.monotonic())
        else:
            self.stats.requests += 1
        return response

    async def connect(self, port: int, limit: asyncio.Semaphore) -> None:
        """Open the member's connection (before the storm: the storm times joins, not TCP handshakes)."""
        async with limit:
            for attempt in range(5):
                try:
                    self.wire = await Wire.open(port, f"{self.kind}-{self.name}")
                    return
                except OSError as exc:
                    if attempt == 4:
                        self.failed = f"connect: {type(exc).__name__}: {exc}"
                        self.stats.errors[self.failed[:120]] += 1
                    await asyncio.sleep(0.2 * (attempt + 1))

    async def run(self) -> None:
        try:
            await self.loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a member's failure is reported, the others go on
            self.failed = f"{type(exc).__name__}: {exc}"
            self.stats.errors[self.failed[:120]] += 1

    async def loop(self) -> None:
        raise NotImplementedError

    def leave_request(self) -> Any:
        raise NotImplementedError

    async def leave(self, port: int) -> None:
        """Leave the group, on a connection of its own (the member's may have a request in flight)."""
        request = self.leave_request()
        if request is None:
            return
        wire = await Wire.open(port, f"{self.kind}-{self.name}")
        try:
            await wire.call(request, self.versions[request.api_key])
        finally:
            wire.close()

    def close(self) -> None:
        if self.wire is not None:
            self.wire.close()


class StreamsMember(Member):
    """A streams-protocol member (KIP-1071): joins with its topology, applies what it is answered and says so
    in its next heartbeat at once, otherwise heartbeats at the answered interval with nothing changed."""

    kind = "streams"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.epoch, self.endpoint_epoch = 0, 0
        self.active: frozenset[int] = frozenset()
        self.interval_s = 5.0
        self.report = True  # the next heartbeat carries its tasks

    def request(self) -> Any:
        tasks = [HB.TaskIds(subtopology_id=SUBTOPOLOGY, partitions=sorted(self.active))] if self.active else []
        if self.epoch == 0:
            return HB(group_id=self.group, member_id=self.name, member_epoch=0,
                      endpoint_information_epoch=self.endpoint_epoch, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                      process_id=str(self.instance.process_id), client_tags=[], task_offsets=[], task_end_offsets=[],
                      user_endpoint=None if self.instance.host is None else
                      HB.Endpoint(host=self.instance.host, port=self.instance.port),
                      topology=HB.Topology(epoch=0, subtopologies=[HB.Subtopology(
                          subtopology_id=SUBTOPOLOGY, source_topics=[self.topic])]),
                      active_tasks=tasks, standby_tasks=[], warmup_tasks=[])
        report = self.report
        self.report = False
        return HB(group_id=self.group, member_id=self.name, member_epoch=self.epoch,
                  endpoint_information_epoch=self.endpoint_epoch, active_tasks=tasks if report else None,
                  standby_tasks=[] if report else None, warmup_tasks=[] if report else None)

    async def loop(self) -> None:
        while True:
            # every StreamsGroupHeartbeat counts (in a stable group nearly all say nothing new; in one that is
            # not, the joins and acknowledgements are what the members wait for)
            response = await self.call(self.request(), heartbeat=True)
            code = response.error_code
            if code in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
                self.stats.fenced += 1
                self.stats.rebalance()
                self.epoch, self.active, self.report = 0, frozenset(), True
                self.tracker.remove(self.name)
                continue
            if code in RETRIABLE:
                await asyncio.sleep(0.1)
                continue
            if code != NONE:
                raise RuntimeError(f"StreamsGroupHeartbeat error {code}: {response.error_message}")
            self.interval_s = response.heartbeat_interval_ms / 1000
            self.endpoint_epoch = response.endpoint_information_epoch
            changed = response.member_epoch != self.epoch
            self.epoch = response.member_epoch
            if response.active_tasks is not None:
                active = frozenset(p for t in response.active_tasks if t.subtopology_id == SUBTOPOLOGY
                                   for p in t.partitions)
                if active != self.active:
                    self.active, self.report, changed = active, True, True
            if changed:
                self.stats.rebalance()
            if self.epoch > 0:
                self.tracker.update(self.name, self.epoch, self.active)
            if not self.report:
                await asyncio.sleep(self.interval_s)

    def leave_request(self) -> Any:
        return HB(group_id=self.group, member_id=self.name, member_epoch=-1,
                  endpoint_information_epoch=self.endpoint_epoch)


class Leader:
    """The classic leader's assignor: partitions round robin over the members (sorted by id), each member's
    AssignmentInfo naming its active tasks and every host's partitions. The members' userdata differ only
    in their active tasks: the shared tail (the host maps) is encoded once and spliced (checked once
    against Kafka Streams' full encoding)."""

    def __init__(self, topic: str, tasks: int) -> None:
        self.topic, self.tasks = topic, tasks

    def assign(self, members: list[Any]) -> dict[str, bytes]:
        ids = sorted(m.member_id for m in members)
        endpoints = {}
        for m in members:
            version = int.from_bytes(m.metadata[:2], "big")
            subscription = SUBSCRIPTION.decode(m.metadata[2:], min(version, CONSUMER_PROTOCOL_VERSION))
            info = SubscriptionInfo.decode(subscription.user_data)
            if info.user_end_point is not None:
                host, _, port = info.user_end_point.rpartition(":")
                endpoints[m.member_id] = HostInfo(host, int(port))
        owned: dict[str, list[int]] = {member: [] for member in ids}
        for p in range(self.tasks):
            owned[ids[p % len(ids)]].append(p)
        by_host: dict[HostInfo, list[int]] = {}
        for member in ids:
            if member in endpoints:
                by_host.setdefault(endpoints[member], []).extend(owned[member])
        host_map = tuple((host, tuple(TopicPartition(self.topic, p) for p in sorted(ps)))
                         for host, ps in by_host.items())
        empty = AssignmentInfo(version=USERDATA_VERSION, commonly_supported_version=USERDATA_VERSION).encode()
        tail = AssignmentInfo(version=USERDATA_VERSION, commonly_supported_version=USERDATA_VERSION,
                              partitions_by_host=host_map).encode()[16:]
        empty_tail = len(empty) - 16
        out = {}
        for member in ids:
            tasks = tuple(TaskId(0, p) for p in owned[member])
            mine = AssignmentInfo(version=USERDATA_VERSION, commonly_supported_version=USERDATA_VERSION,
                                  active_tasks=tasks).encode()
            userdata = mine[:len(mine) - empty_tail] + tail
            if not out:
                full = AssignmentInfo(version=USERDATA_VERSION, commonly_supported_version=USERDATA_VERSION,
                                      active_tasks=tasks, partitions_by_host=host_map).encode()
                assert userdata == full, "spliced AssignmentInfo differs from the full encoding"
            assignment = ASSIGNMENT(assigned_partitions=[ASSIGNMENT.TopicPartition(
                topic=self.topic, partitions=owned[member])], user_data=userdata)
            out[member] = CONSUMER_PROTOCOL_VERSION.to_bytes(2, "big") + assignment.encode(CONSUMER_PROTOCOL_VERSION)
        return out


class ClassicMember(Member):
    """A Kafka Streams member of the classic protocol (cooperative, as Streams is): JoinGroup with its
    SubscriptionInfo and owned partitions, SyncGroup (the leader sends everyone's assignment), Heartbeat at
    its interval, rejoining when answered REBALANCE_IN_PROGRESS or after giving up partitions."""

    kind = "classic"

    def __init__(self, *args: Any, heartbeat_s: float, leader: Leader, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.heartbeat_s, self.leader = heartbeat_s, leader
        self.member_id, self.generation = "", -1
        self.owned: frozenset[int] = frozenset()
        self.joined = False

    def metadata(self) -> bytes:
        info = SubscriptionInfo(version=USERDATA_VERSION, process_id=self.instance.process_id,
                                task_offset_sums=tuple(((0, p), LATEST_OFFSET) for p in sorted(self.owned)),
                                user_end_point=self.instance.endpoint)
        subscription = SUBSCRIPTION(topics=[self.topic], user_data=info.encode(), generation_id=self.generation,
                                    owned_partitions=[SUBSCRIPTION.TopicPartition(
                                        topic=self.topic, partitions=sorted(self.owned))] if self.owned else [])
        return CONSUMER_PROTOCOL_VERSION.to_bytes(2, "big") + subscription.encode(CONSUMER_PROTOCOL_VERSION)

    async def join(self) -> None:
        """JoinGroup then SyncGroup until a SyncGroup succeeds."""
        while True:
            response = await self.call(JOIN(
                group_id=self.group, session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                member_id=self.member_id, protocol_type="consumer",
                protocols=[JOIN.JoinGroupRequestProtocol(name="stream", metadata=self.metadata())]))
            if response.error_code == MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
                continue
            if response.error_code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if response.error_code in RETRIABLE or response.error_code == REBALANCE_IN_PROGRESS:
                await asyncio.sleep(0.1)
                continue
            if response.error_code != NONE:
                raise RuntimeError(f"JoinGroup error {response.error_code}")
            self.member_id = response.member_id
            self.tracker.saw_epoch(response.generation_id)
            assignments = []
            if response.leader == self.member_id and response.members:
                assignments = [SYNC.SyncGroupRequestAssignment(member_id=m, assignment=a)
                               for m, a in self.leader.assign(response.members).items()]
            sync = await self.call(SYNC(group_id=self.group, generation_id=response.generation_id,
                                        member_id=self.member_id, protocol_type="consumer", protocol_name="stream",
                                        assignments=assignments))
            if sync.error_code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION) or sync.error_code in RETRIABLE:
                continue
            if sync.error_code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if sync.error_code != NONE:
                raise RuntimeError(f"SyncGroup error {sync.error_code}")
            data = bytes(sync.assignment or b"")
            assigned: frozenset[int] = frozenset()
            if data:
                version = int.from_bytes(data[:2], "big")
                message = ASSIGNMENT.decode(data[2:], min(version, CONSUMER_PROTOCOL_VERSION))
                assigned = frozenset(p for tp in message.assigned_partitions if tp.topic == self.topic
                                     for p in tp.partitions)
            revoked = self.owned - assigned
            self.owned, self.generation, self.joined = assigned, response.generation_id, True
            self.tracker.update(self.name, self.generation, self.owned)
            self.stats.rebalance()
            if not revoked:
                return  # a cooperative member that gave up partitions rejoins at once

    async def loop(self) -> None:
        while True:
            await self.join()
            while True:
                await asyncio.sleep(self.heartbeat_s)
                response = await self.call(HEARTBEAT(group_id=self.group, generation_id=self.generation,
                                                     member_id=self.member_id), heartbeat=True)
                if response.error_code == NONE or response.error_code in RETRIABLE:
                    continue
                if response.error_code == UNKNOWN_MEMBER_ID:
                    self.stats.fenced += 1
                    self.member_id, self.owned = "", frozenset()
                elif response.error_code not in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
                    raise RuntimeError(f"Heartbeat error {response.error_code}")
                self.stats.rebalance()
                break

    def leave_request(self) -> Any:
        return LEAVE(group_id=self.group, members=[LEAVE.MemberIdentity(member_id=self.member_id)]) \
            if self.member_id else None


# --- scenarios ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    kind: str  # streams, classic, mixed
    groups: int
    members: int  # per group

    @property
    def name(self) -> str:
        return f"{self.kind} {self.members}" if self.groups == 1 else f"{self.kind} {self.groups}x{self.members}"

    @property
    def total(self) -> int:
        return self.groups * self.members

    @property
    def tasks(self) -> int:
        return max(64, math.ceil(self.members / 64) * 64)


@dataclass
class Options:
    timeout_s: float = 180.0
    steady_s: float = 30.0
    threads: int = 10
    streams_heartbeat_ms: int = 5_000
    classic_heartbeat_ms: int = 3_000
    initial_delay_ms: int = 3_000
    migration_steps: int = 5
    state_topic: str | None = None
    endpoints: bool = True


@dataclass
class Result:
    """One side of one scenario."""

    scenario: str
    side: str
    members: int
    stable: bool = False
    join_s: float | None = None
    not_stable_after_s: float | None = None
    describe: list[str] = field(default_factory=list)
    steps_s: list[float | None] = field(default_factory=list)
    heartbeats: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    in_flight_at_end: int = 0
    cpu_ms_per_heartbeat: float | None = None
    server_cores: float | None = None
    window_s: float = 0.0
    rss_kb_per_member: float | None = None
    state_bytes_join: int = 0
    state_bytes_per_min: float = 0.0
    driver_cores: float = 0.0
    driver_cores_join: float = 0.0
    rebalances_in_window: int = 0
    fenced: int = 0
    members_failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


class Run:
    """One scenario against one side: members started together, timed to stable, measured steady."""

    def __init__(self, scenario: Scenario, side: Side, options: Options, groups: list[str], topic: str,
                 versions: dict[int, int]) -> None:
        self.scenario, self.side, self.options, self.groups, self.topic = scenario, side, options, groups, topic
        self.versions = versions
        self.stats = Stats()
        self.trackers = {g: Tracker(g, scenario.tasks, scenario.members) for g in groups}
        self.members: list[Member] = []
        self.tasks: dict[Member, asyncio.Task] = {}
        self.result = Result(scenario.name, side.name, scenario.total)

    def instances(self, group: str) -> list[Instance]:
        count = math.ceil(self.scenario.members / self.options.threads)
        return [Instance(uuid.uuid4(), f"{group}-i{i}" if self.options.endpoints else None) for i in range(count)]

    def make(self, kind: str, group: str, index: int, instance: Instance) -> Member:
        args = (f"{group}-m{index}-{uuid.uuid4().hex[:6]}", group, instance, self.trackers[group], self.stats,
                self.topic, self.versions)
        if kind == "streams":
            return StreamsMember(*args)
        return ClassicMember(*args, heartbeat_s=self.options.classic_heartbeat_ms / 1000,
                             leader=Leader(self.topic, self.scenario.tasks))

    async def start(self, members: list[Member]) -> None:
        """Connect the members, then set them all going."""
        limit = asyncio.Semaphore(CONNECTING)
        await asyncio.gather(*(m.connect(self.side.port, limit) for m in members))
        loop = asyncio.get_running_loop()
        self.launched = time.monotonic()
        for member in members:
            self.members.append(member)
            if member.failed is None:
                self.tasks[member] = loop.create_task(member.run())

    async def until_stable(self, deadline: float) -> float | None:
        """Seconds since `start` of the change that made every group stable (held for one more heartbeat
        interval of every member); None at the deadline."""
        confirm = max(self.options.streams_heartbeat_ms, self.options.classic_heartbeat_ms) / 1000
        since: dict[str, float] = {}
        while time.monotonic() < deadline:
            for group, tracker in self.trackers.items():
                if tracker.dirty:
                    tracker.dirty = False
                    if tracker.stable():
                        since[group] = tracker.last_change
                    else:
                        since.pop(group, None)
            if len(since) == len(self.trackers) and time.monotonic() - max(since.values()) >= confirm:
                return max(since.values())
            if all(t.done() for t in self.tasks.values()):
                return None
            await asyncio.sleep(0.02)
        return None

    async def describe(self) -> list[str]:
        """Each group's state as its coordinator describes it, asked until every group is Stable or for two
        heartbeat intervals (checked after the timing; the coordinator may describe its last committed state)."""
        interval = max(self.options.streams_heartbeat_ms, self.options.classic_heartbeat_ms) / 1000
        deadline = time.monotonic() + 2 * interval + 5
        wire = await Wire.open(self.side.port, "bench-admin")
        try:
            while True:
                states = [await self.describe_group(wire, group) for group in self.groups]
                if all(s.startswith("Stable") for s in states) or time.monotonic() > deadline:
                    return states
                await asyncio.sleep(0.5)
        finally:
            wire.close()

    async def describe_group(self, wire: Wire, group: str) -> str:
        if self.scenario.kind == "classic":
            request = message_class("DescribeGroupsRequest")(groups=[group])
            return (await wire.call(request, self.versions[15])).groups[0].group_state
        request = message_class("StreamsGroupDescribeRequest")(group_ids=[group])
        described = (await wire.call(request, self.versions[89])).groups[0]
        return (f"{described.group_state} epoch {described.group_epoch}/{described.assignment_epoch} "
                f"members {len(described.members)}")

    async def storm(self) -> None:
        """Every member joins at once; the join storm's time to stable."""
        kind = "classic" if self.scenario.kind == "mixed" else self.scenario.kind
        members = []
        for group in self.groups:
            instances = self.instances(group)
            members += [self.make(kind, group, i, instances[i // self.options.threads])
                        for i in range(self.scenario.members)]
        await self.start(members)
        self.started, driver0 = self.launched, _own_cpu()
        stable_at = await self.until_stable(self.started + self.options.timeout_s)
        elapsed = time.monotonic() - self.started
        self.result.driver_cores_join = (_own_cpu() - driver0) / elapsed
        if stable_at is None:
            self.result.not_stable_after_s = elapsed  # the time-out, or sooner when every member failed
        else:
            self.result.stable, self.result.join_s = True, stable_at - self.started

    async def migrate(self) -> None:
        """Mixed: instance by instance, the classic members of one leave and as many streams-protocol
        members of the same process join; each step timed to stable."""
        group = self.groups[0]
        by_instance: dict[Instance, list[Member]] = {}
        for m in self.members:
            by_instance.setdefault(m.instance, []).append(m)
        for instance in list(by_instance)[:self.options.migration_steps]:
            start = time.monotonic()
            leaving = by_instance[instance]
            for old in leaving:
                task = self.tasks.pop(old, None)
                if task is not None:
                    task.cancel()
                self.members.remove(old)
                self.trackers[group].remove(old.name)
            await asyncio.wait_for(asyncio.gather(*(old.leave(self.side.port) for old in leaving)), 60)
            for old in leaving:
                old.close()
            await self.start([self.make("streams", group, 10_000 + len(self.members) + index, instance)
                              for index in range(len(leaving))])
            stable_at = await self.until_stable(start + self.options.timeout_s)
            self.result.steps_s.append(None if stable_at is None else stable_at - start)
            if stable_at is None:
                self.result.stable = False
                self.result.not_stable_after_s = time.monotonic() - start
                return

    async def steady(self) -> None:
        """The measuring window: heartbeat round trips, server CPU and state growth."""
        window = max(self.options.steady_s, 2 * max(self.options.streams_heartbeat_ms,
                                                    self.options.classic_heartbeat_ms) / 1000)
        cpu0, state0, driver0 = cpu_seconds(self.side.pid), self.side.state_bytes(), _own_cpu()
        start = time.monotonic()
        self.stats.measuring = True
        while (end := time.monotonic()) - start < window:  # a loop's timer may fire a little early
            await asyncio.sleep(window - (end - start))
        self.stats.measuring = False
        cpu1, state1, driver1 = cpu_seconds(self.side.pid), self.side.state_bytes(), _own_cpu()
        # a heartbeat still unanswered counts with the time it has waited (a lower bound)
        censored = [(end - m.inflight_since) * 1000 for m in self.members if m.inflight_since is not None]
        rtts = self.stats.rtts + censored
        r = self.result
        r.window_s, r.heartbeats, r.in_flight_at_end = end - start, self.stats.heartbeats, len(censored)
        r.p50_ms, r.p99_ms = percentile(rtts, 50), percentile(rtts, 99)
        r.server_cores = (cpu1 - cpu0) / r.window_s
        r.cpu_ms_per_heartbeat = (cpu1 - cpu0) * 1000 / r.heartbeats if r.heartbeats else None
        r.state_bytes_per_min = (state1 - state0) * 60 / r.window_s
        r.driver_cores = (driver1 - driver0) / r.window_s
        r.rebalances_in_window = self.stats.rebalances_in_window

    async def execute(self) -> Result:
        rss0, state0 = rss_kb(self.side.pid), self.side.state_bytes()
        try:
            await self.storm()
            self.result.state_bytes_join = self.side.state_bytes() - state0
            if self.result.stable and self.scenario.kind == "mixed":
                await self.migrate()
            if self.result.stable:
                self.result.describe = await asyncio.wait_for(self.describe(), 120)
            await self.steady()
            self.result.rss_kb_per_member = (rss_kb(self.side.pid) - rss0) / self.scenario.total
        finally:
            await self.teardown()
        r = self.result
        r.fenced, r.errors = self.stats.fenced, dict(self.stats.errors)
        r.members_failed = sum(1 for m in self.members if m.failed)
        r.counts = {"members": len(self.members), "streams": sum(m.kind == "streams" for m in self.members),
                    "classic": sum(m.kind == "classic" for m in self.members),
                    "reported": sum(len(t.held) for t in self.trackers.values()),
                    "tasks": sum(len(owned) for t in self.trackers.values() for _, owned in t.held.values()),
                    "tasks_expected": self.scenario.tasks * self.scenario.groups, "requests": self.stats.requests}
        return r

    async def teardown(self) -> None:
        """Members stop; against the broker they leave their groups (which would expire later otherwise)."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        if isinstance(self.side, BrokerSide):
            async def leave(m: Member) -> None:
                try:
                    await asyncio.wait_for(m.leave(self.side.port), 30)
                except Exception:  # noqa: BLE001 - a member whose connection broke has nothing to leave
                    pass
            await asyncio.gather(*(leave(m) for m in self.members if m.wire is not None and not m.failed))
        for m in self.members:
            m.close()


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


# --- the run ----------------------------------------------------------------------------------------------


def api_versions(port: int) -> dict[int, int]:
    """The versions to speak: the highest both kprotocol and the server know."""
    from kprotocol.connection import Connection
    from kprotocol.registry import api_classes

    with Connection("127.0.0.1", port, client_id="bench") as conn:
        response = conn.send(message_class("ApiVersionsRequest")(client_software_name="bench",
                                                                   client_software_version="1"))
    server = {k.api_key: k.max_version for k in response.api_keys}
    return {key: min(server[key], api_classes(key)[0].valid_versions[1]) for key in (11, 12, 13, 14, 15, 88, 89)}


def prepare_broker_groups(broker: KafkaBroker, groups: list[str], options: Options) -> None:
    """The broker coordinates these groups (FindCoordinator creates __consumer_offsets), the streams ones with
    the run's heartbeat interval."""
    from kprotocol.connection import Connection

    find = message_class("FindCoordinatorRequest")
    alter = message_class("IncrementalAlterConfigsRequest")
    with Connection("127.0.0.1", broker.port, client_id="bench") as conn:
        for group in groups:
            deadline = time.monotonic() + 60
            while conn.send(find(key_type=0, coordinator_keys=[group])).coordinators[0].error_code:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no coordinator for {group}")
                time.sleep(0.2)
        configs = {"streams.heartbeat.interval.ms": str(options.streams_heartbeat_ms),
                   "streams.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
        response = conn.send(alter(resources=[alter.AlterConfigsResource(
            resource_type=32, resource_name=group, configs=[
                alter.AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items()])
            for group in groups]))
        bad = [r for r in response.responses if r.error_code]
        if bad:
            raise RuntimeError(f"group configs refused: {bad[0].error_code} {bad[0].error_message}")


async def run_side(scenario: Scenario, side: Side, options: Options, groups: list[str], topic: str) -> Result:
    versions = api_versions(side.port)
    return await Run(scenario, side, options, groups, topic, versions).execute()


def topic_ready(broker: KafkaBroker, topic: str, partitions: int, timeout_s: float = 120) -> None:
    """Wait until every partition of a new topic has a leader (a streams group joined before then finds its
    source topic missing)."""
    from kprotocol.connection import Connection

    metadata = message_class("MetadataRequest")
    deadline = time.monotonic() + timeout_s
    with Connection("127.0.0.1", broker.port, client_id="bench") as conn:
        while True:
            found = conn.send(metadata(topics=[metadata.MetadataRequestTopic(name=topic)])).topics[0]
            if found.error_code == 0 and len(found.partitions) == partitions and \
                    all(p.error_code == 0 and p.leader_id >= 0 for p in found.partitions):
                time.sleep(1)  # the group coordinator reads the same metadata image a moment later
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} not ready in {timeout_s:.0f} s")
            time.sleep(0.2)


def log(line: str) -> None:
    print(line, flush=True)


def run_scenario(scenario: Scenario, broker: KafkaBroker, options: Options, workdir: Path,
                 sides: list[str]) -> dict[str, Result]:
    topic = f"bench-src-{scenario.tasks}"
    broker.create_topic(topic, scenario.tasks)
    topic_ready(broker, topic, scenario.tasks)
    results = {}
    for side_name in [s for s in sides if s == "gateway" or scenario.kind != "mixed"]:
        groups = [f"scale-{scenario.kind}-{side_name}-{uuid.uuid4().hex[:6]}-{g}" for g in range(scenario.groups)]
        log(f"{scenario.name}: {side_name} ...")
        side: Side | None = None
        try:
            if side_name == "broker":
                prepare_broker_groups(broker, groups, options)
                side = BrokerSide(broker)
            else:
                directory = Path(tempfile.mkdtemp(prefix="gateway-", dir=workdir))
                side = GatewaySide(broker, groups, directory, options.initial_delay_ms, {
                    "streams.heartbeat.interval.ms": str(options.streams_heartbeat_ms),
                    "streams.session.timeout.ms": str(SESSION_TIMEOUT_MS)}, options.state_topic)
            result = _event_loop(run_side(scenario, side, options, groups, topic))
        except Exception as exc:  # noqa: BLE001 - one scenario's failure is reported, the run goes on
            result = Result(scenario.name, side_name, scenario.total, errors={f"{type(exc).__name__}: {exc}": 1})
        finally:
            if isinstance(side, GatewaySide):
                side.stop()
        results[side_name] = result
        log(f"{scenario.name}: {side_name}: " + (f"stable in {result.join_s:.1f} s" if result.stable else
                                                   _not_stable(result))
            + f", p50/p99 {_ms(result.p50_ms)}/{_ms(result.p99_ms)} ms, CPU/hb {_ms(result.cpu_ms_per_heartbeat)} ms"
            + f", driver {result.driver_cores_join:.2f} cores joining, {result.driver_cores:.2f} steady")
    return results


def _event_loop(coroutine: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def _not_stable(r: Result | dict[str, Any]) -> str:
    r = r if isinstance(r, dict) else asdict(r)
    if r["not_stable_after_s"] is None:
        return f"not run: {next(iter(r['errors']), '')[:200]}"
    failed = f", {r['members_failed']} members failed: {next(iter(r['errors']), '')}" if r["members_failed"] else ""
    return f"not stable in {r['not_stable_after_s']:.0f} s{failed}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


# --- the report -----------------------------------------------------------------------------------------


def ratio(gateway: float | None, broker: float | None) -> float | None:
    if gateway is None or broker is None or broker <= 0:
        return None
    return gateway / broker


def targets(scenario: Scenario, results: dict[str, Result], reference: Result | None,
            options: Options) -> list[tuple[str, str, bool | None]]:
    """(target, measured, pass) for one scenario's gateway side; None: cannot be judged."""
    g = results["gateway"]
    out: list[tuple[str, str, bool | None]] = []
    cpu = ratio(g.cpu_ms_per_heartbeat, reference.cpu_ms_per_heartbeat) if reference else None
    out.append(("cpu", f"{_x(cpu)} the broker's", None if cpu is None or not g.stable else cpu <= 2))
    out.append(("p99", f"{_ms(g.p99_ms)} ms", None if g.p99_ms is None else g.stable and g.p99_ms < 10))
    if scenario.kind == "mixed":
        steps = g.steps_s
        worst = max((s for s in steps if s is not None), default=None)
        out.append(("steps", f"{len(steps)} steps, slowest {_ms(worst)} s",
                    bool(steps) and None not in steps and worst is not None and worst < SESSION_TIMEOUT_MS / 1000))
    elif "broker" in results:
        b = results["broker"]
        join = ratio(g.join_s, b.join_s)
        out.append(("join", f"{_x(join)} the broker's" if g.stable else _not_stable(g),
                    (join is not None and join <= 2) if g.stable else False))
    if scenario.groups > 1:
        default = options.streams_heartbeat_ms == 5_000 and options.classic_heartbeat_ms == 3_000
        out.append(("groups", f"{_ms(g.server_cores)} cores" + ("" if default else " (scaled intervals)"),
                    None if g.server_cores is None else g.server_cores < 0.5))
    out.append(("rss", f"{_ms(g.rss_kb_per_member)} KB", None if g.rss_kb_per_member is None
                else g.rss_kb_per_member < 20))
    return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render(report: list[dict[str, Any]], options: Options) -> str:
    lines = ["| scenario | side | join to stable | heartbeat p50 / p99 | CPU per heartbeat | server cores | "
             "RSS per member | state bytes: join, per min | driver cores: join, steady |",
             "|---|---|---|---|---|---|---|---|---|"]
    for entry in report:
        for side, r in entry["results"].items():
            join = f"{r['join_s']:.1f} s" if r["stable"] else _not_stable(r)
            if r["steps_s"]:  # mixed: the classic storm, then the migration steps
                join = f"{r['join_s']:.1f} s, then " + ("stable" if r["stable"] else join)
            if r["steps_s"]:
                join += " (steps " + ", ".join("-" if s is None else f"{s:.1f}" for s in r["steps_s"]) + " s)"
            censored = f" ({r['in_flight_at_end']} in flight)" if r["in_flight_at_end"] else ""
            lines.append(f"| {entry['scenario']} | {side} | {join} | {_ms(r['p50_ms'])} / {_ms(r['p99_ms'])} ms"
                         f"{censored} | {_ms(r['cpu_ms_per_heartbeat'])} ms | {_ms(r['server_cores'])} | "
                         f"{_ms(r['rss_kb_per_member'])} KB | {r['state_bytes_join']:,}, "
                         f"{r['state_bytes_per_min']:,.0f} | {r['driver_cores_join']:.2f}, {r['driver_cores']:.2f} |")
        ratios = entry["ratios"]
        if ratios:
            lines.append(f"| {entry['scenario']} | gateway / {entry['reference']} | {_x(ratios.get('join_s'))} | "
                         f"{_x(ratios.get('p50_ms'))} / {_x(ratios.get('p99_ms'))} | "
                         f"{_x(ratios.get('cpu_ms_per_heartbeat'))} | {_x(ratios.get('server_cores'))} | "
                         f"{_x(ratios.get('rss_kb_per_member'))} | | |")
    lines += ["", "| scenario | target | gateway | pass |", "|---|---|---|---|"]
    for entry in report:
        for key, measured, passed in entry["targets"]:
            verdict = "n/a" if passed is None else "pass" if passed else "FAIL"
            lines.append(f"| {entry['scenario']} | {TARGETS[key]} | {measured} | {verdict} |")
    return "\n".join(lines)


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    out = [Scenario(kind, 1, size) for size in args.sizes for kind in args.kinds]
    for spec in args.groups:
        count, _, members = spec.partition("x")
        out.append(Scenario("streams", int(count), int(members)))
    return out


def main(argv: list[str] | None = None, broker: KafkaBroker | None = None) -> list[dict[str, Any]]:
    """Run the scenarios (against `broker` when given, else a broker started and stopped here)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000", help="members in one group, comma-separated (5000 too)")
    parser.add_argument("--kinds", default="streams,classic,mixed", help="member kinds: streams, classic, mixed")
    parser.add_argument("--groups", default="100x50", help="GROUPSxMEMBERS scenarios of streams members ('' for none)")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds a scenario (or a migration step) may take to be stable")
    parser.add_argument("--steady-s", type=float, default=30.0,
                        help="the steady measuring window (at least 2 heartbeat intervals)")
    parser.add_argument("--threads", type=int, default=10, help="members per instance (stream threads)")
    parser.add_argument("--streams-heartbeat-ms", type=int, default=5_000,
                        help="streams.heartbeat.interval.ms on both sides (Kafka's default 5000)")
    parser.add_argument("--classic-heartbeat-ms", type=int, default=3_000,
                        help="the classic members' heartbeat.interval.ms (Kafka's default 3000)")
    parser.add_argument("--initial-delay-ms", type=int, default=3_000,
                        help="the groups' initial rebalance delay on both sides (Kafka's default 3000)")
    parser.add_argument("--migration-steps", type=int, default=5, help="instances migrated in the mixed scenario")
    parser.add_argument("--endpoints", action=argparse.BooleanOptionalAction, default=True,
                        help="every instance has an application.server endpoint (interactive queries): the "
                             "assignments name every host's partitions (default: yes)")
    parser.add_argument("--state-topic", help="the gateway keeps its state in this topic instead of a directory")
    parser.add_argument("--sides", default="broker,gateway", help="the sides to run (both: their ratio)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="50 streams members, short intervals and window (about a minute)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.groups = ("50" if args.sizes == "100,1000" else args.sizes), ""
        args.kinds = "streams" if args.kinds == "streams,classic,mixed" else args.kinds
        quick = {"streams_heartbeat_ms": 1_000, "classic_heartbeat_ms": 1_000, "initial_delay_ms": 1_000,
                 "steady_s": 5.0, "timeout": 60.0, "migration_steps": 2}
        for name, value in quick.items():  # unless given
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.groups = [g for g in args.groups.split(",") if g]
    args.sides = [s for s in args.sides.split(",") if s]
    if not args.sides or set(args.sides) - {"broker", "gateway"}:
        parser.error("--sides: broker, gateway or both")
    unknown = set(args.kinds) - {"streams", "classic", "mixed"}
    if unknown:
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    options = Options(args.timeout, args.steady_s, args.threads, args.streams_heartbeat_ms, args.classic_heartbeat_ms,
                      args.initial_delay_ms, args.migration_steps, args.state_topic, args.endpoints)
    workdir = Path(tempfile.mkdtemp(prefix="kprotocol-gateway-scale-"))
    own = broker is None
    if own:
        broker = KafkaBroker.start(heap="2g", config={
            # a classic Streams group's GroupMetadata record holds every member's AssignmentInfo, each naming every
            # host's partitions: about 10 MB at 1000 members, over Kafka's default 1 MB batch limit
            "message.max.bytes": str(100 << 20),
            "group.initial.rebalance.delay.ms": str(options.initial_delay_ms),
            "group.streams.initial.rebalance.delay.ms": str(options.initial_delay_ms),
            "group.streams.heartbeat.interval.ms": str(options.streams_heartbeat_ms)})
    report: list[dict[str, Any]] = []
    streams_reference: dict[int, Result] = {}
    try:
        for scenario in scenarios(args):
            results = run_scenario(scenario, broker, options, workdir, args.sides)
            if scenario.kind == "streams" and scenario.groups == 1 and "broker" in results:
                streams_reference[scenario.members] = results["broker"]
            reference = results.get("broker") or streams_reference.get(scenario.members)
            reference_name = "broker" if "broker" in results else "broker streams" if reference else ""
            g = results.get("gateway")
            keys = ("join_s", "p50_ms", "p99_ms", "cpu_ms_per_heartbeat", "server_cores", "rss_kb_per_member")
            ratios = {k: ratio(getattr(g, k), getattr(reference, k)) for k in keys} if reference and g else {}
            if scenario.kind == "mixed":
                ratios["join_s"] = None  # the classic storm then the steps: no broker figure to compare with
            report.append({"scenario": scenario.name, "kind": scenario.kind, "groups": scenario.groups,
                           "members": scenario.members, "tasks": scenario.tasks, "reference": reference_name,
                           "results": {k: asdict(v) for k, v in results.items()}, "ratios": ratios,
                           "targets": targets(scenario, results, reference, options) if g else []})
    finally:
        if own:
            broker.stop()
    table = render(report, options)
    print(f"\nintervals: streams {options.streams_heartbeat_ms} ms, classic {options.classic_heartbeat_ms} ms; "
          f"initial delay {options.initial_delay_ms} ms; {options.threads} members per instance"
          f"{' with an endpoint' if options.endpoints else ''}; steady window "
          f"{options.steady_s:.0f} s; targets as issue 35 states them (at 1000 members)\n")
    print(table)
    saturated = [f"{e['scenario']} {side}" for e in report for side, r in e["results"].items()
                 if max(r["driver_cores"], r["driver_cores_join"]) > 0.8]
    if saturated:
        print(f"\nthe driver used most of a core in: {', '.join(saturated)}: those figures measure the driver too")
    if args.json:
        args.json.write_text(json.dumps({"options": asdict(options), "scenarios": report}, indent=2))
    return report


if __name__ == "__main__":
    main()

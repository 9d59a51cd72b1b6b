"""Differential fuzzing of `StreamsGroupCoordinator` against Apache Kafka's broker, and the same
sequences against `compat.MigrationCoordinator` with classic members mixed in (invariants there).

Each hypothesis sequence (a `RuleBasedStateMachine`) drives a few members over a few processes of
fresh groups. Every request goes to the real broker and to the coordinator; each side keeps its own
client view (member epoch, owned tasks, endpoint epoch) built from its own answers, as a real client
does, so the two see the same requests only as long as they answer alike. Every response is compared
field by field (`normalize`: what cannot be equal by construction, named once in `EXEMPT`), and at the
end of the sequence every record each side wrote (the broker's read back from `__consumer_offsets`).

    python tests/coordinator_fuzz.py --seconds 600      # make fuzz-coordinator SECONDS=600

The broker runs on its wall clock: groups get a short session time-out, members a short rebalance
time-out, and no request is sent near a deadline (`streams_conformance.RACE_MARGIN_MS` and twice the slowest
broker round trip measured: the fuzzer sleeps past it), so that both sides always agree whether a time-out has
passed.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Flaky
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from streams_conformance import CLIENT_HOST, CLIENT_ID, HEADER, Twin, comparable  # noqa: E402

from kprotocol.registry import message_class  # noqa: E402
from kprotocol.streams_group import StreamsGroupCoordinator  # noqa: E402

HB = message_class("StreamsGroupHeartbeatRequest")
DESCRIBE = message_class("StreamsGroupDescribeRequest")
COMMIT = message_class("OffsetCommitRequest")
FETCH = message_class("OffsetFetchRequest")
LEAVE = message_class("LeaveGroupRequest")
CREATE_PARTITIONS = message_class("CreatePartitionsRequest")

SESSION_TIMEOUT_MS = 1500
REBALANCE_TIMEOUT_MS = 2000
MEMBERS = ("m0", "m1", "m2", "m3")
PROCESSES = ("p0", "p1", "p2")
INSTANCES = ("i0", "i1")
TRACE = bool(__import__("os").environ.get("COORDINATOR_FUZZ_TRACE"))  # every exchange to stderr
FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, MISSING_INTERNAL_TOPICS = 110, 25, 3

# --- the one place that names what differs by construction --------------------------------------
EXEMPT = {
    "throttleTimeMs": "quota throttling is the broker's, not a coordinator's",
    "describe/offset-fetch group order": "the broker answers per __consumer_offsets partition and concatenates; "
                                         "compared sorted by group id",
    "hash-ordered lists": "task lists and described members come from Java hash maps; compared sorted",
    "endpoint partitions order": "Kafka lists a member's partitions per subtopology walking an unmodifiable map, "
                                 "whose order is salted at each JVM start; compared sorted by topic",
    "authorizedOperations": "the broker's request layer fills it from its authorizer after its coordinator answered; "
                            "a coordinator has no authorizer",
    "unknown topics": "the broker's request layer refuses a commit's topics it does not know before its coordinator "
                      "sees them; requests sent to both name existing topics",
    "topic ids": "the broker's request layer resolves them to names for its coordinator and back; OffsetCommit and "
                 "OffsetFetch are compared at the versions that name topics (up to v9)",
    "record metadataHash": "Kafka hashes topic metadata with its own hash function (the coordinator's is its own)",
    "record assignmentTimestamp / commitTimestamp": "each side's wall clock",
}
# Tasks placed differently by the two assignors fail a sequence like any other difference (the coordinator's
# sticky assignor is the broker's tie for tie); the failure names it an assignor divergence, told apart from a
# reconciliation difference by the targets each side describes.
ASSIGNMENT_FIELDS = (".activeTasks", ".standbyTasks", ".warmupTasks", ".partitionsByUserEndpoint")
DESCRIBED_ASSIGNMENT = re.compile(r"\.groups\[\d+\]\.members\[\d+\]\.(targetAssignment|assignment)\.")


def normalize(value: Any) -> Any:
    """A response (as JSON) without what `EXEMPT` names."""
    if isinstance(value, dict):
        out = {k: normalize(v) for k, v in value.items() if k not in ("throttleTimeMs", "authorizedOperations")}
        for key, sort_key in (("members", "memberId"), ("groups", "groupId"), ("activePartitions", "topic"),
                              ("standbyPartitions", "topic")):
            if isinstance(out.get(key), list) and all(isinstance(m, dict) and sort_key in m for m in out[key]):
                out[key] = sorted(out[key], key=lambda m: m[sort_key])
        return out
    if isinstance(value, list):
        items = [normalize(v) for v in value]
        if all(isinstance(v, dict) and "subtopologyId" in v for v in value):
            return sorted(items, key=repr)
        return items
    return value


def first_difference(ours: Any, theirs: Any, path: str = "") -> str | None:
    """Where two normalized JSON values first differ, as `path: ours != Kafka's`."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted(set(ours) | set(theirs)):
            found = first_difference(ours.get(key), theirs.get(key), f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for i, (a, b) in enumerate(zip(ours, theirs)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if ours == theirs else f"{path or '.'}: ours {ours!r} != Kafka's {theirs!r}"


# --- client views ---------------------------------------------------------------------------------

@dataclass
class MemberView:
    """What one client knows of itself, from its own side's answers."""

    member_id: str
    epoch: int = 0
    previous_epoch: int = 0
    owned: dict[str, list] = field(default_factory=lambda: {"active": [], "standby": [], "warmup": []})
    endpoint_epoch: int = 0
    instance_id: str | None = None
    process: str = "p0"
    joined: bool = False

    def tasks(self, role: str) -> list:
        return [HB.TaskIds(subtopology_id=t["subtopologyId"], partitions=list(t["partitions"]))
                for t in self.owned[role]]

    def learn(self, response: dict) -> None:
        """Apply a heartbeat answer as the Java client does: a fenced or unknown member starts over."""
        code = response["errorCode"]
        if code in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
            self.epoch, self.joined = 0, False
            self.owned = {"active": [], "standby": [], "warmup": []}
            return
        if code:
            return
        if response["memberEpoch"] < 0:
            self.epoch, self.joined = 0, False
            self.owned = {"active": [], "standby": [], "warmup": []}
            return
        if response["memberEpoch"] != self.epoch:
            self.previous_epoch = self.epoch
        self.epoch, self.joined = response["memberEpoch"], True
        if response["activeTasks"] is not None:
            self.owned = {role: response[f"{role}Tasks"] for role in ("active", "standby", "warmup")}
        self.endpoint_epoch = response.get("endpointInformationEpoch", self.endpoint_epoch)


class Differential:
    """One sequence's groups at the broker and at a coordinator, with a client view per side."""

    total_exchanges = 0  # over every sequence of the process
    compared: Counter[str] = Counter()  # answers (by request kind) and records found equal, every sequence
    divergences: list[str] = []  # every assignor divergence of the process (each failed its sequence)

    def __init__(self, broker: Any, standbys: int) -> None:
        run = uuid.uuid4().hex[:8]
        self.group, self.other = f"fz-{run}", f"fz-{run}-other"
        self.source, self.source2 = f"fz-{run}-in", f"fz-{run}-in2"
        configs = {"streams.session.timeout.ms": str(SESSION_TIMEOUT_MS), "streams.heartbeat.interval.ms": "500",
                   "streams.num.standby.replicas": str(standbys)}
        self.twin = Twin(broker, self.group, configs)
        self.other = self.twin.same_partition_group(self.other)  # one coordinator partition, as the coordinator is
        self.twin.alter_group_configs(self.other, configs)
        self.conn = self.twin.conn
        self.coordinator = self.twin.coordinator
        self.coordinator.group_configs[self.other] = self.coordinator.config
        self.versions = self.conn.api_versions
        self.views: dict[str, dict[str, MemberView]] = {"kafka": {}, "ours": {}}
        self.records = self.twin.records
        self.failed = False  # a response differed: the records are not compared on top

    # time

    def now(self) -> int:
        return self.twin.now()

    def settle(self) -> None:
        """Sleep past any deadline of the coordinator within the twin's margin of now (see the module doc)."""
        self.twin.settle()

    def sleep_past_next_deadline(self, limit_ms: int) -> None:
        now = self.now()
        future = [d for d in self.twin.deadlines() if d > now]
        if future and min(future) - now <= limit_ms:
            time.sleep((min(future) + self.twin.margin_ms() + 20 - now) / 1000)
        self.settle()

    # requests

    def version(self, cls: type, low: int = 0, high: int = 99) -> tuple[int, int]:
        b_low, b_high = self.versions.get(cls.api_key, cls.valid_versions)
        return max(low, b_low, cls.valid_versions[0]), min(high, b_high, cls.valid_versions[1])

    def exchange(self, kafka_request: Any, ours_request: Any, version: int) -> tuple[dict, dict]:
        """Send each side its own request; both answers as JSON, as a client reads them off the wire."""
        self.settle()
        self.twin.sync_topics()
        now = self.now()
        self.records += self.coordinator.poll(now)[0]
        theirs = self.twin.timed(kafka_request, version)
        header = HEADER(request_api_key=ours_request.api_key, request_api_version=version, correlation_id=0,
                        client_id=CLIENT_ID)
        ours, records = self.coordinator.handle(header, ours_request, now, client_host=CLIENT_HOST)
        self.records += records
        ours = type(ours).decode(ours.encode(version), version)
        Differential.total_exchanges += 1
        if TRACE:
            print(f"--> {type(kafka_request).__name__} v{version} {json.dumps(kafka_request.to_json(version))}\n"
                  f"<-- Kafka {json.dumps(theirs.to_json(version))}\n<-- ours  {json.dumps(ours.to_json(version))}\n"
                  f"    records {records}", file=sys.stderr)
        return theirs.to_json(version), ours.to_json(version)

    def compare(self, what: str, theirs: dict, ours: dict, group: str | None = None) -> None:
        """Field by field; a difference in placed tasks is named an assignor divergence."""
        difference = first_difference(normalize(ours), normalize(theirs))
        if not difference:
            Differential.compared[what.split(" of ")[0]] += 1
            return
        self.failed = True
        tasks = lambda r: normalize({k: r.get(k) for k in ("activeTasks", "standbyTasks", "warmupTasks")})  # noqa
        if group is not None and (DESCRIBED_ASSIGNMENT.match(difference) or (
                tasks(theirs) != tasks(ours) and _same_but_tasks(theirs, ours)
                and self._targets_differ(group, ours.get("memberId", "")))):
            Differential.divergences.append(f"{what}: {difference}")
            difference = f"assignor divergence (the two sticky assignors placed tasks differently): {difference}"
        raise AssertionError(f"{what}: {difference}\n Kafka: {json.dumps(theirs)}\n ours:  {json.dumps(ours)}")

    def _targets_differ(self, group_id: str, member_id: str) -> bool:
        """Whether Kafka's target for the member (read by a describe) differs from the coordinator's."""
        described = self.conn.send(DESCRIBE(group_ids=[group_id])).groups[0]
        theirs = [m.target_assignment for m in described.members if m.member_id == member_id]
        group = self.coordinator.group(group_id)
        if not theirs or group is None:
            return True
        wire = lambda ids: {t.subtopology_id: sorted(t.partitions) for t in ids if t.partitions}  # noqa: E731
        mine = group.target(member_id)
        return (wire(theirs[0].active_tasks), wire(theirs[0].standby_tasks), wire(theirs[0].warmup_tasks)) != \
            tuple({s: sorted(p) for s, p in role.items()} for role in mine)

    def wait_for_internal_topics(self, response: dict) -> None:
        for status in response.get("status") or ():
            if status["statusCode"] == MISSING_INTERNAL_TOPICS:
                names = status["statusDetail"].split(": ", 1)[1].split(";")[0]
                self.twin.wait_for_topics([t.strip() for t in names.split(",")])

    def check_records(self) -> None:
        self.settle()
        self.twin.poll()
        for group in (self.group, self.other):
            self.twin.group_id = group
            ours, theirs = self._both_records(group)
            targets = lambda records: [r for r in records if r[0] == "StreamsGroupTargetAssignmentMemberKey"]  # noqa
            if targets(ours) != targets(theirs) and _without_assignments(ours) == _without_assignments(theirs):
                Differential.divergences.append(f"group {group}: target assignment records")
                raise AssertionError(f"group {group}: assignor divergence (the target assignment records differ)")
            for i, (a, b) in enumerate(zip(ours, theirs)):
                assert a == b, f"group {group} record {i} differs:\n ours:  {a}\n Kafka: {b}"
            assert len(ours) == len(theirs), \
                f"group {group}: {len(ours)} records here, {len(theirs)} in Kafka's log: {theirs[len(ours):]}"
            Differential.compared["record"] += len(ours)
        self.twin.group_id = self.group
        replayed = StreamsGroupCoordinator.from_records(self.records)
        for group_id, group in self.coordinator.groups.items():
            if group.exists:
                assert replayed.groups[group_id].hard_state() == group.hard_state(), f"{group_id}: replay differs"


    def _both_records(self, group: str) -> tuple[list[tuple], list[tuple]]:
        """Each side's records of `group`; when Kafka's log has more, a time-out may have fired at the broker
        while its log was read: the coordinator is polled past its next deadline and both read again."""
        for _ in range(3):
            ours = [comparable(r) for r in self.records if r.group_id == group]
            theirs = [comparable(r) for r in self.twin.broker_records()]
            if len(theirs) <= len(ours):
                break
            self.sleep_past_next_deadline(self.twin.margin_ms() * 2)
        return ours, theirs


def _without_assignments(records: list[tuple]) -> list[tuple]:
    """Records without members' targets and current assignments (their reconciliation state follows the
    target): where records differ only in those, the assignors diverged."""
    return [r for r in records if r[0] not in ("StreamsGroupTargetAssignmentMemberKey",
                                               "StreamsGroupCurrentMemberAssignmentKey")]


def _same_but_tasks(theirs: dict, ours: dict) -> bool:
    """Whether two heartbeat answers agree on everything but the tasks placed (and both place valid ones)."""
    strip = lambda r: {k: v for k, v in normalize(r).items() if f".{k}" not in ASSIGNMENT_FIELDS}  # noqa: E731
    if strip(theirs) != strip(ours):
        return False
    for answer in (theirs, ours):
        for role in ("activeTasks", "standbyTasks", "warmupTasks"):
            for t in answer.get(role) or ():
                assert t["partitions"] == sorted(set(t["partitions"])) and min(t["partitions"], default=0) >= 0, t
        active = {(t["subtopologyId"], p) for t in answer.get("activeTasks") or () for p in t["partitions"]}
        standby = {(t["subtopologyId"], p) for t in answer.get("standbyTasks") or () for p in t["partitions"]}
        assert not active & standby, f"a task both active and standby: {answer}"
    return True


def topology(kind: str, d: Differential, epoch: int) -> Any:
    g = d.group
    subs = {
        "stateless": [{"id": "0", "sources": [d.source]}],
        "stateful": [{"id": "0", "sources": [d.source], "changelogs": [f"{g}-store-changelog"]}],
        "repartition": [{"id": "0", "sources": [d.source], "repartition_sinks": [f"{g}-rep-repartition"]},
                        {"id": "1", "repartition_sources": {f"{g}-rep-repartition": 0},
                         "changelogs": [f"{g}-agg-changelog"]}],
        "copartitioned": [{"id": "0", "sources": [d.source, d.source2], "copartition": [[0, 1]],
                           "changelogs": [f"{g}-join-changelog"]}],
    }[kind]
    from streams_conformance import topology as build
    return build(epoch, subs)


# --- the differential state machine ---------------------------------------------------------------

member_names = st.sampled_from(MEMBERS)


class DifferentialMachine(RuleBasedStateMachine):
    """Random sequences against the broker (`DifferentialMachine.broker`) and the coordinator."""

    broker: Any = None

    @initialize(kind=st.sampled_from(["stateless", "stateful", "repartition", "copartitioned"]),
                partitions=st.integers(1, 4), standbys=st.sampled_from([0, 0, 1]), members=st.integers(0, 2))
    def start(self, kind: str, partitions: int, standbys: int, members: int) -> None:
        """Fresh groups and source topic; `members` members join first, in processes of their own."""
        self.d = Differential(self.broker, standbys)
        self.kind, self.topology_epoch = kind, 0
        self.d.twin.create_topic(self.d.source, partitions)
        self.topics = {self.d.source: partitions}
        self.generation = dict.fromkeys(MEMBERS, 0)
        for i in range(members):
            self.join(MEMBERS[i], PROCESSES[i], static=False, new_id=True, epoch_shift=0, endpoint=i + 1, rack=None,
                      tags=None, version=1)

    @precondition(lambda self: hasattr(self, "d") and self.d.views["kafka"])
    @rule()
    def round(self) -> None:
        """Every member heartbeats once as a client does: its epoch, the tasks it runs, the latest version."""
        for name in sorted(self.d.views["kafka"]):
            if not self.d.views["kafka"][name].joined:
                continue

            def build(view: MemberView) -> Any:
                return HB(group_id=self.d.group, member_id=view.member_id, member_epoch=view.epoch,
                          instance_id=view.instance_id, rebalance_timeout_ms=-1, active_tasks=view.tasks("active"),
                          standby_tasks=view.tasks("standby"), warmup_tasks=view.tasks("warmup"),
                          endpoint_information_epoch=view.endpoint_epoch)
            self._heartbeat(name, build, self.d.version(HB)[1])

    def teardown(self) -> None:
        if hasattr(self, "d"):
            try:
                if not self.d.failed:
                    self.d.check_records()
            finally:
                self.d.conn.close()

    # helpers

    def _views(self, name: str) -> tuple[MemberView | None, MemberView | None]:
        return self.d.views["kafka"].get(name), self.d.views["ours"].get(name)

    def _heartbeat(self, name: str, build: Any, version: int) -> tuple[dict, dict]:
        kafka_view, ours_view = self._views(name)
        theirs, ours = self.d.exchange(build(kafka_view), build(ours_view), version)
        self.d.compare(f"heartbeat of {name}", theirs, ours, self.d.group)
        kafka_view.learn(theirs)
        ours_view.learn(ours)
        self.d.wait_for_internal_topics(theirs)
        return theirs, ours

    # rules

    @rule(name=member_names, process=st.sampled_from(PROCESSES), static=st.booleans(), new_id=st.booleans(),
          epoch_shift=st.sampled_from([0, 0, 0, 1, -1]), endpoint=st.sampled_from([None, 1, 2]),
          rack=st.sampled_from([None, "r1", "r2"]), tags=st.sampled_from([None, (("zone", "a"),), (("zone", "b"),)]),
          version=st.integers(0, 1))
    def join(self, name: str, process: str, static: bool, new_id: bool, epoch_shift: int, endpoint: int | None,
             rack: str | None, tags: Any, version: int) -> None:
        """A member joins or rejoins at epoch 0 (a new member id when `new_id`, as after a restart)."""
        if new_id or name not in self.d.views["kafka"]:
            self.generation[name] += 1
            member_id = f"{name}-{self.generation[name]}"
            instance = INSTANCES[MEMBERS.index(name) % len(INSTANCES)] if static else None
            for side in self.d.views.values():
                side[name] = MemberView(member_id, instance_id=instance, process=process)
        topo = topology(self.kind, self.d, max(0, self.topology_epoch + epoch_shift))
        version = min(version, self.d.version(HB)[1])

        def build(view: MemberView) -> Any:
            return HB(group_id=self.d.group, member_id=view.member_id, member_epoch=0, instance_id=view.instance_id,
                      rack_id=rack, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, topology=topo,
                      active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id=view.process,
                      user_endpoint=None if endpoint is None else HB.Endpoint(host=f"h{endpoint}", port=endpoint),
                      client_tags=[HB.KeyValue(key=k, value=v) for k, v in tags or ()],
                      endpoint_information_epoch=view.endpoint_epoch)
        theirs, _ = self._heartbeat(name, build, version)
        if theirs["errorCode"] == 0 and self.topology_epoch == 0:
            self.topology_epoch = topo.epoch

    @precondition(lambda self: hasattr(self, "d") and self.d.views["kafka"])
    @rule(data=st.data(), epoch_kind=st.sampled_from(["current"] * 6 + ["previous", "stale", "future"]),
          tasks_kind=st.sampled_from(["owned"] * 6 + ["null", "extra", "fewer", "bogus"]),
          change=st.sampled_from([None] * 6 + ["rack", "tags", "endpoint", "process"]), version=st.integers(0, 1),
          report=st.sampled_from([None] * 5 + ["offsets", "shutdown"]), lag=st.integers(0, 20_000))
    def heartbeat(self, data: Any, epoch_kind: str, tasks_kind: str, change: str | None, version: int,
                  report: str | None, lag: int) -> None:
        views = self.d.views["kafka"]
        name = data.draw(st.sampled_from(sorted(n for n in views if views[n].joined) or sorted(views)))
        version = min(version, self.d.version(HB)[1])

        def build(view: MemberView) -> Any:
            epoch = {"current": view.epoch, "previous": view.previous_epoch, "stale": max(1, view.epoch - 2),
                     "future": view.epoch + 3}[epoch_kind]
            tasks = {role: view.tasks(role) for role in ("active", "standby", "warmup")}
            if tasks_kind == "null":
                tasks = dict.fromkeys(tasks)
            elif tasks_kind == "extra":
                tasks["active"] = tasks["active"] + [HB.TaskIds(subtopology_id="0", partitions=[0])]
            elif tasks_kind == "fewer" and tasks["active"]:
                tasks["active"] = tasks["active"][1:]
            elif tasks_kind == "bogus":
                tasks["standby"] = tasks["standby"] + [HB.TaskIds(subtopology_id="9", partitions=[0])]
            changes: dict[str, Any] = {}
            if change == "rack":
                changes["rack_id"] = "r3"
            elif change == "tags":
                changes["client_tags"] = [HB.KeyValue(key="zone", value="c")]
            elif change == "endpoint":
                changes["user_endpoint"] = HB.Endpoint(host="h9", port=9)
            elif change == "process":
                changes["process_id"] = "p9"
            if report == "offsets":  # the task offsets a member reports every task.offset.interval.ms
                owned = [(t.subtopology_id, p) for role in ("active", "standby", "warmup") for t in view.tasks(role)
                         for p in t.partitions]
                changes["task_offsets"] = [HB.TaskOffset(subtopology_id=s, partition=p, offset=50_000 - lag)
                                           for s, p in owned]
                changes["task_end_offsets"] = [HB.TaskOffset(subtopology_id=s, partition=p, offset=50_000)
                                               for s, p in owned]
            elif report == "shutdown":
                changes["shutdown_application"] = True
            return HB(group_id=self.d.group, member_id=view.member_id, member_epoch=epoch,
                      instance_id=view.instance_id, rebalance_timeout_ms=-1, active_tasks=tasks["active"],
                      standby_tasks=tasks["standby"], warmup_tasks=tasks["warmup"],
                      endpoint_information_epoch=view.endpoint_epoch, **changes)
        self._heartbeat(name, build, version)

    @precondition(lambda self: hasattr(self, "d") and self.d.views["kafka"])
    @rule(data=st.data(), static=st.booleans(), version=st.integers(0, 1))
    def leave(self, data: Any, static: bool, version: int) -> None:
        """A member leaves by heartbeat: -1, or -2 for a static member that will come back."""
        name = data.draw(st.sampled_from(sorted(self.d.views["kafka"])))
        version = min(version, self.d.version(HB)[1])

        def build(view: MemberView) -> Any:
            epoch = -2 if static and view.instance_id is not None else -1
            return HB(group_id=self.d.group, member_id=view.member_id, member_epoch=epoch,
                      instance_id=view.instance_id, rebalance_timeout_ms=-1, active_tasks=None, standby_tasks=None,
                      warmup_tasks=None, endpoint_information_epoch=view.endpoint_epoch)
        self._heartbeat(name, build, version)

    @precondition(lambda self: hasattr(self, "d"))
    @rule(names=st.lists(member_names, min_size=1, max_size=2, unique=True), version=st.integers(0, 5),
          by_instance=st.booleans())
    def leave_group(self, names: list[str], version: int, by_instance: bool) -> None:
        """LeaveGroup naming members of the streams group (a classic client's way out)."""
        low, high = self.d.version(LEAVE)
        version = max(low, min(version, high))

        def build(side: str) -> Any:
            views = [self.d.views[side].get(n) for n in names]
            ids = [v.member_id if v else f"{n}-unknown" for v, n in zip(views, names)]
            if version < 3:
                return LEAVE(group_id=self.d.group, member_id=ids[0])
            return LEAVE(group_id=self.d.group, members=[LEAVE.MemberIdentity(
                member_id=i, group_instance_id=v.instance_id if by_instance and v else None)
                for i, v in zip(ids, views)])
        theirs, ours = self.d.exchange(build("kafka"), build("ours"), version)
        self.d.compare("LeaveGroup", theirs, ours, self.d.group)

    @precondition(lambda self: hasattr(self, "d"))
    @rule(data=st.data(), group=st.sampled_from(["main", "main", "other"]),
          epoch_kind=st.sampled_from(["current", "current", "admin", "stale"]), version=st.integers(2, 9),
          offset=st.integers(0, 1000))
    def offset_commit(self, data: Any, group: str, epoch_kind: str, version: int, offset: int) -> None:
        names = sorted(self.d.views["kafka"])
        name = data.draw(st.sampled_from(names)) if names and epoch_kind != "admin" else None
        low, high = self.d.version(COMMIT, high=9)
        version = max(low, min(version, high))
        group_id = self.d.group if group == "main" else self.d.other
        partition = data.draw(st.integers(0, self.topics[self.d.source] - 1))

        def build(side: str) -> Any:
            view = self.d.views[side].get(name) if name else None
            epoch = -1 if view is None else (view.epoch if epoch_kind == "current" else max(0, view.epoch - 1))
            return COMMIT(group_id=group_id, generation_id_or_member_epoch=epoch,
                          member_id=view.member_id if view else "", topics=[COMMIT.OffsetCommitRequestTopic(
                              name=self.d.source, partitions=[COMMIT.OffsetCommitRequestPartition(
                                  partition_index=partition, committed_offset=offset, committed_metadata="m")])])
        theirs, ours = self.d.exchange(build("kafka"), build("ours"), version)
        self.d.compare("OffsetCommit", theirs, ours, group_id)

    @precondition(lambda self: hasattr(self, "d"))
    @rule(data=st.data(), group=st.sampled_from(["main", "other"]), version=st.integers(1, 9),
          all_topics=st.booleans(), with_member=st.booleans())
    def offset_fetch(self, data: Any, group: str, version: int, all_topics: bool, with_member: bool) -> None:
        low, high = self.d.version(FETCH, high=9)
        version = max(low, min(version, high))
        group_id = self.d.group if group == "main" else self.d.other
        names = sorted(self.d.views["kafka"])
        name = data.draw(st.sampled_from(names)) if names and with_member and version >= 9 else None
        topics = None if all_topics and version >= 2 else [(self.d.source, list(range(self.topics[self.d.source])))]

        def build(side: str) -> Any:
            if version < 8:
                return FETCH(group_id=group_id, topics=None if topics is None else [
                    FETCH.OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics])
            view = self.d.views[side].get(name) if name else None
            return FETCH(groups=[FETCH.OffsetFetchRequestGroup(
                group_id=group_id, member_id=view.member_id if view else None,
                member_epoch=view.epoch if view else -1, topics=None if topics is None else [
                    FETCH.OffsetFetchRequestTopics(name=t, partition_indexes=p) for t, p in topics])])
        theirs, ours = self.d.exchange(build("kafka"), build("ours"), version)
        self.d.compare("OffsetFetch", theirs, ours, group_id)

    @precondition(lambda self: hasattr(self, "d"))
    @rule(which=st.lists(st.sampled_from(["main", "other", "absent"]), min_size=1, max_size=3, unique=True),
          version=st.integers(0, 1))
    def describe(self, which: list[str], version: int) -> None:
        version = min(version, self.d.version(DESCRIBE)[1])
        ids = {"main": self.d.group, "other": self.d.other, "absent": f"{self.d.group}-absent"}
        request = DESCRIBE(group_ids=[ids[w] for w in which])
        theirs, ours = self.d.exchange(request, request, version)
        self.d.compare("StreamsGroupDescribe", theirs, ours, self.d.group if "main" in which else None)

    @precondition(lambda self: hasattr(self, "d") and self.d.source2 not in self.topics)
    @rule(partitions=st.integers(1, 4))
    def create_second_topic(self, partitions: int) -> None:
        self.d.twin.broker.create_topic(self.d.source2, partitions)
        self.d.twin.wait_for_topics([self.d.source2])
        self.topics[self.d.source2] = partitions

    @precondition(lambda self: hasattr(self, "d"))
    @rule(second=st.booleans(), more=st.integers(1, 2))
    def add_partitions(self, second: bool, more: int) -> None:
        topic = self.d.source2 if second and self.d.source2 in self.topics else self.d.source
        count = self.topics[topic] + more
        response = self.d.conn.send(CREATE_PARTITIONS(topics=[CREATE_PARTITIONS.CreatePartitionsTopic(
            name=topic, count=count, assignments=None)], timeout_ms=30000))
        assert response.results[0].error_code == 0, response.results[0]
        self.topics[topic] = count
        self.d.twin.wait_for_topics([topic], partitions={topic: count})  # until the broker's coordinator sees them

    @precondition(lambda self: hasattr(self, "d"))
    @rule(limit=st.sampled_from([500, 2500]))
    def advance_time(self, limit: int) -> None:
        """Let the clock pass the next session, rebalance or assignment deadline (within `limit` ms)."""
        self.d.sleep_past_next_deadline(limit)

    @invariant()
    def one_active_owner(self) -> None:
        if not hasattr(self, "d"):
            return
        group = self.d.coordinator.group(self.d.group)
        if group is None:
            return
        seen: dict[tuple[str, int], str] = {}
        for m in group.members.values():
            for sub, parts in _merge(m.assigned.active, m.pending_revocation.active).items():
                for p in parts:
                    assert (sub, p) not in seen, f"task {sub}_{p} active at {seen[(sub, p)]} and {m.member_id}"
                    seen[(sub, p)] = m.member_id


def _merge(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> dict[str, frozenset[int]]:
    out = dict(a)
    for sub, parts in b.items():
        out[sub] = out.get(sub, frozenset()) | parts
    return out


def fuzz_settings(examples: int, steps: int, shrink: bool = True, derandomize: bool = False) -> settings:
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None, phases=phases,
                    suppress_health_check=[HealthCheck.too_slow],  # every step waits on a real broker's answers
                    database=None, print_blob=True, derandomize=derandomize)


def run_differential(broker: Any, examples: int, steps: int, shrink: bool = True, derandomize: bool = False) -> int:
    """Run `examples` sequences of up to `steps` rules; return the number of exchanges compared."""
    DifferentialMachine.broker = broker
    before = Differential.total_exchanges
    run_state_machine_as_test(DifferentialMachine, settings=fuzz_settings(examples, steps, shrink, derandomize))
    return Differential.total_exchanges - before


def _start_broker(attempts: int = 3) -> Any:
    """A broker of the fuzzer's own (a loaded host may miss the start-up time-out: tried again)."""
    from kprotocol.toolchain import KafkaBroker, ToolchainError

    for _ in range(attempts - 1):
        try:
            return KafkaBroker.start()
        except ToolchainError as exc:
            print(f"broker start failed, trying again: {exc}", flush=True)
    return KafkaBroker.start()


def replay(report: Path) -> int:
    """Run the failing sequence of a kept report again (its @reproduce_failure blob) against a new broker; the
    broker's timing may make it pass where it failed."""
    from hypothesis import reproduce_failure

    found = re.search(r"@reproduce_failure\('([^']+)', (b'[^']+')\)", report.read_text())
    if not found:
        print(f"{report}: no @reproduce_failure line", file=sys.stderr)
        return 2
    machine = reproduce_failure(found.group(1), ast.literal_eval(found.group(2)))(DifferentialMachine)
    with _start_broker() as broker:
        machine.broker = broker
        try:
            run_state_machine_as_test(machine, settings=fuzz_settings(1, 100, shrink=False))
        except Exception:  # noqa: BLE001 - the difference is the output
            traceback.print_exc()
            return 1
    print("the sequence ran without a difference this time")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--batch", type=int, default=5, help="sequences per hypothesis run")
    parser.add_argument("--shrink", action="store_true", help="shrink a failing sequence (slow: a real broker)")
    parser.add_argument("--out", type=Path, default=Path("build/fuzz/coordinator"))
    parser.add_argument("--no-compat", action="store_true", help="skip the MigrationCoordinator machine")
    parser.add_argument("--replay", type=Path, help="run again the sequence a kept failure report names")
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    sequences = exchanges = failures = flaky = 0
    with _start_broker() as broker:
        while time.monotonic() - started < args.seconds:
            try:
                exchanges += run_differential(broker, args.batch, args.steps, args.shrink)
            except Flaky:  # a difference hypothesis could not reproduce (the broker's timing): kept apart
                flaky += 1
                report = args.out / f"flaky-{int(time.time())}-{flaky}.txt"
                report.write_text(traceback.format_exc())
                print(f"a difference that did not replay: {report}", flush=True)
            except Exception:  # noqa: BLE001 - every failure is kept and the fuzzing goes on
                failures += 1
                report = args.out / f"failure-{int(time.time())}-{failures}.txt"
                report.write_text(traceback.format_exc())
                print(f"difference found: {report}", flush=True)
            sequences += args.batch
            print(f"{time.monotonic() - started:7.0f} s: {sequences} sequences, {exchanges} exchanges, "
                  f"{failures} failures, {len(Differential.divergences)} assignor divergences", flush=True)
    if not args.no_compat:
        from compat_fuzz import run_migration
        run_migration(examples=200, steps=40)
        print("compat.MigrationCoordinator: 200 sequences, invariants held", flush=True)
    print(json.dumps({"seconds": round(time.monotonic() - started), "sequences": sequences,
                      "exchanges": exchanges, "failures": failures, "not_replayable": flaky,
                      "assignment_divergences": len(Differential.divergences)}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

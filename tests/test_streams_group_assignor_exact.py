"""The coordinator's `sticky` assignor places every task where Kafka 4.4's broker does (broker_sticky).

Without a broker: the Java orders it emulates (HashMap iteration for a given initial capacity and for
`computeIfAbsent`, PriorityQueue ties) and assignments that Kafka's own `StickyTaskAssignor` computed for
the same input. With the `kafka_broker`: ordinary sequences sent to the broker and to the coordinator, every
answer and every record compared."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from kprotocol.registry import message_class
from kprotocol.streams_group.broker_sticky import assign
from kprotocol.streams_group.java_order import PriorityQueue, hash_order
from kprotocol.streams_group.member import Member
from kprotocol.streams_group.tasks import TaskSets
from kprotocol.toolchain.maven import JAVA_DIR, kafka_libs, require
from streams_conformance import Twin, topology
from test_streams_group_conformance import check_records, same

HB = message_class("StreamsGroupHeartbeatRequest")
AaBB = ["AaAaAaAa", "AaAaAaBB", "AaAaBBAa", "AaAaBBBB", "AaBBAaAa", "AaBBAaBB", "AaBBBBAa", "AaBBBBBB", "BBAaAaAa"]
# What java/expected-orders/ExpectedOrders.java prints (OpenJDK 17, Kafka 4.4's StickyTaskAssignor), checked by
# test_the_expected_orders_are_what_java_prints: run it again for a new Kafka release or JDK.
EXPECTED_ORDERS = JAVA_DIR / "expected-orders" / "ExpectedOrders.java"
JAVA = {
    "capacity 4, put": ["process-m2-1", "process-m1-2", "process-m1-1", "process-m0-1"],
    "capacity 4, computeIfAbsent": ["process-m1-2", "process-m2-1", "process-m1-1", "process-m0-1"],
    "4 keys in 4, computeIfAbsent": ["process-a", "process-d", "process-c", "process-b"],
    "4 keys in 4 and one again, computeIfAbsent": ["process-d", "process-c", "process-b", "process-a"],
    "4 keys in 4, put": ["process-d", "process-c", "process-b", "process-a"],
    "a chain of 8": ["k0", "k1", "k2", "k3", "k4", *AaBB[:8]],
    "a chain of 9": [*AaBB, "k0", "k1", "k2", "k3", "k4"],
    "priority queue ties": ["a", "g", "b", "g", "b", "f", "b", "f", "d", "e"],
    "least loaded process": {"m0-1": ["0_0", ""], "m1-1": ["0_3", ""], "m2-1": ["0_2", ""], "m1-2": ["0_1", ""]},
    "standbys ranked by offsets": {"a1": ["0_0 0_1", "0_2"], "a2": ["0_3", ""], "b1": ["0_2 1_0", "0_0"],
                                   "c1": ["1_1", "0_1 0_3"]},
    "two standbys over shared processes": {
        "m1": ["0_0 0_1", "0_2 1_3"], "m2": ["1_0 1_1", "1_2 1_4"], "m3": ["1_2", "0_0 1_0 1_4"],
        "m4": ["1_3", "0_1 0_2 1_1"], "m5": ["0_2", "0_0 1_1 1_3"], "m6": ["1_4", "0_1 1_0 1_2"]},
}


@pytest.mark.xdist_group("jvm")
def test_the_expected_orders_are_what_java_prints() -> None:
    """The values below come from Java's own HashMap and PriorityQueue and from Kafka's StickyTaskAssignor."""
    printed = subprocess.run([require("java"), "-cp", str(kafka_libs() / "*"), str(EXPECTED_ORDERS)],
                             capture_output=True, text=True, timeout=600, check=True).stdout
    assert json.loads(printed) == JAVA


# --- the Java orders ----------------------------------------------------------------------------------------

def test_hash_map_of_a_given_initial_capacity() -> None:
    processes = ["process-m0-1", "process-m1-1", "process-m2-1", "process-m1-2"]  # the last two share a bucket
    assert hash_order(processes, 4) == JAVA["capacity 4, put"]
    assert hash_order(processes, 4, compute_if_absent=True) == JAVA["capacity 4, computeIfAbsent"]  # at the head


def test_compute_if_absent_grows_the_table_at_its_next_call() -> None:
    keys = ["process-a", "process-b", "process-c", "process-d"]  # 4 keys in a table of 4: over 3/4 full
    assert hash_order(keys, 4, compute_if_absent=True) == JAVA["4 keys in 4, computeIfAbsent"]
    assert hash_order([*keys, "process-a"], 4, compute_if_absent=True) == \
        JAVA["4 keys in 4 and one again, computeIfAbsent"]  # a call for a key it has doubles it first
    assert hash_order(keys, 4) == JAVA["4 keys in 4, put"]  # put doubles at once


def test_a_small_hash_map_grows_when_a_chain_reaches_nine_keys() -> None:
    others = ["k0", "k1", "k2", "k3", "k4"]  # AaBB: one String.hashCode for all
    assert hash_order([*others, *AaBB[:8]]) == JAVA["a chain of 8"]
    assert hash_order([*others, *AaBB]) == JAVA["a chain of 9"]  # 16 buckets became 32


def test_priority_queue_breaks_ties_as_javas_heap() -> None:
    load = dict.fromkeys("abcdefg", 0)
    queue = PriorityQueue(load.get, load)
    polled = []
    for i in range(10):
        item = queue.poll()
        polled.append(item)
        load[item] += 1 if i % 3 == 0 else 0
        if i % 4 != 3:
            queue.add(item)
    assert polled == JAVA["priority queue ties"]  # not first in, first out
    assert PriorityQueue(len).poll() is None


# --- assignments Kafka's StickyTaskAssignor computed --------------------------------------------------------

def member(member_id: str, process: str, active: str = "", standby: str = "") -> Member:
    return Member(member_id, process_id=process, assigned=TaskSets(tasks(active), tasks(standby)))


def tasks(text: str) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for task in text.split():
        sub, p = task.split("_")
        out.setdefault(sub, set()).add(int(p))
    return {sub: frozenset(parts) for sub, parts in out.items()}


def as_text(targets: dict[str, TaskSets]) -> dict[str, list[str]]:
    return {m: [" ".join(f"{s}_{p}" for s in sorted(role) for p in sorted(role[s])) for role in t[:2]]
            for m, t in targets.items()}


def test_the_least_loaded_process_is_the_head_of_javas_heap() -> None:
    members = [member("m0-1", "process-m0-1", "0_0 0_1 0_2 0_3"),
               *(member(m, f"process-{m}") for m in ("m1-1", "m2-1", "m1-2"))]
    assert as_text(assign(members, {"0": 4}, set(), 0, {})) == JAVA["least loaded process"]


def test_standby_candidates_ranked_by_reported_offsets() -> None:
    members = [member("a1", "P1", "0_0 0_1", "0_2"), member("a2", "P1", "", "0_3"), member("b1", "P2", "0_2 1_0"),
               member("c1", "P3")]
    offsets = {"a1": {("0", 3): 100}, "a2": {("0", 2): 500, ("0", 0): 50}, "b1": {("0", 0): 900, ("0", 1): 900},
               "c1": {("0", 1): 1000, ("0", 3): 10}}
    assert as_text(assign(members, {"0": 4, "1": 2}, {"0"}, 1, offsets)) == JAVA["standbys ranked by offsets"]


def test_two_standbys_over_members_sharing_processes() -> None:
    members = [member("m1", "P1", "0_0 0_1 0_2"), member("m2", "P1", "1_0 1_1"),
               member("m3", "P2", "1_2 1_3 1_4", "0_0"), member("m4", "P2"), member("m5", "P3"), member("m6", "P3")]
    offsets = {"m4": {("0", 1): 7, ("1", 1): 7}, "m5": {("1", 0): 3}, "m6": {("1", 0): 4}}
    assert as_text(assign(members, {"0": 3, "1": 5}, {"0", "1"}, 2, offsets)) == \
        JAVA["two standbys over shared processes"]


# --- against the broker -------------------------------------------------------------------------------------

class Group:
    """Members of one streams group heartbeating at the broker and at the coordinator alike."""

    def __init__(self, broker: Any, subtopologies: Sequence[tuple[int, bool]], standbys: int = 0) -> None:
        """`subtopologies`: (partitions of its source topic, stateful) each."""
        self.group = f"exact-{uuid.uuid4().hex[:8]}"
        self.twin = Twin(broker, self.group, {"streams.num.standby.replicas": str(standbys)})
        specs = []
        for i, (partitions, stateful) in enumerate(subtopologies):
            source = f"{self.group}-in{i}"
            self.twin.create_topic(source, partitions)
            specs.append({"id": str(i), "sources": [source],
                          "changelogs": [f"{self.group}-store{i}-changelog"] if stateful else []})
        self.topology = topology(0, specs)
        self.members: dict[str, dict[str, Any]] = {}  # live member -> the fields it sends every time

    def join(self, member_id: str, process: str | None = None, instance: str | None = None, **fields: Any) -> None:
        self.members[member_id] = {"process_id": process or f"process-{member_id}", "instance_id": instance}
        self.beat(member_id, 0, topology=self.topology, **fields)

    def beat(self, member_id: str, epoch: int | None = None, **fields: Any) -> None:
        same(*self.twin.heartbeat(member_id, epoch, **{**self.members[member_id], **fields}))

    def leave(self, member_id: str, static: bool = False) -> None:
        self.beat(member_id, -2 if static else -1)
        del self.members[member_id]

    def rounds(self, n: int = 2) -> None:
        """Every member heartbeats `n` times, in turn: revoked tasks are released and taken up."""
        for _ in range(n):
            for member_id in list(self.members):
                self.beat(member_id)

    def check(self) -> None:
        same(*self.twin.describe())
        check_records(self.twin)


@pytest.mark.parametrize("subtopologies, standbys, members", [
    ([(4, False)], 0, [("m1", None), ("m2", None), ("m3", None)]),
    ([(8, True), (3, False)], 1, [("a", "p1"), ("b", "p2"), ("c", "p1"), ("d", "p3"), ("e", "p2"), ("f", "p3")]),
    ([(1, True), (6, True), (2, False)], 2, [("x1", "px"), ("y1", "py"), ("x2", "px"), ("z1", "pz"), ("y2", "py")]),
    ([(5, True)], 1, [("solo", None), ("duo", None)]),
], ids=["three-dynamic", "six-in-three-processes", "three-subtopologies-two-standbys", "two-members"])
def test_dynamic_members_join_one_by_one(kafka_broker, subtopologies, standbys, members) -> None:
    g = Group(kafka_broker, subtopologies, standbys)
    for member_id, process in members:
        g.join(member_id, process)   # a new target at once, before the others released anything
        g.rounds(1)
    g.rounds(2)
    g.check()


@pytest.mark.parametrize("standbys", [0, 1, 2])
def test_static_members_join_leave_and_come_back(kafka_broker, standbys) -> None:
    g = Group(kafka_broker, [(6, True), (2, False)], standbys)
    for i, process in enumerate(["pa", "pb", "pa", "pc"]):
        g.join(f"s{i}", process, instance=f"i{i}")
        g.rounds(1)
    g.rounds(2)
    g.beat("s0", rebalance_timeout_ms=45_000)  # recorded, but no new epoch for a static member
    g.leave("s1", static=True)       # -2: it keeps its tasks, its instance id may come back
    g.rounds(1)
    g.join("s1-again", "pb", instance="i1")   # a new member id for the same instance: inherits the assignment
    g.rounds(2)
    g.join("d1", "pb")               # a dynamic member beside them
    g.rounds(2)
    g.leave("s2", static=True)
    g.join("s2", "pc", instance="i2")         # back under its own member id, on another process: a new epoch
    g.rounds(2)
    g.check()


def test_dynamic_members_leave_and_rejoin(kafka_broker) -> None:
    g = Group(kafka_broker, [(7, True), (4, True)], 1)
    for member_id, process in [("m1", "p1"), ("m2", "p2"), ("m3", "p1"), ("m4", "p3")]:
        g.join(member_id, process)
    g.rounds(3)
    g.leave("m2")                     # its tasks go to the others
    g.rounds(2)
    g.join("m2", "p2")                # back with the same member id, owning nothing
    g.rounds(1)
    g.leave("m1")
    g.join("m5", "p1")
    g.rounds(3)
    g.check()


def test_a_members_process_changes(kafka_broker) -> None:
    g = Group(kafka_broker, [(8, True), (3, False)], 1)
    for member_id, process in [("m1", "p1"), ("m2", "p1"), ("m3", "p2"), ("m4", "p3")]:
        g.join(member_id, process)
    g.rounds(3)
    g.members["m2"]["process_id"] = "p2"   # a restart on another host: a new group epoch
    g.rounds(3)
    g.members["m4"]["process_id"] = "p1"
    g.rounds(3)
    g.check()


@pytest.mark.parametrize("standbys", [1, 2])
def test_standby_candidates_ranked_by_reported_task_offsets(kafka_broker, standbys) -> None:
    g = Group(kafka_broker, [(6, True), (3, True)], standbys)
    for member_id, process in [("m1", "p1"), ("m2", "p2"), ("m3", "p3"), ("m4", "p4")]:
        g.join(member_id, process)
    g.rounds(3)
    for i, member_id in enumerate(g.members):     # each has some state of every task, more or less caught up
        offsets = [HB.TaskOffset(subtopology_id=sub, partition=p, offset=(7 * i + 3 * p + len(sub)) % 11 * 100)
                   for sub, count in (("0", 6), ("1", 3)) for p in range(count)]
        g.beat(member_id, task_offsets=offsets, task_end_offsets=[
            HB.TaskOffset(subtopology_id=o.subtopology_id, partition=o.partition, offset=1_000) for o in offsets])
    g.leave("m2")                     # the assignor ranks the candidates for m2's tasks by these offsets
    g.rounds(2)
    g.join("m5", "p5", task_offsets=[HB.TaskOffset(subtopology_id="0", partition=p, offset=10_000) for p in range(6)])
    g.rounds(3)
    g.check()

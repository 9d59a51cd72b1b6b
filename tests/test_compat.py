"""compat: classic Streams members and streams-protocol members in one group (KIP-1071's online
migration), checked on the KIP's worked example and on real SubscriptionInfo of every version."""

from __future__ import annotations

import itertools
import struct
import uuid

import pytest

import kip_example_assignor
from compat.classic import GroupMetadataKey, GroupMetadataValue
from compat.coordinator import MigrationCoordinator
from compat.translate import assigned_tasks, decode_subscription
from kprotocol.registry import message_class
from kprotocol.streams import AssignmentInfo, SubscriptionInfo, TaskId
from kprotocol.streams_group import AssignmentSettings, GroupConfig
from kprotocol.streams_group.records import CoordinatorRecord

HB = message_class("StreamsGroupHeartbeatRequest")
Header = message_class("RequestHeader")
Join, Sync, Beat = (message_class(n) for n in ("JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest"))
Subscription, Assignment = message_class("ConsumerProtocolSubscription"), message_class("ConsumerProtocolAssignment")
PROCESS = {name: uuid.UUID(int=i + 1) for i, name in enumerate("ABC")}
TOPOLOGY = HB.Topology(epoch=0, subtopologies=[HB.Subtopology(
    subtopology_id="0", source_topics=["input"], state_changelog_topics=[HB.TopicInfo(name="app-store-changelog")])])
TOPICS = {"input": 6, "app-store-changelog": 6}
tokens = itertools.count()


def header(api_key: int, version: int) -> object:
    return Header(request_api_key=api_key, request_api_version=version, correlation_id=0, client_id="c")


def ids(text: str) -> list[int]:
    return [int(t.split("_")[1]) for t in text.split()] if text else []


def subscription(name: str, active: str, standby: str, version: int = 11) -> bytes:
    sums = [(TaskId(0, p), -2) for p in ids(active)] + [(TaskId(0, p), 100) for p in ids(standby)]
    info = SubscriptionInfo(version=version, process_id=PROCESS[name], task_offset_sums=tuple(sums),
                            user_end_point=f"{name.lower()}:7070" if version >= 2 else None)
    message = Subscription(topics=["input"], user_data=info.encode(),
                           owned_partitions=[Subscription.TopicPartition(topic="input", partitions=ids(active))])
    return struct.pack(">h", 1) + message.encode(1)


def classic_assignment(active: str, standby: str) -> bytes:
    info = AssignmentInfo(version=11, active_tasks=tuple(TaskId(0, p) for p in ids(active)),
                          standby_tasks=tuple((TaskId(0, p), ()) for p in ids(standby)))
    message = Assignment(assigned_partitions=[Assignment.TopicPartition(topic="input", partitions=ids(active))],
                         user_data=info.encode())
    return struct.pack(">h", 1) + message.encode(1)


def tasks(result) -> dict[str, list[str]]:
    return {role: sorted(f"{s}_{p}" for s, ps in getattr(result, role).items() for p in ps)
            for role in ("active", "standby", "warmup")}


class Example:
    """The KIP's group: A and B classic at generation 23, then C on the streams protocol."""

    def __init__(self) -> None:
        config = GroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0,
                             assignment=AssignmentSettings(assignor="kip_example_assignor:FixedAssignor",
                                                           acceptable_recovery_lag=10))
        self.c = MigrationCoordinator(config, TOPICS, classic_initial_delay_ms=0)
        value = GroupMetadataValue(protocol_type="consumer", generation=23, protocol="stream", leader="A",
                                   current_state_timestamp=0, members=[GroupMetadataValue.MemberMetadata(
                                       member_id=name, client_id=name, client_host="/h", rebalance_timeout=30_000,
                                       session_timeout=30_000, subscription=subscription(name, *owned),
                                       assignment=classic_assignment(*owned))
                                       for name, owned in (("A", ("0_0 0_2 0_4", "0_1 0_3 0_5")),
                                                           ("B", ("0_1 0_3 0_5", "0_0 0_2 0_4")))])
        self.c.replay([CoordinatorRecord(GroupMetadataKey(group="app"), value)])
        self.now, self.generation, self.owned = 0, {"A": 23, "B": 23}, {}
        self.c_epoch, self.c_tasks = 0, None

    def send(self, api_key: int, version: int, request):
        answers, records = self.c.handle(next(tokens), header(api_key, version), request, self.now)
        assert len(answers) == 1
        return answers[0][1]

    def heartbeat(self, name: str) -> int:
        return self.send(12, 4, Beat(group_id="app", generation_id=self.generation[name], member_id=name)).error_code

    def rejoin(self, name: str, active: str, standby: str) -> dict[str, list[str]]:
        """JoinGroup then SyncGroup of a classic member that runs `active` and `standby` now."""
        join = self.send(11, 9, Join(group_id="app", member_id=name, session_timeout_ms=30_000,
                                     rebalance_timeout_ms=30_000, protocol_type="consumer", protocols=[
                                         Join.JoinGroupRequestProtocol(name="stream",
                                                                       metadata=subscription(name, active, standby))]))
        assert join.error_code == 0 and join.leader != name
        self.generation[name] = join.generation_id
        sync = self.send(14, 5, Sync(group_id="app", generation_id=join.generation_id, member_id=name,
                                     protocol_type="consumer", protocol_name="stream"))
        assert sync.error_code == 0
        got = assigned_tasks(sync.assignment)
        return {"active": sorted(f"0_{p}" for p in got.active.get("0", ())),
                "standby": sorted(f"0_{p}" for p in got.standby.get("0", ()))}

    def streams(self, offsets: dict[int, int] | None = None) -> dict[str, list[str]]:
        """C's StreamsGroupHeartbeat (joining first), reporting what it runs."""
        wire = lambda ts: [HB.TaskIds(subtopology_id="0", partitions=ids(" ".join(ts)))] if ts else []  # noqa
        owned = self.c_tasks or {"active": [], "standby": [], "warmup": []}
        request = HB(group_id="app", member_id="C", member_epoch=self.c_epoch, process_id=str(PROCESS["C"]),
                     rebalance_timeout_ms=30_000 if self.c_epoch == 0 else -1,
                     topology=TOPOLOGY if self.c_epoch == 0 else None,
                     active_tasks=wire(owned["active"]), standby_tasks=wire(owned["standby"]),
                     warmup_tasks=wire(owned["warmup"]), task_offsets=None if offsets is None else [
                         HB.TaskOffset(subtopology_id="0", partition=p, offset=o) for p, o in offsets.items()],
                     task_end_offsets=None if offsets is None else [
                         HB.TaskOffset(subtopology_id="0", partition=p, offset=1000) for p in offsets])
        response = self.send(88, 1, request)
        assert response.error_code == 0, response.error_message
        self.c_epoch = response.member_epoch
        if response.active_tasks is not None:
            self.c_tasks = {role: [f"{t.subtopology_id}_{p}" for t in getattr(response, f"{role}_tasks")
                                   for p in t.partitions] for role in ("active", "standby", "warmup")}
        return self.c_tasks


def test_kip_worked_example_step_by_step() -> None:
    kip_example_assignor.TARGETS.clear()
    kip_example_assignor.TARGETS.update({
        str(PROCESS["A"]): {"active": ["0_0", "0_2", "0_3"], "standby": ["0_1", "0_5"]},
        str(PROCESS["B"]): {"active": ["0_1", "0_4", "0_5"], "standby": ["0_2", "0_3"]},
        str(PROCESS["C"]): {"standby": ["0_0", "0_4"], "warmup": ["0_2", "0_5"]}})
    ex = Example()
    # C joins with the streams protocol: the classic group becomes a streams group at generation + 1.
    assert ex.streams() == {"active": [], "standby": ["0_0", "0_4"], "warmup": ["0_2", "0_5"]}
    group = ex.c.streams.group("app")
    assert (group.epoch, ex.c_epoch) == (24, 24)
    describe = ex.c.streams.describe_group(group, message_class("StreamsGroupDescribeResponse"))
    assert {m.member_id: m.is_classic for m in describe.members} == {"A": True, "B": True, "C": False}
    # A and B are told to rejoin; they revoke what moves away, rejoin once more and get the rest.
    assert ex.heartbeat("A") == ex.heartbeat("B") == 27
    a = ex.rejoin("A", "0_0 0_2 0_4", "0_1 0_3 0_5")
    b = ex.rejoin("B", "0_1 0_3 0_5", "0_0 0_2 0_4")
    # First round: actives that move are revoked (A's 0_4, B's 0_3); a standby about to become active
    # stays until then (A's 0_3, B's 0_4), B's active 0_3 turns into its standby in place (Kafka 4.4).
    assert (a, b) == ({"active": ["0_0", "0_2"], "standby": ["0_1", "0_3", "0_5"]},
                      {"active": ["0_1", "0_5"], "standby": ["0_2", "0_3", "0_4"]})
    for _ in range(2):
        a = ex.rejoin("A", " ".join(a["active"]), " ".join(a["standby"]))
        b = ex.rejoin("B", " ".join(b["active"]), " ".join(b["standby"]))
    assert a == {"active": ["0_0", "0_2", "0_3"], "standby": ["0_1", "0_5"]}
    assert b == {"active": ["0_1", "0_4", "0_5"], "standby": ["0_2", "0_3"]}
    assert ex.generation == {"A": 24, "B": 24} and ex.heartbeat("A") == ex.heartbeat("B") == 0
    # C's warm-up 0_2 catches up: a new target (epoch 25) moves 0_2 to C; A revokes it first.
    kip_example_assignor.TARGETS.update({
        str(PROCESS["A"]): {"active": ["0_0", "0_3"], "standby": ["0_1", "0_5"]},
        str(PROCESS["C"]): {"active": ["0_2"], "standby": ["0_0", "0_4"], "warmup": ["0_5"]}})
    ex.streams({2: 995, 5: 10})
    assert group.epoch == 25
    assert ex.heartbeat("A") == 27
    a = ex.rejoin("A", "0_0 0_2 0_3", "0_1 0_5")
    assert (a, ex.generation["A"]) == ({"active": ["0_0", "0_3"], "standby": ["0_1", "0_5"]}, 24)
    a = ex.rejoin("A", "0_0 0_3", "0_1 0_5")
    assert ex.generation["A"] == 25
    assert ex.heartbeat("B") == 27
    assert ex.rejoin("B", "0_1 0_4 0_5", "0_2 0_3") == {"active": ["0_1", "0_4", "0_5"], "standby": ["0_2", "0_3"]}
    assert ex.streams() == {"active": ["0_2"], "standby": ["0_0", "0_4"], "warmup": ["0_5"]}
    assert group.state == "Stable"
    # C leaves: the group is classic again, and A and B rejoin it.
    ex.send(88, 1, HB(group_id="app", member_id="C", member_epoch=-1))
    assert ex.c.streams.group("app") is None and ex.c.classic["app"].state == "PreparingRebalance"
    assert ex.heartbeat("A") == 27


@pytest.mark.parametrize("version", range(1, 12))
def test_subscription_of_every_version_translates(version: int) -> None:
    metadata = subscription("A", "0_1 0_2", "0_3" if version >= 2 else "", version=version)
    decoded = decode_subscription(metadata)
    assert decoded.process_id == str(PROCESS["A"]) and decoded.info.version == version
    assert decoded.user_endpoint == (("a", 7070) if version >= 2 else None)
    assert sorted(decoded.task_offsets) == ([("0", 3)] if version >= 7 else [])  # v1-6 carry no offset sums


def test_classic_group_is_leader_based() -> None:
    """Before any streams-protocol member, the group is a classic one: joins wait for each other, the
    leader gets every member's metadata, and its SyncGroup assignments reach the followers."""
    c = MigrationCoordinator(GroupConfig(), TOPICS, classic_initial_delay_ms=0)

    def join(member: str, token: int, now: int):
        return c.handle(token, header(11, 9), Join(
            group_id="app", member_id=member, session_timeout_ms=10_000, rebalance_timeout_ms=5_000,
            protocol_type="consumer", protocols=[Join.JoinGroupRequestProtocol(
                name="stream", metadata=subscription("A", "", ""))]), now)

    [(_, first)], _ = join("", 1, 0)
    assert first.error_code == 79 and first.member_id  # MEMBER_ID_REQUIRED, as Kafka answers v4+
    answers, _ = join(first.member_id, 2, 0)
    assert [(t, r.leader == first.member_id, len(r.members)) for t, r in answers] == [(2, True, 1)]
    [(_, second)], _ = join("", 3, 10)
    answers, _ = join(second.member_id, 4, 10)
    assert answers == []  # the group now waits for the leader to rejoin
    assert c.handle(5, header(12, 4), Beat(group_id="app", generation_id=1, member_id=first.member_id), 20)[0][0][1]\
        .error_code == 27
    answers, _ = join(first.member_id, 6, 30)
    responses = {t: r for t, r in answers}
    assert sorted(responses) == [4, 6] and responses[6].generation_id == 2 and len(responses[6].members) == 2
    assert responses[4].members == ()
    answers, _ = c.handle(7, header(14, 5), Sync(group_id="app", generation_id=2, member_id=second.member_id), 40)
    assert answers == []  # a follower waits for the leader's assignments
    answers, records = c.handle(8, header(14, 5), Sync(group_id="app", generation_id=2, member_id=first.member_id,
                                                       assignments=[Sync.SyncGroupRequestAssignment(
                                                           member_id=second.member_id, assignment=b"\x00\x01")]), 50)
    assert {t: r.assignment for t, r in answers} == {7: b"\x00\x01", 8: b""}
    assert records[0].to_dict()["value"]["data"]["generation"] == 2
    answers, _, deadline = c.poll(50 + 10_000)
    assert c.classic["app"].members == {} and deadline is None


def test_the_standby_replicas_classic_members_ran_are_counted_at_the_conversion() -> None:
    """The gateway warns when they exceed its streams.num.standby.replicas (a group config under KIP-1071)."""
    kip_example_assignor.TARGETS.clear()
    kip_example_assignor.TARGETS.update({str(PROCESS[p]): {} for p in "ABC"})
    ex = Example()
    assert ex.c.classic_standby_replicas("app") == 0  # still classic
    ex.streams()
    assert ex.c.classic_standby_replicas("app") == 1  # A and B held every task once as a standby


def test_the_conversion_answers_the_classic_members_still_waiting() -> None:
    """A streams-protocol member converting the group while classic followers wait for the leader's SyncGroup
    (or a JoinGroup waits for the others): each waiting request is answered REBALANCE_IN_PROGRESS at once, as
    Kafka completes a converted classic group's join and sync futures, so no follower stalls until its own
    request times out while the streams member takes tasks it may still run. A heartbeat without a topology
    converts nothing."""
    c = MigrationCoordinator(GroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0), TOPICS,
                             classic_initial_delay_ms=0)

    def join(member: str, token: int, name: str, now: int):
        return c.handle(token, header(11, 9), Join(
            group_id="app", member_id=member, session_timeout_ms=10_000, rebalance_timeout_ms=5_000,
            protocol_type="consumer", protocols=[Join.JoinGroupRequestProtocol(
                name="stream", metadata=subscription(name, "", ""))]), now)

    [(_, a)], _ = join("", 1, "A", 0)
    join(a.member_id, 2, "A", 0)
    [(_, b)], _ = join("", 3, "B", 0)
    assert join(b.member_id, 4, "B", 0)[0] == []  # B waits for A to rejoin
    answers, _ = join(a.member_id, 5, "A", 0)
    generation = dict(answers)[5].generation_id
    assert c.handle(6, header(14, 5), Sync(group_id="app", generation_id=generation, member_id=b.member_id), 10)[0] \
        == []  # B's SyncGroup waits for the leader's assignments

    no_topology = HB(group_id="app", member_id="C", member_epoch=0, process_id=str(PROCESS["C"]),
                     rebalance_timeout_ms=30_000, active_tasks=[], standby_tasks=[], warmup_tasks=[])
    [(_, refused)], _ = c.handle(7, header(88, 1), no_topology, 20)
    assert refused.error_code != 0 and "app" in c.classic  # refused, and the classic group stays as it was

    answers, _ = c.handle(8, header(88, 1), no_topology.replace(topology=TOPOLOGY), 30)
    by_token = dict(answers)
    assert by_token[8].error_code == 0 and c.streams.group("app") is not None
    assert by_token[6].error_code == 27  # REBALANCE_IN_PROGRESS: B joins again, as a member of the streams group
    assert sorted(by_token) == [6, 8]

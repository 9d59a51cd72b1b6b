"""Classic members of a streams group reach their target whatever happens around them.

Clients are modelled as Kafka's behave: a classic Streams member (cooperative) heartbeats, rejoins when
told to (REBALANCE_IN_PROGRESS) and by itself after giving up partitions, reports the partitions it
owns and the tasks it keeps state for, and runs what its SyncGroup assignment says; a streams-protocol
member heartbeats with what it runs and takes what it is given. Hypothesis draws the events (members
joining, leaving, crashing, warm-ups catching up, the standby count staying or not); then every live
member heartbeats once per round and the group must settle: Stable, every member holding exactly
its target, every task active exactly once. All along no task is active on two live clients.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from compat.coordinator import MigrationCoordinator
from compat.translate import assigned_tasks
from kprotocol.registry import message_class
from kprotocol.streams import AssignmentInfo, SubscriptionInfo, TaskId
from kprotocol.streams_group import GroupConfig

HB = message_class("StreamsGroupHeartbeatRequest")
Header = message_class("RequestHeader")
Join, Sync, Beat, Leave = (message_class(n) for n in ("JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest",
                                                      "LeaveGroupRequest"))
Subscription, Assignment = message_class("ConsumerProtocolSubscription"), message_class("ConsumerProtocolAssignment")
PARTITIONS = 6
TOPOLOGY = HB.Topology(epoch=0, subtopologies=[HB.Subtopology(
    subtopology_id="0", source_topics=["input"], state_changelog_topics=[HB.TopicInfo(name="app-store-changelog")])])
TOPICS = {"input": PARTITIONS, "app-store-changelog": PARTITIONS}
ROUND_MS = 500
tokens = itertools.count()


def header(api_key: int, version: int) -> object:
    return Header(request_api_key=api_key, request_api_version=version, correlation_id=0, client_id="c")


@dataclass
class Client:
    name: str
    classic: bool
    process: uuid.UUID = field(default_factory=uuid.uuid4)
    member_id: str = ""
    epoch: int = 0
    active: set[int] = field(default_factory=set)
    standby: set[int] = field(default_factory=set)
    warmup: set[int] = field(default_factory=set)
    rejoin: bool = True
    caught_up: bool = False  # its standbys and warm-ups report a small lag
    version: int = 11  # its SubscriptionInfo version (a classic member)
    eager: bool = False  # gives up every partition before it rejoins (Streams before 2.4, or upgrade.from)
    hosts: dict[str, list[int]] = field(default_factory=dict)  # the host map its last assignment carried

    def offsets(self) -> dict[int, int]:
        lag = 0 if self.caught_up else 5_000
        return {p: 10_000 - lag for p in self.standby | self.warmup}


class Group:
    def __init__(self, standbys: int) -> None:
        config = GroupConfig.from_kafka({"streams.num.standby.replicas": str(standbys),
                                         "streams.initial.rebalance.delay.ms": "0",
                                         "streams.assignor.name": "highly_available",
                                         "streams.session.timeout.ms": "10000"},
                                        GroupConfig(assignment_interval_ms=0))
        self.c = MigrationCoordinator(config, TOPICS, classic_initial_delay_ms=0)
        self.now = 0
        self.clients: dict[str, Client] = {}

    def send(self, api_key: int, version: int, request):
        answers, _ = self.c.handle(next(tokens), header(api_key, version), request, self.now)
        assert len(answers) == 1, answers
        self.check_no_double_active()
        return answers[0][1]

    def check_no_double_active(self) -> None:
        seen: dict[int, str] = {}
        for c in self.clients.values():
            for p in c.active:
                assert p not in seen, f"task 0_{p} active on {seen[p]} and {c.name}"
                seen[p] = c.name

    # --- a classic Streams member (cooperative) ---------------------------------------------

    def classic_turn(self, c: Client) -> None:
        if not c.rejoin and c.member_id:
            error = self.send(12, 4, Beat(group_id="app", generation_id=c.epoch, member_id=c.member_id)).error_code
            if error == 27:
                c.rejoin = True
            elif error in (22, 25):  # fenced: its tasks are lost, it joins afresh
                c.member_id, c.active, c.standby, c.rejoin = "", set(), set(), True
            else:
                assert error == 0, error
        if c.rejoin:
            self.classic_rejoin(c)

    def classic_rejoin(self, c: Client) -> None:
        if c.eager:
            c.active = set()
            self.check_no_double_active()
        sums = [(TaskId(0, p), -2) for p in sorted(c.active)] + [(TaskId(0, p), o) for p, o in c.offsets().items()]
        info = SubscriptionInfo(version=c.version, latest_supported_version=c.version, process_id=c.process,
                                task_offset_sums=tuple(sums), user_end_point=f"{c.name}:7070" if c.version >= 2 else None)
        consumer_version = 0 if c.eager else 3
        metadata = struct.pack(">h", consumer_version) + Subscription(
            topics=["input"], user_data=info.encode(),
            owned_partitions=[Subscription.TopicPartition(topic="input", partitions=sorted(c.active))]
        ).encode(consumer_version)
        while True:
            join = self.send(11, 9, Join(group_id="app", member_id=c.member_id, session_timeout_ms=10_000,
                                         rebalance_timeout_ms=30_000, protocol_type="consumer", protocols=[
                                             Join.JoinGroupRequestProtocol(name="stream", metadata=metadata)]))
            if join.error_code == 79:
                c.member_id = join.member_id
                continue
            break
        assert join.error_code == 0, join
        c.epoch = join.generation_id
        sync = self.send(14, 5, Sync(group_id="app", generation_id=c.epoch, member_id=c.member_id,
                                     protocol_type="consumer", protocol_name="stream"))
        assert sync.error_code == 0, sync
        got = assigned_tasks(sync.assignment)
        info = AssignmentInfo.decode(Assignment.decode(sync.assignment[2:], 3 if not c.eager else 0).user_data)
        c.hosts = {f"{h.host}:{h.port}": sorted(tp.partition for tp in tps) for h, tps in info.partitions_by_host}
        active, standby = set(got.active.get("0", ())), set(got.standby.get("0", ()))
        c.rejoin = bool(c.active - active)  # a cooperative member rejoins after giving up partitions
        c.active, c.standby = active, standby
        self.check_no_double_active()

    # --- a streams-protocol member -------------------------------------------------------------

    def streams_turn(self, c: Client) -> None:
        wire = lambda ps: [HB.TaskIds(subtopology_id="0", partitions=sorted(ps))] if ps else []  # noqa
        offsets = c.offsets()
        joining = c.epoch == 0
        response = self.send(88, 1, HB(
            group_id="app", member_id=c.member_id or str(uuid.uuid4()), member_epoch=c.epoch,
            process_id=str(c.process), rebalance_timeout_ms=30_000 if joining else -1,
            topology=TOPOLOGY if joining else None, active_tasks=wire(c.active), standby_tasks=wire(c.standby),
            warmup_tasks=wire(c.warmup),
            task_offsets=[HB.TaskOffset(subtopology_id="0", partition=p, offset=o) for p, o in offsets.items()],
            task_end_offsets=[HB.TaskOffset(subtopology_id="0", partition=p, offset=10_000) for p in offsets]))
        assert response.error_code == 0, response.error_message
        c.member_id, c.epoch = response.member_id, response.member_epoch
        if response.active_tasks is not None:
            c.active, c.standby, c.warmup = ({p for t in getattr(response, f"{r}_tasks") for p in t.partitions}
                                             for r in ("active", "standby", "warmup"))
        self.check_no_double_active()

    # --- events and rounds -----------------------------------------------------------------------

    def turn(self, c: Client) -> None:
        (self.classic_turn if c.classic else self.streams_turn)(c)

    def tick(self) -> None:
        self.now += ROUND_MS
        self.c.poll(self.now)

    def leave(self, c: Client) -> None:
        if c.classic:
            self.send(13, 5, Leave(group_id="app", members=[Leave.MemberIdentity(member_id=c.member_id)]))
        else:
            self.send(88, 1, HB(group_id="app", member_id=c.member_id, member_epoch=-1))
        del self.clients[c.name]

    def crash(self, c: Client) -> None:
        del self.clients[c.name]  # it holds nothing any more; the coordinator finds out at its session time-out

    def settled(self) -> list[str]:
        group = self.c.streams.group("app")
        if group is None:
            return ["no streams group"]
        problems = [] if group.state == "Stable" else [f"state {group.state}"]
        for c in self.clients.values():
            member = group.members.get(c.member_id)
            target = group.target(c.member_id)
            held = {"active": c.active, "standby": c.standby | (c.warmup if not c.classic else set())}
            wanted = {"active": set(target.active.get("0", ())),
                      "standby": set(target.standby.get("0", ())) | set(target.warmup.get("0", ()))}
            if member is None or member.member_epoch != group.assignment_epoch or held != wanted:
                problems.append(f"{c.name} holds {held}, target {wanted} at epoch {group.assignment_epoch}")
        endpoints = {f"{c.name}:7070": sorted(c.active) for c in self.clients.values() if c.classic and c.version >= 2}
        for c in self.clients.values():
            if c.classic and c.version >= 2 and c.hosts != endpoints:
                problems.append(f"{c.name} was told hosts {c.hosts}, they are {endpoints}")
        active = sorted(p for c in self.clients.values() for p in c.active)
        if active != list(range(PARTITIONS)):
            problems.append(f"active tasks held: {active}")
        return problems


EVENTS = st.lists(st.sampled_from(["classic", "old-classic", "streams", "leave", "crash", "catch-up", "round"]),
                  min_size=3,
                  max_size=14)


@given(events=EVENTS, standbys=st.integers(0, 2), seed=st.randoms(use_true_random=False))
def test_every_member_reaches_its_target(events: list[str], standbys: int, seed) -> None:
    g = Group(standbys)
    names = (f"{k}{i}" for i in itertools.count() for k in "m")
    first = Client(next(names), classic=False)  # the group is a streams group from its first member on
    g.clients[first.name] = first
    g.turn(first)
    for event in events:
        live = list(g.clients.values())
        if event in ("classic", "streams") and len(live) < 5:
            client = Client(next(names), classic=event == "classic")
            same_kind = [c for c in live if c.classic == client.classic]
            if same_kind and seed.random() < 0.3:  # another stream thread of a running instance
                client.process = seed.choice(same_kind).process
            g.clients[client.name] = client
            g.turn(client)
        elif event == "old-classic" and len(live) < 5:
            client = Client(next(names), classic=True, version=seed.randint(1, 10), eager=seed.random() < 0.5)
            g.clients[client.name] = client
            g.turn(client)
        elif event in ("leave", "crash") and len(live) > 1:
            victim = seed.choice(live[1:])  # the first stays: the group is a streams group throughout
            (g.leave if event == "leave" else g.crash)(victim)
            if event == "crash":
                for _ in range(10_000 // ROUND_MS + 2):  # its session times out while the others carry on
                    g.tick()
                    for c in list(g.clients.values()):
                        g.turn(c)
        elif event == "catch-up" and live:
            seed.choice(live).caught_up = True
        else:
            g.tick()
            for c in list(g.clients.values()):
                g.turn(c)
    for c in g.clients.values():
        c.caught_up = True
    for _ in range(40):  # every live member heartbeats once per round
        g.tick()
        for c in list(g.clients.values()):
            g.turn(c)
        if g.settled():
            continue
        # settled: nobody is asked to rejoin any more, and it stays so
        for c in g.clients.values():
            g.turn(c)
            assert not (c.classic and c.rejoin), f"{c.name} asked to rejoin a settled group"
        assert not g.settled()
        return
    raise AssertionError(f"not settled after 40 rounds: {g.settled()}")


def test_commits_of_a_classic_member_moving_to_a_new_epoch() -> None:
    """A classic member hears of its new generation only from the SyncGroup after its JoinGroup: its
    commits at the previous epoch are accepted for the partitions it still owns since then; anything
    else is refused as the broker refuses it."""
    g = Group(standbys=0)
    streams, classic = Client("s", classic=False), Client("c", classic=True)
    for c in (streams, classic):
        g.clients[c.name] = c
        for _ in range(6):
            g.tick()
            for x in g.clients.values():
                g.turn(x)
    group = g.c.streams.group("app")
    member = group.members[classic.member_id]
    assert member.member_epoch == classic.epoch and classic.active

    def commit(epoch: int, partitions: list[int], member_id: str = classic.member_id, transactional: bool = False,
               topic: str = "input") -> int:
        return g.c.validate_commit("app", member_id, epoch, None, transactional, 9,
                                   [(topic, p) for p in partitions])

    owned, other = sorted(classic.active), sorted(set(range(PARTITIONS)) - classic.active)
    assert commit(classic.epoch, owned) == 0
    previous = classic.epoch
    g.clients["n"] = Client("n", classic=False)  # a new member: the classic one rejoins at a new epoch
    for _ in range(6):
        g.tick()
        for x in g.clients.values():
            g.turn(x)
    member = group.members[classic.member_id]
    assert member.member_epoch > previous and member.previous_member_epoch == previous
    kept = sorted(set(owned) & classic.active)
    assert kept and commit(previous, kept, transactional=True) == 0 and commit(previous, kept) == 0
    assert commit(previous, other) == 22  # ILLEGAL_GENERATION: never its partitions
    assert commit(previous - 1, kept) == 22
    assert commit(member.member_epoch, kept) == 0
    assert commit(previous, kept, topic="unknown-topic") == 22
    assert commit(-1, kept, member_id="") == 25  # UNKNOWN_MEMBER_ID: an admin commit to a group with members
    assert commit(-1, kept, member_id="", transactional=True) == 0  # an old transactional producer
    assert commit(member.member_epoch, kept, member_id="nobody") == 25


def test_commits_to_a_classic_group_follow_kafkas_classic_rules() -> None:
    from compat.classic import COMPLETING, STABLE, ClassicGroup, ClassicMember

    group = ClassicGroup("app", generation=4, state=STABLE, protocol_type="consumer")
    c = MigrationCoordinator(GroupConfig())
    c.classic["app"] = group

    def commit(member_id: str, generation: int, transactional: bool = False, instance: str | None = None) -> int:
        return c.validate_commit("app", member_id, generation, instance, transactional, 8, [("input", 0)])

    assert commit("", -1) == 0  # empty: an admin may commit
    group.members["m"] = ClassicMember("m", "i", "c", "h", 10_000, 10_000, "consumer", [("stream", b"")])
    assert (commit("m", 4), commit("m", 3), commit("x", 4), commit("", -1), commit("", -1, True)) == (0, 22, 25, 25, 0)
    assert (commit("m", 4, instance="i"), commit("x", 4, instance="i"), commit("m", 4, instance="j")) == (0, 82, 25)
    group.state = COMPLETING
    assert (commit("m", 4), commit("m", 4, True)) == (27, 0)  # REBALANCE_IN_PROGRESS, not for transactions

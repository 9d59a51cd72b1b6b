"""Random member behaviour against the streams-group coordinator: it always converges, never lets two
processes run one active task, and a coordinator replayed from its records equals the live one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kprotocol.registry import message_class
from kprotocol.streams_group import GroupConfig, StreamsGroupCoordinator, TaskSets
from kprotocol.streams_group.assignment import AssignmentSettings

HB = message_class("StreamsGroupHeartbeatRequest")
HEADER = message_class("RequestHeader")(request_api_key=88, request_api_version=1, correlation_id=0, client_id="c")
GROUP = "app"
TOPOLOGY = HB.Topology(epoch=0, subtopologies=[
    HB.Subtopology(subtopology_id="0", source_topics=["in"],
                   state_changelog_topics=[HB.TopicInfo(name="app-store-changelog")]),
    HB.Subtopology(subtopology_id="1", source_topics=["other"])])
TOPICS = {"in": 6, "other": 3, "app-store-changelog": 6}
MEMBERS = [f"m{i}" for i in range(5)]
EVENTS = st.lists(st.tuples(st.sampled_from(["join", "heartbeat", "slow", "leave", "crash", "tick"]),
                            st.sampled_from(MEMBERS)), min_size=1, max_size=40)


class Client:
    """A member that obeys its assignments (a slow one keeps reporting its old tasks for a heartbeat and
    takes up the assignment it received at the next one, as a client still revoking does)."""

    def __init__(self, member_id: str, process: str) -> None:
        self.member_id, self.process, self.epoch, self.owned = member_id, process, None, TaskSets()
        self.received: TaskSets | None = None  # the last assignment the coordinator sent, not yet taken up

    def request(self, *, join: bool = False, leave: bool = False):
        wire = lambda tasks: [HB.TaskIds(subtopology_id=s, partitions=sorted(p)) for s, p in tasks.items()]  # noqa
        if join:
            return HB(group_id=GROUP, member_id=self.member_id, member_epoch=0, rebalance_timeout_ms=5000,
                      process_id=self.process, topology=TOPOLOGY, active_tasks=[], standby_tasks=[], warmup_tasks=[])
        return HB(group_id=GROUP, member_id=self.member_id, member_epoch=-1 if leave else self.epoch,
                  active_tasks=wire(self.owned.active), standby_tasks=wire(self.owned.standby),
                  warmup_tasks=wire(self.owned.warmup))


class World:
    def __init__(self, standbys: int) -> None:
        config = GroupConfig(initial_rebalance_delay_ms=0, session_timeout_ms=10_000,
                             assignment=AssignmentSettings(num_standby_replicas=standbys))
        self.coordinator = StreamsGroupCoordinator(config, topics=TOPICS)
        self.now, self.records = 0, []
        self.clients: dict[str, Client] = {}

    def send(self, client: Client, request, apply: bool = True):
        self.records += self.coordinator.poll(self.now)[0]
        response, records = self.coordinator.handle(HEADER, request, self.now)
        self.records += records
        if request.member_epoch == -1 or response.error_code:
            self.clients.pop(client.member_id, None)  # left, or fenced: it drops its tasks and is gone
            return response
        client.epoch = response.member_epoch
        if response.active_tasks is not None:  # the coordinator sends an assignment only when it changes
            client.received = TaskSets.from_wire(response.active_tasks, response.standby_tasks, response.warmup_tasks)
        if apply and client.received is not None:
            client.owned, client.received = client.received, None
        return response

    def step(self, action: str, member_id: str) -> None:
        self.now += 100
        client = self.clients.get(member_id)
        if action == "join" and client is None:
            client = self.clients[member_id] = Client(member_id, f"p{int(member_id[1:]) % 3}")
            self.send(client, client.request(join=True))
        elif client is not None and action in ("heartbeat", "slow"):
            self.send(client, client.request(), apply=action == "heartbeat")
        elif client is not None and action == "leave":
            self.send(client, client.request(leave=True))
        elif client is not None and action == "crash":
            del self.clients[member_id]  # stops heartbeating; its session expires
        elif action == "tick":
            self.now += 3_000
            self.records += self.coordinator.poll(self.now)[0]
        self.check_exclusive()

    def check_exclusive(self) -> None:
        """No active task is run by two members of different processes. Members are the clients the
        coordinator still has: one it fenced (session or rebalance time-out) learns it at its next
        heartbeat and is then gone, an old-epoch zombie that the protocol's time-outs bound."""
        group = self.coordinator.group(GROUP)
        members = group.members if group is not None else {}
        runner: dict[tuple[str, int], str] = {}
        for client in self.clients.values():
            if client.member_id not in members:
                continue
            for sub, parts in client.owned.active.items():
                for p in parts:
                    other = runner.setdefault((sub, p), client.process)
                    assert other == client.process, f"task {sub}_{p} active on {other} and {client.process}"

    def settle(self) -> None:
        """Every live client heartbeats each second for 40 s: crashed members time out meanwhile."""
        for _ in range(40):
            self.now += 1_000
            for client in list(self.clients.values()):
                self.send(client, client.request())
            self.check_exclusive()


@settings(max_examples=60)
@given(EVENTS, st.integers(0, 1))
def test_random_members_converge_and_replay(events, standbys) -> None:
    world = World(standbys)
    for action, member in events:
        world.step(action, member)
    world.settle()
    group = world.coordinator.group(GROUP)
    if group is None:
        return
    if world.clients:
        assert group.state == "Stable"
        actives = [(s, p) for c in world.clients.values() for s, ps in c.owned.active.items() for p in ps]
        assert sorted(actives) == sorted((s, p) for s, n in (("0", 6), ("1", 3)) for p in range(n))
        for c in world.clients.values():
            assert c.owned == group.target(c.member_id) == group.members[c.member_id].assigned
    replayed = StreamsGroupCoordinator.from_records([r.encode() for r in world.records])
    assert replayed.group(GROUP).hard_state() == group.hard_state()


def test_restarted_coordinator_answers_like_the_live_one() -> None:
    """Restarted mid-rebalance from its records, the coordinator answers every next heartbeat as the live one."""
    world = World(1)
    for member in MEMBERS[:4]:
        world.step("join", member)
    world.settle()
    world.step("join", MEMBERS[4])
    world.step("slow", MEMBERS[0])
    restarted = StreamsGroupCoordinator.from_records([r.encode() for r in world.records], now_ms=world.now,
                                                     config=world.coordinator.config, topics=TOPICS)
    group = world.coordinator.group(GROUP)
    assert group.state == "Reconciling"
    for _ in range(8):
        world.now += 1_000
        for client in list(world.clients.values()):
            request = client.request()
            polled = restarted.poll(world.now)[0]
            again, again_records = restarted.handle(HEADER, request, world.now)
            before = len(world.records)
            assert again == world.send(client, request)
            assert [r.encode() for r in polled + again_records] == [r.encode() for r in world.records[before:]]
    assert restarted.group(GROUP).hard_state() == group.hard_state()
    assert group.state == "Stable"

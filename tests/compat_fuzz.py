"""`compat.MigrationCoordinator` under random sequences: classic Streams members (of every userdata
version, eager or cooperative) and streams-protocol members in one group. There is no broker to
compare with: the invariants are checked instead, after every step:

- no task is active on two live clients, nor on two members of the coordinator's group;
- the records the coordinator wrote, replayed into a new coordinator, give the live state;
- at the end, with every member heartbeating, the group settles (Stable, everyone at its target).

The clients are the convergence model of tests/test_compat_convergence.py (Kafka's client behaviour).
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, \
    run_state_machine_as_test
from hypothesis import strategies as st

from compat.coordinator import MigrationCoordinator
from test_compat_convergence import ROUND_MS, Client, Group, header, tokens


class RecordingGroup(Group):
    """The convergence model's group, keeping every record the coordinator writes."""

    def __init__(self, standbys: int) -> None:
        super().__init__(standbys)
        self.records: list[Any] = []

    def send(self, api_key: int, version: int, request: Any) -> Any:
        answers, records = self.c.handle(next(tokens), header(api_key, version), request, self.now)
        self.records += records
        assert len(answers) == 1, answers
        self.check_no_double_active()
        return answers[0][1]

    def tick(self) -> None:
        self.now += ROUND_MS
        _, records, _ = self.c.poll(self.now)
        self.records += records


class MigrationMachine(RuleBasedStateMachine):
    @initialize(standbys=st.integers(0, 2))
    def start(self, standbys: int) -> None:
        self.g = RecordingGroup(standbys)
        self.names = (f"m{i}" for i in itertools.count())
        first = Client(next(self.names), classic=False)  # the group is a streams group from its first member on
        self.g.clients[first.name] = first
        self.g.turn(first)

    @precondition(lambda self: len(self.g.clients) < 5)
    @rule(classic=st.booleans(), old=st.booleans(), version=st.integers(1, 10), eager=st.booleans(),
          same_process=st.booleans())
    def add(self, classic: bool, old: bool, version: int, eager: bool, same_process: bool) -> None:
        client = Client(next(self.names), classic=classic)
        if classic and old:
            client.version, client.eager = version, eager
        same_kind = [c for c in self.g.clients.values() if c.classic == classic]
        if same_kind and same_process:  # another stream thread of a running instance
            client.process = same_kind[0].process
        self.g.clients[client.name] = client
        self.g.turn(client)

    @precondition(lambda self: len(self.g.clients) > 1)
    @rule(data=st.data(), crash=st.booleans())
    def leave(self, data: Any, crash: bool) -> None:
        victim = data.draw(st.sampled_from(list(self.g.clients.values())[1:]))
        if crash:
            self.g.crash(victim)
            for _ in range(10_000 // ROUND_MS + 2):  # its session times out while the others carry on
                self.round()
        else:
            self.g.leave(victim)

    @rule(data=st.data())
    def catch_up(self, data: Any) -> None:
        data.draw(st.sampled_from(list(self.g.clients.values()))).caught_up = True

    @rule()
    def round(self) -> None:
        self.g.tick()
        for c in list(self.g.clients.values()):
            self.g.turn(c)

    @rule(data=st.data())
    def one_turn(self, data: Any) -> None:
        self.g.turn(data.draw(st.sampled_from(list(self.g.clients.values()))))

    @invariant()
    def one_active_member_per_task(self) -> None:
        group = self.g.c.streams.group("app")
        if group is None:
            return
        seen: dict[tuple[str, int], str] = {}
        for m in group.members.values():
            for tasks in (m.assigned.active, m.pending_revocation.active):
                for sub, parts in tasks.items():
                    for p in parts:
                        assert (sub, p) not in seen, f"task {sub}_{p} active at {seen[(sub, p)]} and {m.member_id}"
                        seen[(sub, p)] = m.member_id

    @invariant()
    def records_replay_to_the_live_state(self) -> None:
        replayed = MigrationCoordinator(self.g.c.streams.config, dict(self.g.c.streams.topics))
        replayed.replay(self.g.records, self.g.now)
        live = {g: x.hard_state() for g, x in self.g.c.streams.groups.items() if x.exists}
        again = {g: x.hard_state() for g, x in replayed.streams.groups.items() if x.exists}
        assert again == live, "the records do not replay to the live streams groups"
        assert set(replayed.classic) == set(self.g.c.classic), "the records do not replay to the live classic groups"

    def teardown(self) -> None:
        if not hasattr(self, "g"):
            return
        for c in self.g.clients.values():
            c.caught_up = True
        for _ in range(40):  # every live member heartbeats once per round
            self.round()
            if not self.g.settled():
                return
        raise AssertionError(f"not settled after 40 rounds: {self.g.settled()}")


def run_migration(examples: int, steps: int) -> None:
    from coordinator_fuzz import fuzz_settings

    run_state_machine_as_test(MigrationMachine, settings=fuzz_settings(examples, steps))

"""No managed group waits for another (issue 35 item 2, issue 33 finding 5): a state write that stalls, or a
broker that stops answering, delays only what needs it; concurrent state writes go out as one append, answered
only once durable, and roll every group of a failed append back; timers fire on time from one heap of
deadlines. ManagedGroups runs in process on its own event loop against the real broker; a member of another
group heartbeats throughout and its answer times are measured."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import threading
import time
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any

import pytest

from compat.classic import ClassicConfig
from compat.coordinator import MigrationCoordinator
from compat.gateway.group_commit import GroupCommit
from compat.gateway.managed import ManagedGroups
from compat.gateway.state import StateLog
from compat.gateway.timers import Deadlines, now_ms
from compat.gateway.upstream import Upstream
from test_gateway_hostile import GatewayProcess, GoodClient
from kprotocol.connection import Connection
from kprotocol.records import read_logs
from kprotocol.registry import message_class
from kprotocol.streams_group.records import CoordinatorRecord
from kprotocol.toolchain import KafkaBroker

Join, Sync, Beat = (message_class(n) for n in ("JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest"))
Commit = message_class("OffsetCommitRequest")
HEADER = message_class("RequestHeader")
OK, COORDINATOR_NOT_AVAILABLE, MEMBER_ID_REQUIRED = 0, 15, 79


def header(api_key: int, version: int) -> object:
    return HEADER(request_api_key=api_key, request_api_version=version, correlation_id=1, client_id="c")


class GatedLog(StateLog):
    """A state log whose appends wait for `gate` (a stalled disk) and fail with ENOSPC while `full`; it
    remembers each append's groups and which groups' records are durable (fsynced)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate, self.full = threading.Event(), False
        self.gate.set()
        self.batches: list[list[str]] = []
        self.durable: set[str] = set()

    def append(self, records: list[CoordinatorRecord]) -> None:
        groups = sorted({r.group_id for r in records})
        self.batches.append(groups)
        self.gate.wait(30)
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().append(records)
        self.durable.update(groups)


class Managed:
    """ManagedGroups on its own event loop against the real broker."""

    def __init__(self, broker: KafkaBroker, groups: list[str], state: StateLog | None, initial_delay_ms: int = 0,
                 **options: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        coordinator = MigrationCoordinator(classic_initial_delay_ms=initial_delay_ms,
                                           classic_config=ClassicConfig(min_session_timeout_ms=100))
        self.managed = ManagedGroups(groups, coordinator, Upstream(("127.0.0.1", broker.port)), state,
                                     lambda: (1, "127.0.0.1", 1), **options)
        self.run(self.managed.start())

    def run(self, coroutine: object, timeout: float = 60) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)  # type: ignore[arg-type]

    async def call(self, api_key: int, version: int, request: object) -> object:
        return await self.managed(header(api_key, version), request, "/127.0.0.1")  # type: ignore[misc]

    def send(self, api_key: int, version: int, request: object) -> object:
        return asyncio.run_coroutine_threadsafe(self.call(api_key, version, request), self.loop)

    async def joined(self, group: str, session_ms: int = 10_000) -> tuple[str, int]:
        """A member of `group` through its JoinGroup (v5: the member id first), before its SyncGroup."""
        return (await self.join(group, session_ms))[:2]

    async def join(self, group: str, session_ms: int = 10_000) -> tuple[str, int, str]:
        """(member id, generation, leader) of a member of `group` through its JoinGroup (v5: the member id first)."""
        def join(member: str) -> object:
            return Join(group_id=group, member_id=member, session_timeout_ms=session_ms, rebalance_timeout_ms=10_000,
                        protocol_type="consumer", protocols=[Join.JoinGroupRequestProtocol(name="range", metadata=b"m")])
        first = await self.call(11, 5, join(""))
        assert first.error_code == MEMBER_ID_REQUIRED
        answer = await self.call(11, 5, join(first.member_id))
        assert answer.error_code == OK, answer
        return answer.member_id, answer.generation_id, answer.leader

    async def stable(self, group: str, session_ms: int = 10_000) -> tuple[str, int]:
        member, generation = await self.joined(group, session_ms)
        synced = await self.call(14, 3, sync(group, member, generation))
        assert synced.error_code == OK and synced.assignment == b"a"
        return member, generation

    def close(self) -> None:
        self.run(self.managed.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def gathered(coroutines: Iterable[Awaitable[Any]]) -> list[Any]:
    return await asyncio.gather(*coroutines)


def sync(group: str, member: str, generation: int) -> object:
    return Sync(group_id=group, generation_id=generation, member_id=member,
                assignments=[Sync.SyncGroupRequestAssignment(member_id=member, assignment=b"a")])


class Heartbeats:
    """A member of `group` heartbeating every 50 ms on the gateway's loop; the longest answer time and errors."""

    def __init__(self, managed: Managed, group: str, member: str, generation: int) -> None:
        self.managed, self.request = managed, Beat(group_id=group, generation_id=generation, member_id=member)
        self.times: list[float] = []
        self.errors: list[int] = []
        self.stopping = False
        self.future = asyncio.run_coroutine_threadsafe(self._run(), managed.loop)

    async def _run(self) -> None:
        while not self.stopping:
            started = time.monotonic()
            answer = await self.managed.call(12, 4, self.request)
            self.times.append(time.monotonic() - started)
            if answer.error_code:
                self.errors.append(answer.error_code)
            await asyncio.sleep(0.05)

    def stop(self) -> float:
        self.stopping = True
        self.future.result(10)
        return max(self.times)


def test_a_stalled_state_write_of_one_group_delays_no_other_groups_heartbeats(kafka_broker: KafkaBroker,
                                                                              tmp_path: Path) -> None:
    state = GatedLog(tmp_path)
    managed = Managed(kafka_broker, ["good", "slow"], state, write_timeout_s=2.0)
    try:
        beats = Heartbeats(managed, "good", *managed.run(managed.stable("good")))
        member, generation = managed.run(managed.joined("slow"))
        written = len(state.load())
        state.gate.clear()  # the disk stalls
        started = time.monotonic()
        answer = managed.send(14, 3, sync("slow", member, generation)).result(20)
        waited = time.monotonic() - started
        assert answer.error_code == COORDINATOR_NOT_AVAILABLE and 1.9 < waited < 5  # the write's time-out
        assert managed.managed.coordinator.classic["slow"].state == "CompletingRebalance"  # rolled back
        time.sleep(0.5)
        longest = beats.stop()
        assert beats.errors == [] and len(beats.times) > 20
        assert longest < 0.5, f"a heartbeat of another group waited {longest:.2f} s for the stalled write"
        state.gate.set()  # the stalled write completes late: cut back, as its writer was told it failed
        again = managed.send(14, 3, sync("slow", member, generation)).result(20)
        assert again.error_code == OK and again.assignment == b"a"
        assert len(state.load()) == written + 1  # the late write is gone, the retried one is there
    finally:
        state.gate.set()
        managed.close()


def test_a_paused_broker_freezes_no_group(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """Issue 33 finding 5: with the broker SIGSTOPped, a JoinGroup (its topic refresh) and an OffsetCommit
    (forwarded upstream) of other groups froze every group's heartbeats. Now they wait at most their
    time-out, answer COORDINATOR_NOT_AVAILABLE where the broker is needed, and the heartbeats go on."""
    managed = Managed(kafka_broker, ["good", "joining", "committing"], StateLog(tmp_path), upstream_timeout_s=2.0)
    paused = False
    try:
        beats = Heartbeats(managed, "good", *managed.run(managed.stable("good")))
        member, generation = managed.run(managed.stable("committing"))
        commit = Commit(group_id="committing", generation_id_or_member_epoch=generation, member_id=member,
                        topics=[Commit.OffsetCommitRequestTopic(name="t", partitions=[
                            Commit.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])])
        time.sleep(0.6)  # the topics are older than their maximum age: the next JoinGroup refreshes them
        os.kill(kafka_broker.pid, signal.SIGSTOP)
        paused, stopped_at = True, time.monotonic()
        committed = managed.send(8, 8, commit)
        started = time.monotonic()
        first = managed.run(managed.call(11, 5, Join(
            group_id="joining", member_id="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
            protocol_type="consumer", protocols=[Join.JoinGroupRequestProtocol(name="range", metadata=b"m")])))
        joined_in = time.monotonic() - started
        assert first.error_code == MEMBER_ID_REQUIRED and joined_in < 1.5  # the last topics, after 1 s at most
        answer = committed.result(10)
        assert answer.topics[0].partitions[0].error_code == COORDINATOR_NOT_AVAILABLE
        assert time.monotonic() - stopped_at < 4  # the upstream time-out, not the pause
        time.sleep(max(0.0, 4 - (time.monotonic() - stopped_at)))  # 4 s paused in all
        os.kill(kafka_broker.pid, signal.SIGCONT)
        paused = False
        longest = beats.stop()
        assert beats.errors == [] and len(beats.times) > 30
        assert longest < 0.5, f"a heartbeat waited {longest:.2f} s while the broker was paused"
        deadline = time.monotonic() + 30  # the broker back: the same commit reaches it (its own answer)
        while True:
            answer = managed.send(8, 8, commit).result(40)
            if answer.topics[0].partitions[0].error_code != COORDINATOR_NOT_AVAILABLE or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert answer.topics[0].partitions[0].error_code in (OK, 3)  # 3: no topic t, as the broker says
    finally:
        if paused:
            os.kill(kafka_broker.pid, signal.SIGCONT)
        managed.close()


def test_a_paused_broker_freezes_no_group_through_the_gateway(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """The audit's case end to end: `kprotocol gateway` in front of the broker, a kafka-python consumer of one
    managed group running, a member of another heartbeating every 100 ms over its own connection; the broker
    SIGSTOPped for 5 s while a third group's member joins. The heartbeats are answered in time throughout (they
    waited for the whole pause before), the join once the last known topics are used, the consumer goes on."""
    topic = f"paused-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    kafka_broker.create_topic(topic, 2)
    gateway = GatewayProcess(kafka_broker, ["consumer", "beating", "joining"], tmp_path / "state")
    good = GoodClient(kafka_broker, gateway.bootstrap, "consumer", topic)
    times: list[float] = []
    errors: list[int] = []
    stopping = threading.Event()
    paused = False
    try:
        good.wait_for(20)
        beating, joining = Connection("127.0.0.1", gateway.port), Connection("127.0.0.1", gateway.port)
        def join(member: str) -> object:
            return Join(group_id="beating", member_id=member, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                        protocol_type="consumer", protocols=[Join.JoinGroupRequestProtocol(name="range", metadata=b"m")])
        first = beating.send(join(""), version=5)
        joined = beating.send(join(first.member_id), version=5)
        assert beating.send(sync("beating", joined.member_id, joined.generation_id), version=3).error_code == OK

        def heartbeat() -> None:
            request = Beat(group_id="beating", generation_id=joined.generation_id, member_id=joined.member_id)
            while not stopping.is_set():
                started = time.monotonic()
                answer = beating.send(request, version=4)
                times.append(time.monotonic() - started)
                if answer.error_code:
                    errors.append(answer.error_code)
                time.sleep(0.1)
        thread = threading.Thread(target=heartbeat, daemon=True)
        thread.start()
        time.sleep(1.0)
        os.kill(kafka_broker.pid, signal.SIGSTOP)
        paused, stopped_at = True, time.monotonic()
        other = join("").replace(group_id="joining")
        assert joining.send(other, version=5).error_code == MEMBER_ID_REQUIRED
        joined_in = time.monotonic() - stopped_at
        time.sleep(max(0.0, 5 - (time.monotonic() - stopped_at)))
        during = list(times)
        os.kill(kafka_broker.pid, signal.SIGCONT)
        paused = False
        seen = len(good.seen)
        good.wait_for(seen + 20)  # the consumer goes on
        stopping.set()
        thread.join(15)
        assert joined_in < 2.5, f"the JoinGroup waited {joined_in:.1f} s for the paused broker"
        assert errors == [] and len(during) > 40
        assert max(times) < 1.0, f"a heartbeat of another group waited {max(times):.2f} s during the pause"
        beating.close()
        joining.close()
    finally:
        stopping.set()
        if paused:
            os.kill(kafka_broker.pid, signal.SIGCONT)
        good.stop()
        gateway.stop()
    assert "Traceback" not in gateway.log.read_text()


def test_one_metadata_call_serves_every_group_refreshing_at_once(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    groups = [f"m{i:02d}" for i in range(30)]
    managed = Managed(kafka_broker, groups, None)
    try:
        managed.run(managed.joined(groups[0]))
        time.sleep(0.6)  # the topics are older than their maximum age
        calls = managed.managed.topics.calls
        managed.run(gathered(managed.joined(g) for g in groups[1:]))
        assert managed.managed.topics.calls - calls == 1
    finally:
        managed.close()


def _sync_all(managed: Managed, joined: dict[str, tuple[str, int]], state: GatedLog) -> tuple[list, dict[str, bool]]:
    """Every group's SyncGroup at once while the disk stalls (none answered before the gate opens): the answers,
    and for each group whether its record was durable when its answer arrived."""
    early: list[str] = []
    durable_at_answer: dict[str, bool] = {}

    async def one(group: str) -> object:
        answer = await managed.call(14, 3, sync(group, *joined[group]))
        if not state.gate.is_set():
            early.append(group)
        durable_at_answer[group] = group in state.durable
        return answer

    state.gate.clear()
    pending = asyncio.run_coroutine_threadsafe(gathered(one(g) for g in joined), managed.loop)
    time.sleep(1.0)
    assert not pending.done() and not early  # nobody answered while the append waits
    state.gate.set()
    answers = pending.result(20)
    return answers, durable_at_answer


def test_a_requester_gone_mid_write_leaves_its_change_whole_and_the_others_answered(kafka_broker: KafkaBroker,
                                                                                      tmp_path: Path) -> None:
    """The leader's SyncGroup is cancelled (its client went away) while its record is being written: the write
    still decides the change, which is committed once durable, and the follower waiting for the leader's
    assignment gets it (a change cut off mid-write used to leave the group half changed and the follower waiting)."""
    state = GatedLog(tmp_path)
    managed = Managed(kafka_broker, ["c"], state, initial_delay_ms=300)
    try:
        (a, generation, leader), (b, _, _) = managed.run(gathered([managed.join("c"), managed.join("c")]))
        follower = b if leader == a else a
        state.gate.clear()
        waiting = managed.send(14, 3, Sync(group_id="c", generation_id=generation, member_id=follower, assignments=[]))
        leading = managed.send(14, 3, Sync(group_id="c", generation_id=generation, member_id=leader, assignments=[
            Sync.SyncGroupRequestAssignment(member_id=m, assignment=m.encode()) for m in (a, b)]))
        time.sleep(0.3)
        leading.cancel()
        time.sleep(0.2)
        assert not waiting.done() and "c" not in state.durable
        state.gate.set()
        answer = waiting.result(10)
        assert answer.error_code == OK and answer.assignment == follower.encode()
        assert "c" in state.durable and managed.managed.coordinator.classic["c"].state == "Stable"
        beat = Beat(group_id="c", generation_id=generation, member_id=leader)
        assert managed.send(12, 4, beat).result(10).error_code == OK  # the group's lock was released
    finally:
        state.gate.set()
        managed.close()


def test_concurrent_state_writes_are_one_append_answered_once_durable(kafka_broker: KafkaBroker,
                                                                       tmp_path: Path) -> None:
    groups = [f"g{i:02d}" for i in range(20)]
    state = GatedLog(tmp_path)
    managed = Managed(kafka_broker, groups, state)
    try:
        joined = {g: managed.run(managed.joined(g)) for g in groups}
        before = len(state.batches)
        answers, durable = _sync_all(managed, joined, state)
        assert [a.error_code for a in answers] == [OK] * len(groups)
        assert durable == dict.fromkeys(groups, True)  # each answered only after its record was fsynced
        appends = state.batches[before:]
        assert len(appends) <= 2 and sorted(g for b in appends for g in b) == groups  # the first may go alone
        assert managed.managed.commits.appends - before <= 2
        batches = [entry for _, entry in read_logs([tmp_path])]
        assert max(len(b.records) for b in batches) >= len(groups) - 1  # one batch in the log
    finally:
        state.gate.set()
        managed.close()


def test_a_failed_append_rolls_back_every_group_in_it(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    groups = [f"f{i:02d}" for i in range(10)]
    state = GatedLog(tmp_path)
    managed = Managed(kafka_broker, groups, state)
    try:
        joined = {g: managed.run(managed.joined(g)) for g in groups}
        state.full = True
        answers, _ = _sync_all(managed, joined, state)
        assert [a.error_code for a in answers] == [COORDINATOR_NOT_AVAILABLE] * len(groups)
        assert {managed.managed.coordinator.classic[g].state for g in groups} == {"CompletingRebalance"}
        assert state.load() == []
        state.full = False
        again = [managed.send(14, 3, sync(g, *joined[g])).result(20) for g in groups]
        assert [a.assignment for a in again] == [b"a"] * len(groups) and len(state.load()) == len(groups)
    finally:
        state.gate.set()
        managed.close()


def test_timers_fire_on_time_with_many_groups_and_idle_groups_cost_nothing(kafka_broker: KafkaBroker,
                                                                          tmp_path: Path) -> None:
    """300 groups, one member each, sessions of 3 to 4.5 s: each expires within 250 ms of its deadline, its timers
    run from one heap of deadlines when due; 50 idle groups' timers never run."""
    groups = [f"t{i:03d}" for i in range(300)]
    idle = [f"idle{i}" for i in range(50)]
    managed = Managed(kafka_broker, groups + idle, StateLog(tmp_path))
    try:
        coordinator = managed.managed.coordinator
        per_group = managed.managed.coordinator
        poll_group = per_group.poll_group
        polls: list[str] = []
        expired: dict[str, int] = {}

        def counted(group_id: str, now: int) -> tuple:
            polls.append(group_id)
            out = poll_group(group_id, now)
            if not coordinator.classic[group_id].members:
                expired.setdefault(group_id, now)
            return out
        per_group.poll_group = counted
        deadlines: dict[str, int] = {}

        async def member(group: str, session_ms: int) -> None:
            await managed.stable(group, session_ms)
            deadlines[group] = next(iter(coordinator.classic[group].members.values())).session_deadline

        managed.run(gathered(member(g, 60_000) for g in idle))
        polls.clear()
        managed.run(gathered(member(g, 3000 + 5 * i) for i, g in enumerate(groups)))
        wait_until = time.monotonic() + (max(deadlines.values()) - now_ms()) / 1000 + 5
        while len(expired) < len(groups) and time.monotonic() < wait_until:
            time.sleep(0.1)
        assert sorted(expired) == groups
        late = sorted(expired[g] - deadlines[g] for g in groups)
        assert late[0] >= 0 and late[-1] < 250, late[-10:]
        assert all(coordinator.classic[g].members for g in idle)
        assert set(polls) == set(groups) and len(polls) <= 2 * len(groups)  # the idle groups' timers never ran
    finally:
        managed.close()


def test_an_empty_group_is_deleted_under_its_own_lock_and_written(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """DeleteGroups: a group with a member is refused NON_EMPTY_GROUP; once empty its tombstone is written, the
    coordinator forgets it and the broker answers for its offsets (it never had a group of that id)."""
    from kprotocol.registry import api_classes
    from kprotocol.streams_group import records as rec

    state = StateLog(tmp_path)
    managed = Managed(kafka_broker, ["gone"], state)
    delete, leave = api_classes(42)[0], message_class("LeaveGroupRequest")
    try:
        member, _ = managed.run(managed.stable("gone"))
        assert managed.send(42, 2, delete(groups_names=["gone"])).result(20).results[0].error_code == 68
        assert managed.send(13, 3, leave(group_id="gone", members=[leave.MemberIdentity(
            member_id=member)])).result(20).members[0].error_code == OK
        answer = managed.send(42, 2, delete(groups_names=["gone"])).result(20)
        assert answer.results[0].error_code == 69  # GROUP_ID_NOT_FOUND: the broker's own answer
        assert "gone" not in managed.managed.coordinator.group_ids()
        last = rec.decode(*state.load()[-1])
        assert last.group_id == "gone" and last.value is None
    finally:
        managed.close()


def test_deadlines_fire_each_group_when_due_and_a_failing_group_stops_nothing() -> None:
    fired: list[tuple[str, int]] = []

    async def fire(group_id: str) -> None:
        fired.append((group_id, now_ms()))
        if group_id == "bad":
            raise RuntimeError("a bug in one group's timers")

    async def scenario() -> None:
        deadlines = Deadlines(fire)
        runner = asyncio.create_task(deadlines.run())
        start = now_ms()
        deadlines.schedule("late", start + 300)
        deadlines.schedule("bad", start + 50)
        deadlines.schedule("early", start + 200)
        deadlines.schedule("early", start + 100)  # earlier: replaces
        deadlines.schedule("late", start + 400)  # later: the earlier one stands
        await asyncio.sleep(0.5)
        assert [g for g, _ in fired] == ["bad", "early", "late"]
        assert all(0 <= at - start - due < 60 for (_, at), due in zip(fired, (50, 100, 300)))
        assert not runner.done() and len(deadlines) == 0
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    asyncio.run(scenario())


def test_group_commit_batches_waiting_writers_and_fails_them_together() -> None:
    from kprotocol.streams_group import records as rec

    class Slow:
        MAX_BATCH_BYTES = 10_000

        def __init__(self) -> None:
            self.appends: list[list[str]] = []
            self.release = asyncio.Event()
            self.fail = False

        async def append(self, records: list) -> None:
            self.appends.append([r.group_id for r in records])
            await self.release.wait()
            if self.fail:
                raise ConnectionError("produce failed")

    def change(group: str, size: int = 0) -> list:
        return [rec.group_metadata(group, 1, 0, -1, {"x": "y" * size} if size else {})]

    async def scenario() -> None:
        state = Slow()
        commits = GroupCommit(state, timeout_s=5)
        first = asyncio.create_task(commits.write(change("a")))
        await asyncio.sleep(0.05)
        rest = [asyncio.create_task(commits.write(change(f"b{i}"))) for i in range(10)]
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in [first, *rest])
        state.release.set()
        await asyncio.gather(first, *rest)
        assert state.appends == [["a"], [f"b{i}" for i in range(10)]] and commits.appends == 2
        large = [asyncio.create_task(commits.write(change(f"c{i}", 4000))) for i in range(5)]
        await asyncio.gather(*large)  # 4 kB each, 10 kB an append: three appends
        assert state.appends[2:] == [["c0", "c1"], ["c2", "c3"], ["c4"]]
        state.release.clear()
        state.fail = True
        failing = [asyncio.create_task(commits.write(change(f"d{i}"))) for i in range(3)]
        await asyncio.sleep(0.05)
        state.release.set()
        outcomes = await asyncio.gather(*failing, return_exceptions=True)
        assert [type(o) for o in outcomes] == [ConnectionError] * 3 and state.appends[-1] == ["d0", "d1", "d2"]
    asyncio.run(scenario())


@pytest.mark.parametrize("stall_s", [0.0, 1.5])
def test_a_state_log_append_past_its_time_out_is_cut_back(tmp_path: Path, stall_s: float) -> None:
    """The writers of an append that outlasts the time-out are told it failed; once it returns, it is cut from
    the file, and the next append follows the last good one."""
    from kprotocol.streams_group import records as rec

    class Stalling(StateLog):
        stall = 0.0

        def append(self, records: list) -> None:
            time.sleep(self.stall)
            super().append(records)

    async def scenario() -> None:
        state = Stalling(tmp_path)
        state.load()
        commits = GroupCommit(state, timeout_s=0.5)
        await commits.write([rec.group_metadata("a", 1, 0, -1, {})])
        state.stall = stall_s
        outcome = await asyncio.gather(commits.write([rec.group_metadata("b", 1, 0, -1, {})]),
                                       return_exceptions=True)
        state.stall = 0.0
        queued = await asyncio.gather(commits.write([rec.group_metadata("x", 1, 0, -1, {})]), return_exceptions=True)
        assert isinstance(queued[0], asyncio.TimeoutError) if stall_s else queued == [None]  # behind the late one
        await asyncio.sleep(stall_s)
        await commits.write([rec.group_metadata("c", 1, 0, -1, {})])
        groups = [r.group_id for r in (rec.decode(k, v) for k, v in Stalling(tmp_path).load())]
        if stall_s:
            assert isinstance(outcome[0], asyncio.TimeoutError) and groups == ["a", "c"]
        else:
            assert outcome == [None] and groups == ["a", "b", "x", "c"]
    asyncio.run(scenario())

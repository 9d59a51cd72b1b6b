"""The migration coordinator's per-request cost at the size of real Kafka Streams fleets, in process.

For a group of N members, every member stable: the median cost of one steady heartbeat through the
coordinator alone (`handle`) and through the gateway's path (the group's change opened, the request
handled, the change committed; on a coordinator without `begin`, the older `Snapshot` copy), and the
CPU time of one round in which every member heartbeats once (the best of three). Two shapes:
streams-protocol members only (N = 10, 100, 1000, 64 to 1024 tasks) and a group mid-migration, half
classic members carrying real Kafka Streams SubscriptionInfo (with endpoints), half streams-protocol
members (N = 10, 100, 500).
Then 1000 streams-protocol members joining one by one until the group is stable (default group
configs: the initial delay and the assignment interval batch the joins, as the broker's do).

    PYTHONPATH=. .venv/bin/python bench/coordinator_scale.py [--shapes streams,mixed,joins] [--streams-sizes 10,100,1000]
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import statistics
import struct
import time
import uuid

from compat.coordinator import MigrationCoordinator
from compat.translate import assigned_tasks
from kprotocol.registry import message_class
from kprotocol.streams import SubscriptionInfo, TaskId
from kprotocol.streams_group import GroupConfig

HB = message_class("StreamsGroupHeartbeatRequest")
Header = message_class("RequestHeader")
Join, Sync, Beat = (message_class(n) for n in ("JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest"))
Subscription = message_class("ConsumerProtocolSubscription")
GROUP, SOURCE = "app", "input"
tokens = itertools.count()


def header(api_key: int, version: int):
    return Header(request_api_key=api_key, request_api_version=version, correlation_id=0, client_id="bench")


def tasks_for(members: int) -> int:
    return max(64, 1 << (members - 1).bit_length())


class Fleet:
    """Simulated members of one group that apply what they are told; `now` is the shared clock."""

    def __init__(self, tasks: int, config: GroupConfig) -> None:
        self.c = MigrationCoordinator(config, {SOURCE: tasks}, classic_initial_delay_ms=0)
        self.tasks = tasks
        self.now = 1_000
        self.epoch: dict[str, int] = {}
        self.owned: dict[str, list[int]] = {}  # member -> active partitions it runs
        self.generation: dict[str, int] = {}
        self.endpoint_epoch: dict[str, int] = {}

    def send(self, api_key: int, version: int, request):
        answers, _ = self.c.handle(next(tokens), header(api_key, version), request, self.now)
        return answers[0][1] if answers else None

    # streams-protocol members
    def streams_request(self, m: str):
        if m not in self.epoch:
            return HB(group_id=GROUP, member_id=m, member_epoch=0, rebalance_timeout_ms=30_000, process_id=m,
                      user_endpoint=HB.Endpoint(host=m, port=7070),
                      topology=HB.Topology(epoch=0, subtopologies=[HB.Subtopology(subtopology_id="0",
                                                                                  source_topics=[SOURCE])]),
                      active_tasks=[], standby_tasks=[], warmup_tasks=[])
        return HB(group_id=GROUP, member_id=m, member_epoch=self.epoch[m],
                  active_tasks=[HB.TaskIds(subtopology_id="0", partitions=self.owned[m])] if self.owned[m] else [],
                  standby_tasks=[], warmup_tasks=[], endpoint_information_epoch=self.endpoint_epoch.get(m, 0))

    def streams_apply(self, m: str, response) -> bool:
        assert response.error_code == 0, response.error_message
        changed = self.epoch.get(m) != response.member_epoch or response.active_tasks is not None or \
            self.endpoint_epoch.get(m) != response.endpoint_information_epoch
        self.epoch[m] = response.member_epoch
        self.endpoint_epoch[m] = response.endpoint_information_epoch
        if response.active_tasks is not None:
            self.owned[m] = sorted(p for t in response.active_tasks for p in t.partitions)
        return changed

    def streams_beat(self, m: str) -> bool:
        return self.streams_apply(m, self.send(88, 1, self.streams_request(m)))

    # classic members (Kafka Streams SubscriptionInfo v11, cooperative)
    def subscription(self, m: str) -> bytes:
        info = SubscriptionInfo(version=11, process_id=uuid.uuid5(uuid.NAMESPACE_DNS, m),
                                task_offset_sums=tuple((TaskId(0, p), -2) for p in self.owned.get(m, [])),
                                user_end_point=f"{m}:7070")
        message = Subscription(topics=[SOURCE], user_data=info.encode(), owned_partitions=[
            Subscription.TopicPartition(topic=SOURCE, partitions=self.owned.get(m, []))])
        return struct.pack(">h", 1) + message.encode(1)

    def classic_join(self, m: str) -> None:
        join = self.send(11, 9, Join(group_id=GROUP, member_id=m, session_timeout_ms=45_000,
                                     rebalance_timeout_ms=30_000, protocol_type="consumer", protocols=[
                                         Join.JoinGroupRequestProtocol(name="stream", metadata=self.subscription(m))]))
        assert join.error_code == 0, join.error_code
        self.generation[m] = join.generation_id
        sync = self.send(14, 5, Sync(group_id=GROUP, generation_id=join.generation_id, member_id=m,
                                     protocol_type="consumer", protocol_name="stream"))
        assert sync.error_code == 0, sync.error_code
        self.owned[m] = sorted(assigned_tasks(sync.assignment).active.get("0", ()))

    def classic_beat(self, m: str) -> bool:
        response = self.send(12, 4, Beat(group_id=GROUP, generation_id=self.generation[m], member_id=m))
        if response.error_code == 0:
            return False
        self.classic_join(m)
        return True


def classic_group(fleet: Fleet, names: list[str]) -> None:
    """A stable classic group of `names` (each a Kafka Streams client), built through the coordinator."""
    from compat.classic import GroupMetadataKey, GroupMetadataValue
    from kprotocol.streams_group.records import CoordinatorRecord
    share = fleet.tasks // len(names)
    for i, m in enumerate(names):
        fleet.owned[m] = list(range(i * share, (i + 1) * share)) if i < len(names) - 1 else \
            list(range(i * share, fleet.tasks))
    value = GroupMetadataValue(protocol_type="consumer", generation=1, protocol="stream", leader=names[0],
                               current_state_timestamp=0, members=[GroupMetadataValue.MemberMetadata(
                                   member_id=m, client_id=m, client_host="/h", rebalance_timeout=30_000,
                                   session_timeout=45_000, subscription=fleet.subscription(m),
                                   assignment=_assignment(fleet.owned[m])) for m in names])
    fleet.c.replay([CoordinatorRecord(GroupMetadataKey(group=GROUP), value)], fleet.now)
    for m in names:
        fleet.generation[m] = 1


def _assignment(partitions: list[int]) -> bytes:
    from kprotocol.streams import AssignmentInfo
    Assignment = message_class("ConsumerProtocolAssignment")
    info = AssignmentInfo(version=11, active_tasks=tuple(TaskId(0, p) for p in partitions))
    message = Assignment(assigned_partitions=[Assignment.TopicPartition(topic=SOURCE, partitions=partitions)],
                         user_data=info.encode())
    return struct.pack(">h", 1) + message.encode(1)


def settle(fleet: Fleet, streams: list[str], classic: list[str], max_rounds: int = 200) -> int:
    for rounds in range(1, max_rounds + 1):
        changed = False
        for m in streams:
            changed |= fleet.streams_beat(m)
        for m in classic:
            changed |= fleet.classic_beat(m)
        fleet.now += 100
        fleet.c.poll(fleet.now)
        if not changed:
            return rounds
    raise AssertionError("the group did not settle")


def build(shape: str, n: int) -> tuple[Fleet, list[str], list[str]]:
    config = GroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0)
    fleet = Fleet(tasks_for(n), config)
    if shape == "streams":
        streams, classic = [f"s{i}" for i in range(n)], []
        for m in streams:
            fleet.streams_beat(m)
    else:
        classic, streams = [f"c{i}" for i in range(n // 2)], [f"s{i}" for i in range(n - n // 2)]
        classic_group(fleet, classic)
        for m in streams:
            fleet.streams_beat(m)
    settle(fleet, streams, classic)
    return fleet, streams, classic


def gateway_path(c: MigrationCoordinator):
    """(begin, finish) of the gateway's per-request roll-back point on this coordinator."""
    if hasattr(c, "begin"):
        return c.begin, lambda change: change.commit()
    from compat.gateway.supervisor import Snapshot  # the coordinator before issue 35
    return (lambda g: Snapshot(c, g)), (lambda snapshot: None)


def measure(shape: str, n: int, samples: int) -> dict[str, float]:
    fleet, streams, classic = build(shape, n)
    begin, finish = gateway_path(fleet.c)
    members = streams + classic
    requests = {m: (88, 1, fleet.streams_request(m)) if m in fleet.epoch and m in streams else
                (12, 4, Beat(group_id=GROUP, generation_id=fleet.generation[m], member_id=m)) for m in members}
    probe = [members[i * len(members) // samples] for i in range(samples)]

    def one(m: str, gateway: bool) -> float:
        api, version, request = requests[m]
        h = header(api, version)
        start = time.perf_counter()
        change = begin(GROUP) if gateway else None
        answers, records = fleet.c.handle(next(tokens), h, request, fleet.now)
        if gateway:
            finish(change)
        elapsed = time.perf_counter() - start
        assert not records and answers[0][1].error_code == 0, (m, answers)
        return elapsed

    gc.collect()
    gc.disable()
    try:
        alone = statistics.median(one(m, False) for m in probe)
        path = statistics.median(one(m, True) for m in probe)
        full_round = float("inf")
        for _ in range(3):  # the CPU time of the best of three (a shared machine's stalls left out)
            start = time.process_time()
            for m in members:
                one(m, True)
            full_round = min(full_round, time.process_time() - start)
    finally:
        gc.enable()
    return {"alone_us": alone * 1e6, "path_us": path * 1e6, "round_ms": full_round * 1e3}


def join_storm(n: int) -> tuple[float, int]:
    """n streams-protocol members joining one by one (one every 5 ms), heartbeating at their interval (at once
    after a change of their tasks), until stable: (CPU seconds in the coordinator, simulated seconds)."""
    fleet = Fleet(tasks_for(n), GroupConfig())
    members = [f"s{i}" for i in range(n)]
    spent = 0.0
    start_now = fleet.now
    due = {m: fleet.now + i * 5 for i, m in enumerate(members)}  # a join every 5 ms
    queue = [(d, m) for m, d in due.items()]
    heapq.heapify(queue)
    while True:
        _, m = heapq.heappop(queue)
        fleet.now = max(fleet.now, due[m])
        before = (fleet.epoch.get(m), fleet.owned.get(m))
        t = time.process_time()
        fleet.c.poll(fleet.now)
        fleet.streams_beat(m)
        spent += time.process_time() - t
        # a client heartbeats at the interval it is given, at once when its tasks or epoch changed
        due[m] = fleet.now + (50 if before != (fleet.epoch[m], fleet.owned.get(m)) else 5_000)
        heapq.heappush(queue, (due[m], m))
        group = fleet.c.streams.group(GROUP)
        if len(group.members) == n and group.state == "Stable" and \
                all(fleet.epoch[x] == group.assignment_epoch for x in members):
            return spent, (fleet.now - start_now) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="streams,mixed,joins")
    parser.add_argument("--streams-sizes", default="10,100,1000")
    parser.add_argument("--mixed-sizes", default="10,100,500")
    parser.add_argument("--joins", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    print("| shape | members | steady heartbeat, coordinator alone | steady heartbeat, gateway path "
          "| one round (CPU) |")
    print("|---|---|---|---|---|")
    for shape in ("streams", "mixed"):
        if shape not in shapes:
            continue
        for n in map(int, getattr(args, f"{shape}_sizes").split(",")):
            r = measure(shape, n, min(args.samples, n))
            print(f"| {shape} | {n} ({tasks_for(n)} tasks) | {r['alone_us']:.0f} us | {r['path_us']:.0f} us "
                  f"| {r['round_ms']:.1f} ms |", flush=True)
    if "joins" in shapes:
        spent, simulated = join_storm(args.joins)
        print(f"\n{args.joins} joins to stable: {spent:.2f} s of coordinator CPU, {simulated:.1f} s simulated")


if __name__ == "__main__":
    main()

"""Benchmark of the streams-group coordinator beside Apache Kafka's broker.

1. Steady heartbeats: a group of N members (10, 100, 1000), every member stable; the median time of
   `handle()` for a heartbeat that changes nothing (the core), of the same heartbeat through the codec
   (frame in, frame out), and of a heartbeat to the broker over one TCP connection (loopback round trip
   included: the broker figure is what one client connection sees, not the broker's core).
2. Convergence: N members stable, one new member joins, then every member heartbeats in rounds (applying
   what it is told) until the group is Stable. Timed for the coordinator (in-process, requests and
   responses through the codec as a server would) and for the real broker (the same requests over one
   TCP connection, group config `streams.assignment.interval.ms=0`); the ratio is printed.

    .venv/bin/python bench/coordinator.py [--members 10,100,1000] [--no-broker]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import uuid

from kprotocol.framing import decode_request, decode_response, encode_request, encode_response
from kprotocol.registry import message_class
from kprotocol.streams_group import GroupConfig, StreamsGroupCoordinator

HB = message_class("StreamsGroupHeartbeatRequest")
HEADER = message_class("RequestHeader")
RESPONSE_HEADER = message_class("ResponseHeader")
TASKS = 64
VERSION = 1


def topology(source: str):
    return HB.Topology(epoch=0, subtopologies=[HB.Subtopology(subtopology_id="0", source_topics=[source])])


class Members:
    """Clients that apply their assignments; `request(m)` is m's next heartbeat."""

    def __init__(self, group: str, source: str) -> None:
        self.group, self.source = group, source
        self.epoch: dict[str, int] = {}
        self.owned: dict[str, list] = {}

    def request(self, member: str):
        if member not in self.epoch:
            return HB(group_id=self.group, member_id=member, member_epoch=0, rebalance_timeout_ms=30_000,
                      process_id=member, topology=topology(self.source), active_tasks=[], standby_tasks=[],
                      warmup_tasks=[])
        return HB(group_id=self.group, member_id=member, member_epoch=self.epoch[member],
                  active_tasks=self.owned[member], standby_tasks=[], warmup_tasks=[])

    def apply(self, member: str, response) -> bool:
        """Record the answer; True if the member's tasks or epoch changed."""
        assert response.error_code == 0, response.error_message
        changed = self.epoch.get(member) != response.member_epoch or response.active_tasks is not None
        self.epoch[member] = response.member_epoch
        if response.active_tasks is not None:
            self.owned[member] = [HB.TaskIds(subtopology_id=t.subtopology_id, partitions=t.partitions)
                                  for t in response.active_tasks]
        return changed


def header(correlation: int = 0):
    return HEADER(request_api_key=88, request_api_version=VERSION, correlation_id=correlation, client_id="bench")


class Ours:
    def __init__(self, source: str) -> None:
        config = GroupConfig(initial_rebalance_delay_ms=0, assignment_interval_ms=0)
        self.coordinator = StreamsGroupCoordinator(config, topics={source: TASKS})
        self.now = 1_000

    def send(self, request):
        """Through the codec: request frame in, response frame out, as a socket shell would."""
        head, body = decode_request(encode_request(header(), request))
        response, _ = self.coordinator.handle(head, body, self.now)
        frame = encode_response(RESPONSE_HEADER(correlation_id=head.correlation_id), response, VERSION)
        return decode_response(frame, 88, VERSION)[1]


class Broker:
    def __init__(self, broker, group: str, source: str) -> None:
        self.conn = broker.connect(client_id="bench")
        request = message_class("IncrementalAlterConfigsRequest")
        self.conn.send(request(resources=[request.AlterConfigsResource(
            resource_type=32, resource_name=group, configs=[request.AlterableConfig(
                name="streams.assignment.interval.ms", config_operation=0, value="0")])]))
        find = message_class("FindCoordinatorRequest")
        while self.conn.send(find(key_type=0, coordinator_keys=[group])).coordinators[0].error_code:
            time.sleep(0.2)

    def send(self, request):
        return self.conn.send(request, VERSION)


def settle(side, members: Members, ids: list[str]) -> int:
    """Heartbeat rounds until a round changes nothing; returns the number of rounds."""
    rounds = 0
    while True:
        rounds += 1
        changed = False
        for m in ids:
            changed |= members.apply(m, side.send(members.request(m)))
        if not changed:
            return rounds


def converge(side, n: int, source: str, group: str) -> tuple[float, int]:
    members = Members(group, source)
    ids = [f"m{i:04d}" for i in range(n)]
    settle(side, members, ids)
    start = time.perf_counter()
    ids.append("new-member")
    rounds = settle(side, members, ids)
    return (time.perf_counter() - start) * 1000, rounds


def steady_us(side, n: int, source: str, group: str, core: bool) -> float:
    """Median time per steady heartbeat: `core` calls handle() alone, else the side's full `send`."""
    members = Members(group, source)
    ids = [f"m{i:04d}" for i in range(n)]
    settle(side, members, ids)
    requests = [members.request(m) for m in ids]
    head = header()
    call = (lambda r: side.coordinator.handle(head, r, side.now)) if core else side.send
    gc.collect()
    samples = []
    for _ in range(max(3, (3000 if core else 300) // n)):
        start = time.perf_counter()
        for r in requests:
            call(r)
        samples.append((time.perf_counter() - start) / len(requests) * 1e6)
    return statistics.median(samples)


def member_level_ms(tasks: int, runs: int = 7) -> float:
    """Median ms of one target assignment of 1000 one-thread members over `tasks` tasks (100 subtopologies,
    half stateful), the previous target installed: inputs, assignor, validation and spreading over members."""
    from kprotocol.streams_group.assignment import AssignmentSettings, compute_targets
    from kprotocol.streams_group.member import Member

    members = {f"m{i:04d}": Member(f"m{i:04d}", process_id=f"p{i:04d}") for i in range(1000)}
    counts = {str(s): tasks // 100 for s in range(100)}
    stateful = {str(s) for s in range(0, 100, 2)}
    previous = compute_targets(members, {}, counts, stateful, AssignmentSettings(), {}, {}, 0)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        compute_targets(members, previous, counts, stateful, AssignmentSettings(), {}, {}, 0)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def new_broker_group(broker) -> tuple[Broker, str, str]:
    group = f"bench-{uuid.uuid4().hex[:6]}"
    source = f"{group}-input"
    broker.create_topic(source, TASKS)
    time.sleep(1.0)  # the group coordinator's metadata image follows the broker's a moment later
    return Broker(broker, group, source), source, group


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="10,100,1000")
    parser.add_argument("--no-broker", action="store_true")
    args = parser.parse_args()
    sizes = [int(x) for x in args.members.split(",")]
    print("member-level target assignment, 1000 members (Kafka's figures as the issue measured them)")
    print(f"{'tasks':>8} {'kprotocol ms':>13} {'kafka ms':>9} {'target':>7}")
    for tasks, kafka in ((1000, 3.0), (10_000, 19.5)):
        ms = member_level_ms(tasks)
        print(f"{tasks:>8} {ms:>13.1f} {kafka:>9.1f} {3 * kafka:>7.1f} {'ok' if ms <= 3 * kafka else 'SLOW'}")
    print()
    broker = None
    if not args.no_broker:
        from kprotocol.toolchain import KafkaBroker
        broker = KafkaBroker.start()
    try:
        print("steady heartbeats: the core alone, then through the codec / over TCP to the broker")
        print(f"{'members':>8} {'core us':>8} {'core hb/s':>10} {'codec us':>9} {'broker us':>10} {'ratio':>7}")
        for n in sizes:
            core = steady_us(Ours("input"), n, "input", "g", core=True)
            codec = steady_us(Ours("input"), n, "input", "g", core=False)
            line = f"{n:>8} {core:>8.1f} {1e6 / core:>10,.0f} {codec:>9.1f}"
            if broker is not None:
                side, source, group = new_broker_group(broker)
                kafka = steady_us(side, n, source, group, core=False)
                line += f" {kafka:>10.1f} {kafka / codec:>6.1f}x"
            print(line)
        print(f"\nconvergence after one member joins ({TASKS} tasks; time from the join to a Stable group)")
        print(f"{'members':>8} {'kprotocol ms':>13} {'rounds':>7} {'broker ms':>10} {'rounds':>7} {'ratio':>7}")
        for n in sizes:
            ours_ms, ours_rounds = converge(Ours("input"), n, "input", "g")
            line = f"{n:>8} {ours_ms:>13.1f} {ours_rounds:>7}"
            if broker is not None:
                side, source, group = new_broker_group(broker)
                kafka_ms, kafka_rounds = converge(side, n, source, group)
                line += f" {kafka_ms:>10.1f} {kafka_rounds:>7} {kafka_ms / ours_ms:>6.1f}x"
            print(line)
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()

"""The gateway's state, in a local log segment and in a compacted topic of the real broker: what is
appended comes back in order, and a coordinator replayed from it equals the one that wrote it."""

from __future__ import annotations

import asyncio
import uuid

from compat.gateway.state import StateLog, StateTopic
from compat.gateway.upstream import Upstream
from kprotocol.records import read_logs
from kprotocol.registry import message_class
from kprotocol.streams_group import GroupConfig, StreamsGroupCoordinator

HB = message_class("StreamsGroupHeartbeatRequest")
HEADER = message_class("RequestHeader")(request_api_key=88, request_api_version=1, correlation_id=0, client_id="c")


def some_records() -> tuple[StreamsGroupCoordinator, list]:
    c = StreamsGroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0), topics={"in": 3})
    records = []
    for member in ("m1", "m2"):
        _, more = c.handle(HEADER, HB(group_id="app", member_id=member, member_epoch=0, rebalance_timeout_ms=1000,
                                      process_id=member, active_tasks=[], standby_tasks=[], warmup_tasks=[],
                                      topology=HB.Topology(subtopologies=[HB.Subtopology(
                                          subtopology_id="0", source_topics=["in"])])), 0)
        records += more
    return c, records


def test_state_log_round_trip(tmp_path) -> None:
    live, records = some_records()
    log = StateLog(tmp_path)
    log.append(records[:3])
    log.append(records[3:])
    again = StateLog(tmp_path)
    assert again.load() == [r.encode() for r in records] and again.next_offset == len(records)
    assert [e.last_offset for _, e in read_logs([tmp_path])] == [2, len(records) - 1]  # a readable segment
    assert StreamsGroupCoordinator.from_records(again.load()).group("app").hard_state() == \
        live.group("app").hard_state()


def test_state_topic_round_trip(kafka_broker) -> None:
    live, records = some_records()
    topic = f"gateway-state-{uuid.uuid4().hex[:6]}"

    async def scenario() -> list:
        upstream = Upstream(("127.0.0.1", kafka_broker.port))
        state = StateTopic(upstream, topic)
        assert await state.load() == []
        await state.append(records[:3])
        await state.append(records[3:])
        upstream.close()
        upstream = Upstream(("127.0.0.1", kafka_broker.port))
        loaded = await StateTopic(upstream, topic).load()
        upstream.close()
        return loaded

    loaded = asyncio.run(scenario())
    latest = {}  # what a compacted log holds: each key's latest value, in the order of those values
    for key, value in (r.encode() for r in records):
        latest.pop(key, None)
        latest[key] = value
    assert loaded == list(latest.items())
    assert StreamsGroupCoordinator.from_records(loaded).group("app").hard_state() == live.group("app").hard_state()

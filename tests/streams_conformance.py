"""Drive one streams group at the real broker and at `StreamsGroupCoordinator` with the same requests.

`Twin.heartbeat` sends a StreamsGroupHeartbeat to both and returns both answers as JSON; the
coordinator's clock is the real elapsed time, its topic view is the broker's own metadata, and
its group settings are the group configs the twin also sets on the broker.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

from kprotocol.records import RecordBatch, read_segment
from kprotocol.registry import message_class
from kprotocol.streams_group import GroupConfig, StreamsGroupCoordinator
from kprotocol.streams_group import records as rec
from kprotocol.streams_group.java_order import java_string_hash

HB = message_class("StreamsGroupHeartbeatRequest")
DESCRIBE = message_class("StreamsGroupDescribeRequest")
HEADER = message_class("RequestHeader")
GROUP_RESOURCE = 32
CLIENT_ID, CLIENT_HOST = "conformance", "/127.0.0.1"
# Deterministic settings on both sides: no assignment batching, no background assignment.
MISSING_SOURCE_TOPICS = 1  # a topology status code
BASE_CONFIGS = {"streams.assignment.interval.ms": "0", "streams.assignor.offload.enable": "false"}
# No request goes out this close to a deadline of the coordinator, plus twice the slowest recent broker round trip
# (the broker's deadline lies up to a round trip after the coordinator's, the request takes one more): the two
# clocks then always agree whether a deadline passed, also on a loaded machine.
RACE_MARGIN_MS = 300


def topology(epoch: int = 0, subtopologies: list[dict] | None = None) -> Any:
    """A heartbeat topology from plain dicts: {"id", "sources", "changelogs", "repartition_sinks",
    "repartition_sources" ({name: partitions}), "copartition" ([source indexes])}."""
    subtopologies = subtopologies or [{"id": "0", "sources": ["input"], "changelogs": ["store-changelog"]}]
    return HB.Topology(epoch=epoch, subtopologies=[HB.Subtopology(
        subtopology_id=s["id"], source_topics=s.get("sources", []),
        state_changelog_topics=[HB.TopicInfo(name=c, partitions=s.get("changelog_partitions", 0))
                                for c in s.get("changelogs", [])],
        repartition_sink_topics=s.get("repartition_sinks", []),
        repartition_source_topics=[HB.TopicInfo(name=n, partitions=p)
                                   for n, p in s.get("repartition_sources", {}).items()],
        copartition_groups=[HB.CopartitionGroup(source_topics=g) for g in s.get("copartition", [])])
        for s in subtopologies])


class Twin:
    def __init__(self, broker: Any, group_id: str, configs: Mapping[str, str] | None = None) -> None:
        self.broker, self.group_id = broker, group_id
        self.conn = broker.connect(client_id=CLIENT_ID)
        configs = {**BASE_CONFIGS, **(configs or {})}
        self._alter_configs(configs)
        ours = {k: v for k, v in configs.items() if k != "streams.assignor.offload.enable"}
        config = GroupConfig.from_kafka(ours, GroupConfig(initial_rebalance_delay_ms=0))
        self.coordinator = StreamsGroupCoordinator(config)
        self.records: list[rec.CoordinatorRecord] = []
        self.epochs: dict[str, int] = {}
        self.owned: dict[str, dict[str, list]] = {}  # member -> the tasks it runs, as a client applies them
        self.round_trips: deque[int] = deque(maxlen=10)  # the last broker round trips (ms) of this twin's connection
        self._wait_for_coordinator()

    def _alter_configs(self, configs: Mapping[str, str]) -> None:
        self.alter_group_configs(self.group_id, configs)

    def alter_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Set group-level configs of `group_id` at the broker (the coordinator's are the caller's)."""
        request = message_class("IncrementalAlterConfigsRequest")
        response = self.conn.send(request(resources=[request.AlterConfigsResource(
            resource_type=GROUP_RESOURCE, resource_name=group_id,
            configs=[request.AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items()])]))
        assert response.responses[0].error_code == 0, response.responses[0].error_message

    def _wait_for_coordinator(self) -> None:
        find = message_class("FindCoordinatorRequest")
        for _ in range(120):
            if self.conn.send(find(key_type=0, coordinator_keys=[self.group_id])).coordinators[0].error_code == 0:
                return
            time.sleep(0.25)
        raise AssertionError("the broker's group coordinator did not load")

    @staticmethod
    def now() -> int:
        return int(time.monotonic() * 1000)

    def timed(self, request: Any, version: int | None = None) -> Any:
        """The broker's answer, its round trip noted."""
        started = time.monotonic()
        answer = self.conn.send(request, version)
        self.round_trips.append(int((time.monotonic() - started) * 1000))
        return answer

    def margin_ms(self) -> int:
        return RACE_MARGIN_MS + 2 * max(self.round_trips, default=0)

    def deadlines(self) -> list[int]:
        """The coordinator's session, rebalance and assignment deadlines, of every group."""
        out = []
        for g in self.coordinator.groups.values():
            out += list(g.session_deadlines.values()) + [d for d, _ in g.rebalance_deadlines.values()]
            if g.pending_assignment_at is not None:
                out.append(g.pending_assignment_at)
        return out

    def settle(self) -> None:
        """Sleep past any deadline within `margin_ms` of now (see RACE_MARGIN_MS)."""
        while True:
            self.poll()
            now, margin = self.now(), self.margin_ms()
            near = [d for d in self.deadlines() if now - margin <= d <= now + margin]
            if not near:
                return
            time.sleep((max(near) + margin + 20 - now) / 1000)

    def broker_topics(self) -> dict[str, int]:
        response = self.timed(message_class("MetadataRequest")(topics=None))
        return {t.name: len(t.partitions) for t in response.topics if t.error_code == 0 and not t.is_internal}

    def sync_topics(self) -> None:
        self.coordinator.set_topics(self.broker_topics())

    def create_topic(self, name: str, partitions: int) -> None:
        self.broker.create_topic(name, partitions)
        self.wait_for_topics([name])

    def wait_for_topics(self, names: list[str], settle_s: float = 0.0,
                        partitions: Mapping[str, int] | None = None) -> None:
        """Wait until the broker's metadata has `names` (with `partitions` where given) and its group coordinator
        sees them too (its metadata image follows the broker's a moment later, longer on a loaded host): a probe
        member of a new group on the same `__consumer_offsets` partition joins with one subtopology per topic
        until none is reported missing and each has the tasks its partitions make."""
        deadline = time.monotonic() + 60
        while True:
            known = self.broker_topics()
            if all(n in known and (partitions is None or known[n] == partitions.get(n, known[n])) for n in names):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"topics {names} did not appear")
            time.sleep(0.05)
        names = sorted(names)
        topo = topology(0, [{"id": str(i), "sources": [n]} for i, n in enumerate(names)])
        while True:
            probe, member = self._probe_group(), f"probe-{uuid.uuid4().hex[:8]}"
            self.alter_group_configs(probe, BASE_CONFIGS)
            answer = self.conn.send(HB(group_id=probe, member_id=member, member_epoch=0, rebalance_timeout_ms=1000,
                                       process_id="probe", endpoint_information_epoch=0, active_tasks=[],
                                       standby_tasks=[], warmup_tasks=[], topology=topo))
            if answer.error_code == 0:
                self.conn.send(HB(group_id=probe, member_id=member, member_epoch=-1, rebalance_timeout_ms=-1,
                                  endpoint_information_epoch=0, active_tasks=None, standby_tasks=None,
                                  warmup_tasks=None))
            tasks = {t.subtopology_id: len(t.partitions) for t in answer.active_tasks or ()}
            missing = any(s.status_code == MISSING_SOURCE_TOPICS for s in answer.status)
            want = partitions or {}
            counted = all(tasks.get(str(i)) == want.get(n, tasks.get(str(i))) for i, n in enumerate(names))
            seen = answer.error_code == 0 and not missing and counted
            if seen or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.coordinator.mark_written()  # the probe's records were a write on this group's coordinator partition
        time.sleep(settle_s)

    def _probe_group(self) -> str:
        """A new group id (an empty group keeps its topology) on this twin's group's coordinator partition."""
        return self.same_partition_group(f"{self.group_id}-probe-{uuid.uuid4().hex[:8]}")

    def same_partition_group(self, prefix: str) -> str:
        """`prefix-N`, the first such group id whose `__consumer_offsets` partition is this twin's group's (Kafka's
        partitionFor: the id's Java hash code modulo the partition count): a coordinator partition snapshots its
        groups together, as the coordinator here does."""
        metadata = self.conn.send(message_class("MetadataRequest")(topics=[
            message_class("MetadataRequest").MetadataRequestTopic(name="__consumer_offsets")]))
        count = len(metadata.topics[0].partitions) or 1
        target = _partition(self.group_id, count)
        for i in range(10_000):
            if _partition(f"{prefix}-{i}", count) == target:
                return f"{prefix}-{i}"
        raise AssertionError("no group id found")

    def heartbeat(self, member: str, epoch: int | None = None, **fields: Any) -> tuple[dict, dict]:
        """One heartbeat of `member` (epoch: its last epoch unless given; tasks: none owned unless given)."""
        request = self.request(member, epoch, **fields)
        broker, ours = self.send(request)
        if broker["errorCode"] == 0 and broker["memberEpoch"] >= 0:
            self.epochs[member] = broker["memberEpoch"]
            if broker["activeTasks"] is not None:
                self.owned[member] = {
                    role: [HB.TaskIds(subtopology_id=t["subtopologyId"], partitions=t["partitions"])
                           for t in broker[f"{role}Tasks"]] for role in ("active", "standby", "warmup")}
        elif broker["errorCode"] or broker["memberEpoch"] < 0:
            self.epochs.pop(member, None)
            self.owned.pop(member, None)
        missing = [s["statusDetail"].split(": ", 1)[1] for s in broker["status"] if s["statusCode"] == 3]
        if missing:  # the broker creates the internal topics it reports; wait until they exist
            self.wait_for_topics([t.strip() for t in missing[0].split(",")])
        return broker, ours

    def request(self, member: str, epoch: int | None = None, **fields: Any) -> Any:
        epoch = self.epochs.get(member, 0) if epoch is None else epoch
        values = dict(group_id=self.group_id, member_id=member, member_epoch=epoch, endpoint_information_epoch=0,
                      rebalance_timeout_ms=30000 if epoch == 0 else -1, process_id=f"process-{member}",
                      **{f"{role}_tasks": [] if epoch == 0 else self.owned.get(member, {}).get(role, [])
                         for role in ("active", "standby", "warmup")},
                      topology=topology() if epoch == 0 else None)
        values.update(fields)
        return HB(**values)

    def send(self, request: Any, version: int | None = None) -> tuple[dict, dict]:
        version = self.conn.version_for(type(request)) if version is None else version
        self.settle()
        now = self.now()
        self.records += self.coordinator.poll(now)[0]  # as a shell would at the coordinator's deadlines
        broker = self.timed(request, version)
        header = HEADER(request_api_key=request.api_key, request_api_version=version, correlation_id=0,
                        client_id=CLIENT_ID)
        ours, records = self.coordinator.handle(header, request, now, client_host=CLIENT_HOST)
        self.records += records
        ours = type(ours).decode(ours.encode(version), version)  # what a client would read off the wire
        return broker.to_json(version), ours.to_json(version)

    def describe(self) -> tuple[dict, dict]:
        broker, ours = self.send(DESCRIBE(group_ids=[self.group_id]))
        return broker["groups"][0], ours["groups"][0]

    def poll(self) -> None:
        self.sync_topics()
        self.records += self.coordinator.poll(self.now())[0]

    def broker_records(self) -> list[rec.CoordinatorRecord]:
        """The group's records in the broker's `__consumer_offsets`, in log order."""
        out = []
        for partition in sorted(self.broker.data_dir.glob("__consumer_offsets-*")):
            for segment in sorted(partition.glob("*.log")):
                for entry in read_segment(segment):
                    if not isinstance(entry, RecordBatch) or entry.is_control:
                        continue
                    for record in entry.records:
                        decoded = rec.decode(record.key, record.value)
                        if decoded is not None and decoded.group_id == self.group_id:
                            out.append(decoded)
        return out


def _partition(group_id: str, count: int) -> int:
    """Kafka's partitionFor: Utils.abs of the id's String.hashCode (Integer.MIN_VALUE is 0) modulo `count`."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % count


def comparable(record: rec.CoordinatorRecord) -> tuple:
    """A record without what legitimately differs: the metadata hash and the assignment timestamp."""
    value = record.value
    if value is not None and hasattr(value, "metadata_hash"):
        value = value.replace(metadata_hash=0)
    if value is not None and hasattr(value, "assignment_timestamp"):
        value = value.replace(assignment_timestamp=0)
    if value is not None and hasattr(value, "commit_timestamp"):
        value = value.replace(commit_timestamp=0)
    return type(record.key).__name__, record.key.to_json(0), None if value is None else value.to_json(
        record.value_version)

"""The state of one streams group, changed only by replaying its records (live or from a log)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kprotocol.streams_group.java_order import TimelineOrder
from kprotocol.streams_group.member import STABLE, Member, Owners
from kprotocol.streams_group.records import CoordinatorRecord, epochs_from, tasks_from
from kprotocol.streams_group.tasks import EMPTY, TaskSets
from kprotocol.streams_group.topology import Configured
from kprotocol.timeline import DeadlineMap, EpochDeadlineMap, TDict, TimelineObject, stamp

EMPTY_STATE, NOT_READY, ASSIGNING, RECONCILING, STABLE_STATE = "Empty", "NotReady", "Assigning", "Reconciling", "Stable"


@dataclass
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass
class StreamsGroup(TimelineObject):
    """Hard state (from records) and soft state (timers, configured topology, offsets reported by members);
    every field and map journals its changes (kprotocol.timeline), so a group rolls back in what changed."""

    group_id: str
    epoch: int = 0
    metadata_hash: int = 0
    validated_topology_epoch: int = -1
    last_assignment_configs: dict[str, str] = field(default_factory=TDict)
    topology: Any = None
    assignment_epoch: int = 0
    assignment_timestamp: int = 0
    members: dict[str, Member] = field(default_factory=TDict)
    targets: dict[str, TaskSets] = field(default_factory=TDict)
    static_members: dict[str, str] = field(default_factory=TDict)
    offsets: dict[tuple[str, int], OffsetEntry] = field(default_factory=TDict)
    owners: Owners = field(default_factory=Owners)
    member_order: TimelineOrder = field(default_factory=TimelineOrder)  # Kafka's iteration order of members
    offset_order: dict[str, TimelineOrder] = field(default_factory=TDict)  # topics and their partitions, as
    topic_order: TimelineOrder = field(default_factory=TimelineOrder)     # Kafka iterates a group's offsets
    exists: bool = False
    # soft state
    configured: Configured | None = None
    # the configured topology StreamsGroupDescribe shows: Kafka describes its committed state, and a heartbeat that
    # configures the topology but writes nothing (or fails) changes it only at the coordinator's next write
    configured_at: int = -1  # the coordinator's write count when `configured` was set
    described_before: Configured | None = None  # what was described until then
    topics_version: int = -1
    endpoint_information_epoch: int = 0
    shutdown_requested_by: str | None = None
    task_offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=TDict)
    task_end_offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=TDict)
    caught_up: dict[str, set[tuple[str, int]]] = field(default_factory=TDict)  # warm-ups seen caught up
    session_deadlines: DeadlineMap = field(default_factory=DeadlineMap)
    rebalance_deadlines: EpochDeadlineMap = field(default_factory=EpochDeadlineMap)  # member -> (deadline, epoch)
    pending_assignment_at: int | None = None
    # member epoch -> how many members are reconciled (STABLE) at it: the group's state without a scan
    reconciled_at: dict[int, int] = field(default_factory=TDict)
    # Kafka's refined assignment: (target epoch, member -> tasks) the members reconcile towards, kept across
    # heartbeats and changed in place (a refused heartbeat does not undo it)
    refined: tuple[int, dict[str, TaskSets]] | None = None
    refined_from: int | None = None  # the `targets_version` the refined tasks were copied at (None: changed since)
    targets_version: int = 0  # unique to the targets as they are (kprotocol.timeline.stamp)
    members_stamp: int = 0  # unique to the members as they are (kprotocol.timeline.stamp): keys what is built of them

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY_STATE
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return NOT_READY
        if self.epoch > self.assignment_epoch:
            return ASSIGNING
        if self.reconciled_at.get(self.assignment_epoch, 0) != len(self.members):
            return RECONCILING
        return STABLE_STATE

    def configure(self, configured: Configured | None, writes: int) -> None:
        """Set the configured topology, `writes` writes into the coordinator's life."""
        self.described_before = self.described(writes)
        self.configured, self.configured_at = configured, writes

    def described(self, writes: int) -> Configured | None:
        """The configured topology as of the coordinator's last write, `writes` writes into its life."""
        return self.configured if writes > self.configured_at else self.described_before

    def target(self, member_id: str) -> TaskSets:
        return self.targets.get(member_id, EMPTY)

    def refined_for(self, epoch: int) -> dict[str, TaskSets] | None:
        return self.refined[1] if self.refined is not None and self.refined[0] == epoch else None

    def relabel_refined(self, old_id: str, new_id: str) -> None:
        """Give `old_id`'s cached refined tasks to `new_id` (a static member's new member id)."""
        if self.refined is not None and old_id in self.refined[1]:
            tasks = {**self.refined[1]}
            tasks[new_id] = tasks.pop(old_id)
            self.refined, self.refined_from = (self.refined[0], tasks), None

    def cache_refined(self, epoch: int, refined: dict[str, TaskSets]) -> None:
        """Keep `refined` as the tasks members reconcile towards at `epoch`; the targets themselves are copied,
        once per change of them (a steady heartbeat finds its copy already there)."""
        if self.refined is not None and self.refined[0] == epoch and self.refined[1] is refined:
            return
        if refined is not self.targets:
            self.refined, self.refined_from = (epoch, refined), None
        elif self.refined is None or self.refined[0] != epoch or self.refined_from != self.targets_version:
            self.refined, self.refined_from = (epoch, dict(refined)), self.targets_version

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one record (a tombstone removes what its key names)."""
        key, value = record.key, record.value
        name = type(key).__name__
        if record.type_id == 1:
            entry = (key.topic, key.partition)
            if value is None:
                if self.offsets.pop(entry, None) is not None:
                    partitions = self.offset_order[key.topic]
                    partitions.remove(key.partition)
                    if not partitions:
                        del self.offset_order[key.topic]
                        self.topic_order.remove(key.topic)
            else:
                self.offsets[entry] = OffsetEntry(value.offset, value.leader_epoch, value.metadata,
                                                  value.commit_timestamp, value.expire_timestamp)
                if key.topic not in self.offset_order:
                    self.offset_order[key.topic] = TimelineOrder()
                    self.topic_order.add(key.topic)
                self.offset_order[key.topic].add(key.partition)
        elif name == "StreamsGroupMetadataKey":
            if value is None:
                self.exists = False
            else:
                self.exists = True
                self.epoch, self.metadata_hash = value.epoch, value.metadata_hash
                self.validated_topology_epoch = value.validated_topology_epoch
                self.last_assignment_configs = {c.key: c.value for c in value.last_assignment_configs or ()}
        elif name == "StreamsGroupTopologyKey":
            self.topology = value
        elif name == "StreamsGroupMemberMetadataKey":
            self._replay_member(key.member_id, value)
        elif name == "StreamsGroupTargetAssignmentMemberKey":
            self.targets_version = stamp()
            if value is None:
                self.targets.pop(key.member_id, None)
            else:
                self.targets[key.member_id] = TaskSets(tasks_from(value.active_tasks), tasks_from(value.standby_tasks),
                                                       tasks_from(value.warmup_tasks))
        elif name == "StreamsGroupTargetAssignmentMetadataKey":
            if value is None:
                self.assignment_epoch = self.assignment_timestamp = 0
            else:
                self.assignment_epoch, self.assignment_timestamp = value.assignment_epoch, value.assignment_timestamp
        elif name == "StreamsGroupCurrentMemberAssignmentKey":
            self._replay_assignment(key.member_id, value)

    def _replay_member(self, member_id: str, value: Any) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self.members_stamp = stamp()
                self.owners.remove(old)
                self._count(old, -1)
                del self.members[member_id]
                self.member_order.remove(member_id)
                if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                    del self.static_members[old.instance_id]
            return
        endpoint = None if value.user_endpoint is None else (value.user_endpoint.host, value.user_endpoint.port)
        member = dataclasses.replace(
            old or Member(member_id), instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
            client_host=value.client_host, rebalance_timeout_ms=value.rebalance_timeout_ms,
            topology_epoch=value.topology_epoch, process_id=value.process_id, user_endpoint=endpoint,
            client_tags=tuple((kv.key, kv.value) for kv in value.client_tags))
        self._put(old, member)

    def _replay_assignment(self, member_id: str, value: Any) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._put(old, dataclasses.replace(old, assigned=EMPTY, pending_revocation=EMPTY, active_epochs={}))
            return
        base = old or Member(member_id)
        active = value.active_tasks + value.active_tasks_pending_revocation
        member = dataclasses.replace(
            base, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
            state=value.state,
            assigned=TaskSets(tasks_from(value.active_tasks), tasks_from(value.standby_tasks),
                              tasks_from(value.warmup_tasks)),
            pending_revocation=TaskSets(tasks_from(value.active_tasks_pending_revocation),
                                        tasks_from(value.standby_tasks_pending_revocation),
                                        tasks_from(value.warmup_tasks_pending_revocation)),
            active_epochs=epochs_from(active, value.member_epoch))
        self._put(old, member)

    def _put(self, old: Member | None, member: Member) -> None:
        self.members_stamp = stamp()
        if old is not None:
            self.owners.remove(old)
            self._count(old, -1)
        self.member_order.add(member.member_id)
        self.members[member.member_id] = member
        self.owners.add(member)
        self._count(member, 1)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def _count(self, member: Member, delta: int) -> None:
        if member.state == STABLE:
            count = self.reconciled_at.get(member.member_epoch, 0) + delta
            if count:
                self.reconciled_at[member.member_epoch] = count
            else:
                del self.reconciled_at[member.member_epoch]

    def hard_state(self) -> dict[str, Any]:
        """Everything the records define, for comparing a replayed group with a live one."""
        return {"epoch": self.epoch, "metadataHash": self.metadata_hash, "exists": self.exists,
                "validatedTopologyEpoch": self.validated_topology_epoch,
                "lastAssignmentConfigs": self.last_assignment_configs, "topology": self.topology,
                "assignmentEpoch": self.assignment_epoch, "assignmentTimestamp": self.assignment_timestamp,
                "members": self.members, "targets": self.targets, "staticMembers": self.static_members,
                "offsets": self.offsets}

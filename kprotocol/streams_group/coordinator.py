"""The streams-group coordinator of KIP-1071 as a sans-IO state machine.

    coordinator = StreamsGroupCoordinator(topics={"input": 4})
    response, records = coordinator.handle(header, request, now_ms)   # typed messages in and out
    records, next_deadline = coordinator.poll(now_ms)                  # session and rebalance time-outs

Every state change is a `CoordinatorRecord` of `__consumer_offsets`, applied to the state by the
same `replay` a restarted coordinator uses, so a coordinator rebuilt from its records answers
the next heartbeats as if it had never stopped. The topics the cluster has are the caller's
view (`set_topics`); internal topics that must be created are left in `internal_topics_to_create`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kprotocol.assignor import ScenarioError, TaskAssignmentError
from kprotocol import timeline
from kprotocol.registry import api_classes
from kprotocol.runtime.struct import Message
from kprotocol.streams_group import records as rec
from kprotocol.streams_group.assignment import AssignmentSettings, compute_targets
from kprotocol.streams_group.errors import (FENCED_INSTANCE_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND,
                                            GROUP_MAX_SIZE_REACHED, ILLEGAL_GENERATION, INVALID_REQUEST,
                                            STALE_MEMBER_EPOCH,
                                            STREAMS_INVALID_TOPOLOGY, UNKNOWN_MEMBER_ID, UNKNOWN_SERVER_ERROR,
                                            UNRELEASED_INSTANCE_ID, UNSUPPORTED_VERSION, CoordinatorError)
from kprotocol.streams_group.group import STABLE_STATE, StreamsGroup
from kprotocol.streams_group.java_order import hash_order
from kprotocol.streams_group.member import UNREVOKED_TASKS, Member, reconcile
from kprotocol.streams_group.records import CoordinatorRecord
from kprotocol.streams_group.tasks import EMPTY, TaskSets, contains
from kprotocol.streams_group.topology import (ASSIGNMENT_DELAYED, SHUTDOWN_APPLICATION, STALE_TOPOLOGY, Configured,
                                              InternalTopic, configure, describe, from_request, required_topics,
                                              same_topology, stateful_subtopologies, validate_names)
from kprotocol.timeline import TSet

STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE = 88, 89
OFFSET_COMMIT, OFFSET_FETCH, LEAVE_GROUP, TXN_OFFSET_COMMIT = 8, 9, 13, 28
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
INITIAL_DELAY_DETAIL = "Assignment delayed due to the configured initial rebalance delay."
INTERVAL_DETAIL = "Assignment delayed due to the configured assignment interval."
_ASSIGNMENT_CONFIGS = {"streams.assignor.name": "assignor", "streams.num.standby.replicas": "num_standby_replicas",
                       "streams.num.warmup.replicas": "num_warmup_replicas",
                       "streams.acceptable.recovery.lag": "acceptable_recovery_lag"}


@dataclass(frozen=True)
class GroupConfig:
    """Per-group settings; the defaults are Apache Kafka's broker defaults."""

    heartbeat_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    task_offset_interval_ms: int = 60_000
    assignment_interval_ms: int = 1_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 2**31 - 1
    assignment: AssignmentSettings = AssignmentSettings()

    NAMES = {f"streams.{name.replace('_', '.')}": name for name in (
        "session_timeout_ms", "heartbeat_interval_ms", "task_offset_interval_ms", "assignment_interval_ms",
        "initial_rebalance_delay_ms")}  # Kafka's group config name -> attribute (the assignment's: _ASSIGNMENT_CONFIGS)

    @classmethod
    def kafka_names(cls) -> list[str]:
        """Every group config name `from_kafka` reads."""
        return sorted([*cls.NAMES, *_ASSIGNMENT_CONFIGS])

    @classmethod
    def from_kafka(cls, configs: Mapping[str, str], base: GroupConfig | None = None) -> GroupConfig:
        """Settings from Kafka's group-level config names (`streams.session.timeout.ms`...); an unknown
        name (with the closest known one) or a value that is not an integer is a ValueError."""
        import difflib

        base = base or cls()
        unknown = sorted(set(configs) - set(cls.NAMES) - set(_ASSIGNMENT_CONFIGS))
        if unknown:
            hints = [f"{u} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(
                u, cls.kafka_names(), 1)) else u for u in unknown]
            raise ValueError(f"unknown streams group configs: {', '.join(hints)}")
        numbers = {}
        for k, v in configs.items():
            if k != "streams.assignor.name":
                try:
                    numbers[k] = int(v)
                except ValueError:
                    raise ValueError(f"{k} must be an integer, not {v!r}") from None
        changes = {cls.NAMES[k]: numbers[k] for k in configs if k in cls.NAMES}
        assignment = {_ASSIGNMENT_CONFIGS[k]: (v if k == "streams.assignor.name" else numbers[k])
                      for k, v in configs.items() if k in _ASSIGNMENT_CONFIGS}
        return dataclasses.replace(base, assignment=dataclasses.replace(base.assignment, **assignment), **changes)

    def assignment_configs(self) -> dict[str, str]:
        """The configs whose change triggers a rebalance (stored in the group's metadata record)."""
        return {"num.standby.replicas": str(self.assignment.num_standby_replicas)}


@dataclass
class _Heartbeat:
    """What one heartbeat computes before its records are applied."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    statuses: list[tuple[int, str]] = field(default_factory=list)


class StreamsGroupCoordinator:
    """Streams groups of one coordinator; no I/O, no clock: callers pass `now_ms`."""

    def __init__(self, config: GroupConfig = GroupConfig(), topics: Mapping[str, int] | None = None,
                 group_configs: Mapping[str, GroupConfig] | None = None) -> None:
        self.config = config
        self.group_configs = dict(group_configs or {})
        self.groups: dict[str, StreamsGroup] = {}
        self.topics: dict[str, int] = dict(topics or {})
        self.topics_version = 0
        self.internal_topics_to_create: dict[str, InternalTopic] = {}
        self.classic_members: dict[str, set[str]] = {}  # group -> members speaking the classic protocol (compat)
        self._pending_txn: dict[int, list[CoordinatorRecord]] = {}
        self.writes = 0  # how many writes this coordinator made (`mark_written`)
        # built once per version of what they are built of (members, topics), shared by heartbeats
        self._endpoint_lists: dict[str, tuple] = {}  # group -> (key..., [(member id, endpoint entry)])
        self._endpoint_entries: dict[str, dict[str, tuple]] = {}  # group -> member -> (key, topics version, entry)
        self._past_validation = False  # the heartbeat being handled got past the validation of its owned tasks

    # --- inputs other than requests ------------------------------------------------------------

    def set_topics(self, topics: Mapping[str, int]) -> None:
        """Replace the view of the cluster's topics (name -> partition count)."""
        if dict(topics) != self.topics:
            self.topics = dict(topics)
            self.topics_version += 1

    def replay(self, records: Iterable[CoordinatorRecord | tuple[bytes, bytes | None]]) -> None:
        """Apply records (typed, or raw key/value bytes of `__consumer_offsets`) in log order."""
        for record in records:
            if not isinstance(record, CoordinatorRecord):
                record = rec.decode(*record)
                if record is None:
                    continue
            if record.type_id == rec.GROUP_METADATA:
                continue  # a classic group's record: compat's to replay
            self._group_for_replay(record.group_id).replay(record)

    @classmethod
    def from_records(cls, records: Iterable[CoordinatorRecord | tuple[bytes, bytes | None]],
                     now_ms: int | None = None, **kwargs: Any) -> StreamsGroupCoordinator:
        """A coordinator rebuilt from its log; with `now_ms`, it also starts every member's timers then."""
        coordinator = cls(**kwargs)
        coordinator.replay(records)
        if now_ms is not None:
            coordinator.start_timers(now_ms)
        return coordinator

    def start_timers(self, now_ms: int) -> None:
        """After loading: a session time-out for every member, a rebalance time-out for those revoking."""
        for group in self.groups.values():
            session = self.config_for(group.group_id).session_timeout_ms
            for member in group.members.values():
                group.session_deadlines[member.member_id] = now_ms + session
                if member.state == UNREVOKED_TASKS:
                    group.rebalance_deadlines[member.member_id] = (now_ms + member.rebalance_timeout_ms,
                                                                   member.member_epoch)

    def config_for(self, group_id: str) -> GroupConfig:
        return self.group_configs.get(group_id, self.config)

    def group(self, group_id: str) -> StreamsGroup | None:
        group = self.groups.get(group_id)
        return group if group is not None and group.exists else None

    # --- requests -----------------------------------------------------------------------------

    def handle(self, header: Message, request: Message, now_ms: int, *,
               client_host: str = "") -> tuple[Message, list[CoordinatorRecord]]:
        """Answer one request; the records it returns are already applied."""
        response, records = self._handle(header, request, now_ms, client_host)
        if records:
            self.mark_written()
        return response, records

    def _handle(self, header: Message, request: Message, now_ms: int,
                client_host: str) -> tuple[Message, list[CoordinatorRecord]]:
        api_key, version = header.request_api_key, header.request_api_version
        if api_key == STREAMS_GROUP_HEARTBEAT:
            return self._heartbeat(header, request, version, now_ms, client_host)
        if api_key == STREAMS_GROUP_DESCRIBE:
            return self._describe(request, version), []
        if api_key == OFFSET_COMMIT:
            return self._offset_commit(request, version, now_ms)
        if api_key == TXN_OFFSET_COMMIT:
            return self._txn_offset_commit(request, version, now_ms)
        if api_key == OFFSET_FETCH:
            return self._offset_fetch(request, version), []
        if api_key == LEAVE_GROUP:
            return self._leave_group(request, version, now_ms)
        raise ValueError(f"the streams-group coordinator does not handle api key {api_key}")

    def mark_written(self, group: StreamsGroup | None = None) -> None:
        """A write on this coordinator's `__consumer_offsets` partition (by `group` or any other): Kafka snapshots
        the state of every group there, topologies configured in place included, and StreamsGroupDescribe shows
        the last snapshot. O(1): each group compares when it configured its topology with the writes since."""
        self.writes += 1

    def poll(self, now_ms: int) -> tuple[list[CoordinatorRecord], int | None]:
        """Expire sessions and rebalance time-outs, run delayed assignments; (records, next deadline)."""
        out: list[CoordinatorRecord] = []
        for group_id in list(self.groups):
            out += self.poll_group(group_id, now_ms)
        return out, self.next_deadline()

    def poll_group(self, group_id: str, now_ms: int) -> list[CoordinatorRecord]:
        """One group's timers: the records of what expired."""
        group = self.groups.get(group_id)
        out: list[CoordinatorRecord] = []
        if group is not None and group.exists:
            for _, member_id in group.session_deadlines.due(now_ms):
                group.session_deadlines.pop(member_id, None)
                if member_id in group.members:
                    out += self._apply(group, self._fence(group, member_id, now_ms))
            for member_id in _in_order(group.rebalance_deadlines, group.rebalance_deadlines.due(now_ms)):
                deadline, epoch = group.rebalance_deadlines.pop(member_id)
                member = group.members.get(member_id)
                if member is not None and member.member_epoch == epoch and member.state == UNREVOKED_TASKS:
                    out += self._apply(group, self._fence(group, member_id, now_ms))
            if group.pending_assignment_at is not None and group.pending_assignment_at <= now_ms:
                group.pending_assignment_at = None
                if group.members and group.epoch > group.assignment_epoch:
                    records: list[CoordinatorRecord] = []
                    self._assign(group, group.epoch, None, group.configured, records, now_ms)
                    out += self._apply(group, records)
        if out:
            self.mark_written(group)
        return out

    def next_deadline(self) -> int | None:
        """The earliest deadline of any group."""
        return min((d for g in self.groups.values() if (d := self.group_deadline(g)) is not None), default=None)

    @staticmethod
    def group_deadline(group: StreamsGroup) -> int | None:
        """The earliest of one group's deadlines."""
        deadlines = [d for d in (group.session_deadlines.earliest(), group.rebalance_deadlines.earliest(),
                                 group.pending_assignment_at) if d is not None]
        return min(deadlines, default=None)

    def complete_transaction(self, producer_id: int, committed: bool) -> list[CoordinatorRecord]:
        """A transaction's marker: its offset commits apply (commit) or vanish (abort)."""
        records = self._pending_txn.pop(producer_id, [])
        if committed:
            self.replay(records)
        return records if committed else []

    # --- StreamsGroupHeartbeat ------------------------------------------------------------------

    def _heartbeat(self, header: Message, req: Message, version: int, now: int,
                   client_host: str) -> tuple[Message, list[CoordinatorRecord]]:
        _, response_cls = api_classes(STREAMS_GROUP_HEARTBEAT)
        group = self.groups.get(req.group_id)
        topics_version = group.topics_version if group is not None else None
        self._past_validation = False
        with timeline.savepoint() as journal:
            mark = journal.mark()
            try:
                _validate_heartbeat(req)
                if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                    return self._leave(req, response_cls, now)
                return self._member_heartbeat(header, req, response_cls, version, now, client_host)
            except CoordinatorError as exc:  # as in Kafka, a refused heartbeat changes no record
                # nor, refused before its owned tasks were validated, any soft state; Kafka changes its task
                # offsets, timers and shutdown request in place after that point, and a later failure (the
                # assignor, the endpoints) keeps them
                if group is not None:
                    if self._past_validation:
                        group.topics_version = topics_version  # recomputed at the next one
                    else:
                        journal.undo_to(mark, keep=lambda entry: _outside_soft_state(entry, group))
                return response_cls(error_code=exc.code, error_message=exc.message, status=[]), []

    def _leave(self, req: Message, response_cls: Any, now: int) -> tuple[Message, list[CoordinatorRecord]]:
        group = self.group(req.group_id)
        if group is None:
            self._throw_if_other_group(req.group_id)
            raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        if req.shutdown_application and group.shutdown_requested_by is None:
            group.shutdown_requested_by = req.member_id
        response = response_cls(member_id=req.member_id, member_epoch=req.member_epoch, status=[])
        if req.instance_id is None:
            _member_or_throw(group, req.member_id)
            return response, self._apply(group, self._fence(group, req.member_id, now))
        member = _static_member_or_throw(group, req.instance_id, req.member_id)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            zeroed = {s: dict.fromkeys(ps, 0) for s, ps in member.assigned.active.items()}
            left = dataclasses.replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation=EMPTY,
                                       active_epochs=zeroed)
            group.rebalance_deadlines.pop(member.member_id, None)  # the session time-out stays: it expires then
            return response, self._apply(group, [rec.current_assignment(group.group_id, left)])
        return response, self._apply(group, self._fence(group, member.member_id, now))

    def _member_heartbeat(self, header: Message, req: Message, response_cls: Any, version: int, now: int,
                          client_host: str) -> tuple[Message, list[CoordinatorRecord]]:
        group_id, cfg = req.group_id, self.config_for(req.group_id)
        joining = req.member_epoch == 0
        hb = _Heartbeat()
        if joining:  # a new group (or an empty classic one it replaces) is kept only if the heartbeat succeeds
            group = self.groups.get(group_id) or StreamsGroup(group_id)
            if self.is_other_group(group_id):
                hb.records.append(rec.classic_group_tombstone(group_id))
            if req.member_id not in group.members and len(group.members) >= cfg.max_size:  # rejoining: not counted
                raise CoordinatorError(GROUP_MAX_SIZE_REACHED, "The streams group has reached its maximum "
                                                               f"capacity of {cfg.max_size} members.")
        else:
            group = self._existing_group(group_id)
        existed, replacing = group.exists, self.is_other_group(group_id)
        if req.instance_id is not None:  # Kafka hands the instance's cached target to the new id before any check
            owner = group.static_members.get(req.instance_id)
            if owner in group.members and owner != req.member_id:
                group.relabel_refined(owner, req.member_id)
        owned = None
        if req.active_tasks is not None and req.standby_tasks is not None and req.warmup_tasks is not None:
            owned = TaskSets.from_wire(req.active_tasks, req.standby_tasks, req.warmup_tasks)
        member, replaced = self._member_for(group, req, joining, owned, hb.records)

        # 1. the member's metadata
        updated = dataclasses.replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            topology_epoch=req.topology.epoch if req.topology is not None else member.topology_epoch,
            client_id=header.client_id or "", client_host=client_host,
            process_id=req.process_id if req.process_id is not None else member.process_id,
            client_tags=_tags(req.client_tags) if req.client_tags is not None else member.client_tags,
            user_endpoint=(req.user_endpoint.host, req.user_endpoint.port) if req.user_endpoint is not None
            else None if joining else member.user_endpoint)  # a (re)join without an endpoint clears it (Kafka 4.4)
        # A new member, or a change of a member's metadata, bumps the group epoch: as Kafka 4.4 does, any change
        # of a dynamic member's but its instance id's, a change of a static member's topology epoch, rack, client
        # tags or process (one rejoining under a new member id is no new member: it takes the old one's place);
        # for the classic members compat translates, only changes the assignor sees do.
        bump = member.member_id not in group.members and replaced is None
        if updated.metadata() != member.metadata():
            hb.records.append(rec.member_metadata(group_id, updated))
            fields = _METADATA_FIELDS if updated.instance_id is None else _STATIC_EPOCH_FIELDS
            bump = bump or any(getattr(updated, f) != getattr(member, f) for f in fields if f != "instance_id")
            if member.member_id in self.classic_members.get(group_id, ()):
                bump = replaced is not None or member.member_id not in group.members or \
                    (updated.process_id, updated.rack_id, updated.client_tags) != \
                    (member.process_id, member.rack_id, member.client_tags)

        # Task offsets: a warm-up task that caught up asks for a new assignment (KIP-441's probing rebalance).
        if req.task_offsets is not None:
            _put_if_changed(group.task_offsets, member.member_id,
                            {(t.subtopology_id, t.partition): t.offset for t in req.task_offsets})
        if req.task_end_offsets is not None:
            _put_if_changed(group.task_end_offsets, member.member_id,
                            {(t.subtopology_id, t.partition): t.offset for t in req.task_end_offsets})
        if req.task_offsets is not None and self._warmups_caught_up(group, member, cfg):
            bump = True

        # 2. the topology
        topology = self._topology(group, req, hb.records)
        if group.topology is not None and updated.topology_epoch < group.topology.epoch:
            hb.statuses.append((STALE_TOPOLOGY, f"The member's topology epoch {updated.topology_epoch} is behind "
                                                f"the group's topology epoch {group.topology.epoch}."))

        # 3. the topics: metadata hash, configured topology, validation
        configured, metadata_hash = group.configured, group.metadata_hash
        reconfigure = group.topology is None
        if reconfigure or configured is None or group.topics_version != self.topics_version:
            metadata_hash = self._metadata_hash(topology)
            if metadata_hash != group.metadata_hash:
                bump = reconfigure = True
            if reconfigure or configured is None:
                configured = configure(topology, self.topics)
                group.configure(configured, self.writes)
            group.topics_version = self.topics_version
        validated = -1
        if configured.is_ready:
            validated = topology.epoch
            for tasks in (req.active_tasks, req.standby_tasks, req.warmup_tasks):
                _check_tasks(configured, tasks)
        self._past_validation = True
        bump |= validated != group.validated_topology_epoch
        configs = cfg.assignment_configs()
        bump |= configs != group.last_assignment_configs
        # The targets as they stand (a static member rejoining under a new member id inherits its predecessor's).
        # A stable group whose member holds other tasks than its target (the cached target Kafka reconciles
        # towards was relabelled by a refused static join): a new epoch for the same target (Kafka's REFINED).
        targets: Mapping[str, TaskSets] = group.targets  # read only: copied where changed or kept
        if replaced not in (None, updated.member_id):
            targets = dict(targets)
            targets[updated.member_id] = targets.pop(replaced, EMPTY)
        refined, refine_only = None, False
        if not bump and group.state == STABLE_STATE:
            refined = targets
            refine_only = bump = refined.get(updated.member_id, EMPTY) != updated.assigned
        epoch = group.epoch
        if bump:
            epoch = 2 if epoch == 0 else epoch + 1
            hb.records.append(rec.group_metadata(group_id, epoch, metadata_hash, validated, configs))
        if not group.members and cfg.initial_rebalance_delay_ms > 0 and group.pending_assignment_at is None:
            group.pending_assignment_at = now + cfg.initial_rebalance_delay_ms
            group_initial_delay = True
        else:
            group_initial_delay = group.pending_assignment_at is not None and group.assignment_epoch == 0

        # 4. the target assignment
        if epoch > group.assignment_epoch:
            if group_initial_delay and group.pending_assignment_at is not None and now < group.pending_assignment_at:
                target_epoch, targets = max(1, group.assignment_epoch), {}
                hb.statuses.append((ASSIGNMENT_DELAYED, INITIAL_DELAY_DETAIL))
            elif refine_only and group.assignment_epoch >= group.epoch:
                target_epoch = epoch
                hb.records.append(rec.target_metadata(group_id, epoch, group.assignment_timestamp))
            elif group.assignment_epoch > 0 and now < group.assignment_timestamp + cfg.assignment_interval_ms:
                target_epoch = group.assignment_epoch
                hb.statuses.append((ASSIGNMENT_DELAYED, INTERVAL_DETAIL))
                group.pending_assignment_at = group.assignment_timestamp + cfg.assignment_interval_ms
            else:
                members = {**group.members, updated.member_id: updated}
                if replaced not in (None, updated.member_id):
                    members.pop(replaced, None)
                targets = self._assign(group, epoch, members, configured, hb.records, now, targets)
                target_epoch = epoch
        else:
            target_epoch = group.assignment_epoch
        # What the member reconciles towards: Kafka's refined assignment, cached per target epoch while
        # warm-ups are on (refining is the identity in Kafka 4.4, but the cache outlives changes of the targets)
        if refined is None:
            cached = group.refined_for(target_epoch)
            refined = targets if cached is None else cached
        if cfg.assignment.num_warmup_replicas > 0:
            group.cache_refined(target_epoch, refined)
        target = refined.get(updated.member_id, EMPTY)

        # 5. reconciliation
        reconciled = updated
        if not updated.is_reconciled_to(target_epoch):
            if owned is not None and any(len({t.subtopology_id for t in ts}) != len(ts) for ts in (
                    req.active_tasks, req.standby_tasks, req.warmup_tasks)):
                raise CoordinatorError(UNKNOWN_SERVER_ERROR)  # Kafka maps the owned tasks: a repeated subtopology fails
            reconciled = reconcile(updated, target_epoch, target, group.owners, owned)
            if reconciled.assignment() != updated.assignment():
                hb.records.append(rec.current_assignment(group_id, reconciled))
                if reconciled.state == UNREVOKED_TASKS:
                    group.rebalance_deadlines[reconciled.member_id] = (now + reconciled.rebalance_timeout_ms,
                                                                       reconciled.member_epoch)
                else:
                    group.rebalance_deadlines.pop(reconciled.member_id, None)
        group.session_deadlines[reconciled.member_id] = now + cfg.session_timeout_ms
        if req.shutdown_application and group.shutdown_requested_by is None:
            group.shutdown_requested_by = reconciled.member_id

        # the response
        response = response_cls(member_id=reconciled.member_id, member_epoch=reconciled.member_epoch,
                                heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                                task_offset_interval_ms=cfg.task_offset_interval_ms,
                                **_recovery_lag(version, cfg.assignment.acceptable_recovery_lag))
        changes: dict[str, Any] = {}
        endpoint_epoch = group.endpoint_information_epoch
        if joining or reconciled.assigned != member.assigned:
            ids = response_cls.TaskIds
            changes.update(active_tasks=_wire(ids, reconciled.assigned.active),
                           standby_tasks=_wire(ids, reconciled.assigned.standby),
                           warmup_tasks=_wire(ids, reconciled.assigned.warmup))
        if reconciled.user_endpoint != member.user_endpoint or \
                (reconciled.user_endpoint is not None and reconciled.assigned != member.assigned):
            endpoint_epoch += 1  # what others know of this member's endpoint changed
        # Kafka counts on the group object of the request, which a new group does not keep (one replacing
        # a classic group answers with the count all the same). The count is no record: it stays even when
        # mapping the endpoints below fails the heartbeat.
        if existed and group.endpoint_information_epoch != endpoint_epoch:
            group.endpoint_information_epoch = endpoint_epoch
        if endpoint_epoch != req.endpoint_information_epoch:
            changes["partitions_by_user_endpoint"] = self._endpoints(group, reconciled, topology, configured,
                                                                     response_cls, replaced)
        if existed or replacing:
            changes["endpoint_information_epoch"] = endpoint_epoch
        if configured.status is not None:
            hb.statuses.append(configured.status)
            self.internal_topics_to_create.update(configured.to_create)
        if group.shutdown_requested_by is not None:
            hb.statuses.append((SHUTDOWN_APPLICATION, f"Streams group member {group.shutdown_requested_by} "
                                                      "encountered a fatal error and requested a shutdown for the "
                                                      "entire application."))
        changes["status"] = [response_cls.Status(status_code=c, status_detail=d) for c, d in hb.statuses]
        if self.groups.get(group_id) is not group:
            self.groups[group_id] = group
        return response.replace(**changes), self._apply(group, hb.records)

    @staticmethod
    def _warmups_caught_up(group: StreamsGroup, member: Member, cfg: GroupConfig) -> bool:
        """Whether a warm-up task of `member` newly lags at most the acceptable recovery lag."""
        offsets = group.task_offsets.get(member.member_id, {})
        done = group.caught_up.setdefault(member.member_id, TSet())
        newly = False
        for sub, parts in member.assigned.warmup.items():
            for p in parts:
                task = (sub, p)
                if task in done or task not in offsets:
                    continue
                end = max((ends.get(task, 0) for ends in group.task_end_offsets.values()), default=0)
                if end - offsets[task] <= cfg.assignment.acceptable_recovery_lag:
                    done.add(task)
                    newly = True
        return newly

    def _member_for(self, group: StreamsGroup, req: Message, joining: bool, owned: TaskSets | None,
                    records: list[CoordinatorRecord]) -> tuple[Member, str | None]:
        """The member the heartbeat is from, and the id of a static member it replaces."""
        if req.instance_id is None:
            if joining:  # a member still in the group rejoins as it is (Kafka checks no epoch on a join)
                return group.members.get(req.member_id) or Member(req.member_id), None
            member = _member_or_throw(group, req.member_id)
            _check_epoch(member, req.member_epoch, owned)
            return member, None
        existing_id = group.static_members.get(req.instance_id)
        if not joining:
            member = _static_member_or_throw(group, req.instance_id, req.member_id)
            _check_epoch(member, req.member_epoch, owned)
            return member, None
        if existing_id is None:
            return group.members.get(req.member_id) or Member(req.member_id), None
        old = group.members[existing_id]  # even under its own member id, a static member rejoins only after -2
        if old.member_epoch != STATIC_LEAVE_EPOCH:
            raise CoordinatorError(UNRELEASED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                                   f"{req.instance_id} cannot join the group because the instance id is owned by "
                                   f"{existing_id} member.")
        new = dataclasses.replace(old, member_id=req.member_id, member_epoch=0, previous_member_epoch=0)
        records += rec.remove_member(group.group_id, existing_id)
        records += [rec.member_metadata(group.group_id, new),
                    rec.target_member(group.group_id, new.member_id, group.target(existing_id)),
                    rec.current_assignment(group.group_id, new)]
        group.session_deadlines.pop(existing_id, None)
        group.rebalance_deadlines.pop(existing_id, None)
        return new, existing_id

    def _topology(self, group: StreamsGroup, req: Message, records: list[CoordinatorRecord]) -> Any:
        if req.topology is not None and len({s.subtopology_id for s in req.topology.subtopologies}) != \
                len(req.topology.subtopologies):
            raise CoordinatorError(UNKNOWN_SERVER_ERROR)  # Kafka's map of subtopologies refuses a duplicate id
        if req.topology is None:
            if group.topology is None:
                raise CoordinatorError(UNKNOWN_SERVER_ERROR,
                                       "The topology is null and the group topology is also null.")
            return group.topology
        requested = from_request(req.topology)
        if group.topology is None:
            records.append(rec.topology(group.group_id, requested))
            return requested
        if group.topology.epoch > requested.epoch or same_topology(group.topology, requested):
            return group.topology
        raise CoordinatorError(INVALID_REQUEST, "Topology updates are not supported yet.")

    def _metadata_hash(self, topology: Any) -> int:
        """A hash of the partition counts of the topics the topology needs (0 when none exist)."""
        present = sorted((t, self.topics[t]) for t in required_topics(topology) if t in self.topics)
        if not present:
            return 0
        digest = hashlib.blake2b(repr(present).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def _assign(self, group: StreamsGroup, epoch: int, members: Mapping[str, Member] | None,
                configured: Configured | None, records: list[CoordinatorRecord], now: int,
                previous: Mapping[str, TaskSets] | None = None) -> dict[str, TaskSets]:
        """New targets for every member; records for those that changed and for the assignment epoch."""
        members = group.members if members is None else members
        previous = group.targets if previous is None else previous
        cfg = self.config_for(group.group_id)
        # Kafka fills a HashMap from its table of members, then new members: the assignor iterates that map and
        # the target records follow its order
        filled = [m for m in group.member_order if m in members] + [m for m in members if m not in group.members]
        members = {m: members[m] for m in filled}
        if configured is not None and configured.is_ready:
            topology = group.topology if group.topology is not None else None
            stateful = stateful_subtopologies(topology) if topology is not None else \
                {s for s in configured.tasks}
            try:
                targets = compute_targets(members, previous, configured.tasks, stateful, cfg.assignment,
                                          group.task_offsets, group.task_end_offsets, now)
            except (ScenarioError, TaskAssignmentError) as exc:
                raise CoordinatorError(UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment for "
                                                             f"epoch {epoch}: {exc}") from exc
        else:
            targets = {m: EMPTY for m in members}
        for member_id in hash_order(filled):
            new = targets.get(member_id, EMPTY)
            if member_id not in previous or previous[member_id] != new:
                records.append(rec.target_member(group.group_id, member_id, new))
        records.append(rec.target_metadata(group.group_id, epoch, now))
        return targets

    def _endpoints(self, group: StreamsGroup, updated: Member, topology: Any, configured: Configured | None,
                   response_cls: Any, replaced: str | None) -> list[Any]:
        """Every endpoint's partitions: the other members (not a static member this one replaces) in the order of
        Kafka's table of members as it is before this heartbeat's records (each put of a member, new or not, may
        have grown the table, which reorders it), then the member itself. The others' part is built once per
        change of the members (each member's entry once per change of it) and shared by every heartbeat."""
        skip = (updated.member_id, replaced)
        if (configured is None or configured.tasks is None) and (updated.user_endpoint is not None or any(
                m.user_endpoint for m_id, m in group.members.items() if m_id not in skip)):
            # Kafka 4.4 fails the heartbeat (no message) when it maps endpoints to partitions of a topology
            # it could not configure (missing or mis-partitioned source topics)
            raise CoordinatorError(UNKNOWN_SERVER_ERROR)
        out = [entry for m_id, entry in self._endpoint_list(group, topology, configured, response_cls)
               if m_id not in skip]
        if updated.user_endpoint is not None:
            out.append(self._endpoint_entry(group.group_id, updated, topology, configured, response_cls))
        return out

    def _endpoint_list(self, group: StreamsGroup, topology: Any, configured: Configured | None,
                       response_cls: Any) -> list[tuple[str, Any]]:
        """(member id, its entry) of every member with an endpoint, in Kafka's order of the group's members."""
        key = (group.members_stamp, self.topics_version)
        cached = self._endpoint_lists.get(group.group_id)
        if cached is not None and cached[0] == key and cached[1] is topology and cached[2] is configured \
                and cached[3] is response_cls:
            return cached[4]
        members = [group.members[m] for m in group.member_order]
        pairs = [(m.member_id, self._endpoint_entry(group.group_id, m, topology, configured, response_cls))
                 for m in members if m.user_endpoint is not None]
        self._endpoint_lists[group.group_id] = (key, topology, configured, response_cls, pairs)
        entries = self._endpoint_entries.get(group.group_id, {})
        if len(entries) > 2 * len(members) + 16:  # members gone: forget theirs
            self._endpoint_entries[group.group_id] = {m: e for m, e in entries.items() if m in group.members}
        return pairs

    def forget_group(self, group_id: str) -> None:
        """Drop what was built of a group that is gone."""
        self._endpoint_lists.pop(group_id, None)
        self._endpoint_entries.pop(group_id, None)

    def _endpoint_entry(self, group_id: str, member: Member, topology: Any, configured: Configured | None,
                        response_cls: Any) -> Any:
        """One member's endpoint and partitions, built once per change of its endpoint or tasks (or of the topics)."""
        entries = self._endpoint_entries.setdefault(group_id, {})
        cached = entries.get(member.member_id)
        if cached is not None and cached[0] is member and cached[1][0] == self.topics_version and \
                cached[2] is topology and cached[3] is configured and cached[4] is response_cls:
            return cached[5]  # built of this very member
        version = (self.topics_version, member.user_endpoint, member.assigned)
        if cached is not None and cached[1] == version and cached[2] is topology and cached[3] is configured \
                and cached[4] is response_cls:
            entries[member.member_id] = (member, *cached[1:])
            return cached[5]
        subtopologies = {s.subtopology_id: s for s in topology.subtopologies}
        entry = response_cls.EndpointToPartitions(
            user_endpoint=response_cls.Endpoint(host=member.user_endpoint[0], port=member.user_endpoint[1]),
            active_partitions=self._partitions(member.assigned.active, subtopologies, configured, response_cls),
            standby_partitions=self._partitions(member.assigned.standby, subtopologies, configured, response_cls))
        entries[member.member_id] = (member, version, topology, configured, response_cls, entry)
        return entry

    def _partitions(self, tasks: Mapping[str, frozenset[int]], subtopologies: Mapping[str, Any],
                    configured: Configured | None, response_cls: Any) -> list[Any]:
        """A member's partitions per input topic, as Kafka 4.4 lists them: per subtopology (Kafka walks an
        unmodifiable map, in an order salted per JVM: here by id), its topics in a Java HashSet's order, the
        task numbers as they are, cut to the first ones when the topic has fewer partitions."""
        out = []
        counts = {**(configured.partitions if configured else {}), **self.topics}
        for sub in sorted(tasks):
            s = subtopologies.get(sub)
            if s is None:
                continue
            parts = sorted(tasks[sub])
            for topic in hash_order([*s.source_topics, *(t.name for t in s.repartition_source_topics)]):
                if topic not in counts:  # Kafka: IllegalStateException, the heartbeat fails without a message
                    raise CoordinatorError(UNKNOWN_SERVER_ERROR)
                out.append(response_cls.TopicPartition(topic=topic, partitions=parts[:counts[topic]]))
        return out

    # --- leaving and fencing ------------------------------------------------------------------

    def _fence(self, group: StreamsGroup, member_id: str, now: int) -> list[CoordinatorRecord]:
        """The member's removal and the group epoch bump; the last member out also moves the (now empty)
        target assignment to that epoch, as Kafka does."""
        group.session_deadlines.pop(member_id, None)
        group.rebalance_deadlines.pop(member_id, None)
        group.task_offsets.pop(member_id, None)
        group.task_end_offsets.pop(member_id, None)
        group.caught_up.pop(member_id, None)
        records = rec.remove_member(group.group_id, member_id) + [rec.group_metadata(
            group.group_id, group.epoch + 1, group.metadata_hash, group.validated_topology_epoch,
            group.last_assignment_configs)]
        if group.members.keys() == {member_id}:
            records.append(rec.target_metadata(group.group_id, group.epoch + 1, now))
        return records

    def _apply(self, group: StreamsGroup, records: list[CoordinatorRecord]) -> list[CoordinatorRecord]:
        for record in records:
            group.replay(record)
        if not group.members:
            group.shutdown_requested_by = None
        return records

    def _existing_group(self, group_id: str) -> StreamsGroup:
        group = self.group(group_id)
        if group is None:
            self._throw_if_other_group(group_id)
            raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
        return group

    def is_other_group(self, group_id: str) -> bool:
        """Whether `group_id` names a group that exists but is not a streams group: an empty classic group,
        such as the one an admin's offset commit creates (Kafka keeps it while it has offsets)."""
        group = self.groups.get(group_id)
        return group is not None and not group.exists and bool(group.offsets)

    def _throw_if_other_group(self, group_id: str) -> None:
        if self.is_other_group(group_id):
            raise CoordinatorError(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")

    def _group_for_replay(self, group_id: str) -> StreamsGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = StreamsGroup(group_id)
        return group

    # --- StreamsGroupDescribe -------------------------------------------------------------------

    def _describe(self, req: Message, version: int) -> Message:
        _, response_cls = api_classes(STREAMS_GROUP_DESCRIBE)
        groups = []
        for group_id in req.group_ids:
            group = self.group(group_id)
            if group is None or group.topology is None:
                message = f"Group {group_id} is not a streams group." if self.is_other_group(group_id) else \
                    f"Group {group_id} not found."
                groups.append(response_cls.DescribedGroup(error_code=GROUP_ID_NOT_FOUND, group_id=group_id,
                                                          error_message=message))
                continue
            described = self.describe_group(group, response_cls, version)
            if version >= 1 and req.include_topology_description:
                described = described.replace(topology_description_status=TOPOLOGY_DESCRIPTION_NOT_STORED)
            groups.append(described)
        return response_cls(groups=groups)

    def describe_group(self, group: StreamsGroup, response_cls: Any, version: int = 1) -> Any:
        cls = response_cls
        classic = self.classic_members.get(group.group_id, set())
        members = [self._describe_member(group, group.members[m], cls, m in classic)
                   for m in sorted(group.members)]
        extra = {"assignor_name": self.config_for(group.group_id).assignment.assignor} if version >= 1 else {}
        return cls.DescribedGroup(group_id=group.group_id, group_state=group.state, group_epoch=group.epoch,
                                  assignment_epoch=group.assignment_epoch,
                                  topology=describe(group.topology, group.described(self.writes), cls), members=members,
                                  **extra)

    @staticmethod
    def _describe_member(group: StreamsGroup, m: Member, cls: Any, is_classic: bool) -> Any:
        def assignment(tasks: TaskSets) -> Any:
            return cls.Assignment(active_tasks=_wire(cls.TaskIds, tasks.active, sort=True),
                                  standby_tasks=_wire(cls.TaskIds, tasks.standby, sort=True),
                                  warmup_tasks=_wire(cls.TaskIds, tasks.warmup, sort=True))

        def offsets(values: Mapping[tuple[str, int], int]) -> list[Any]:
            return [cls.TaskOffset(subtopology_id=s, partition=p, offset=o) for (s, p), o in sorted(values.items())]

        return cls.Member(
            member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, rack_id=m.rack_id,
            client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch,
            process_id=m.process_id, client_tags=[cls.KeyValue(key=k, value=v) for k, v in m.client_tags],
            user_endpoint=None if m.user_endpoint is None else cls.Endpoint(host=m.user_endpoint[0],
                                                                          port=m.user_endpoint[1]),
            task_offsets=offsets(group.task_offsets.get(m.member_id, {})),
            task_end_offsets=offsets(group.task_end_offsets.get(m.member_id, {})),
            assignment=assignment(m.assigned), target_assignment=assignment(group.target(m.member_id)),
            is_classic=is_classic)

    # --- offsets ------------------------------------------------------------------------------

    def validate_commit(self, group_id: str, member_id: str, epoch: int, instance_id: str | None,
                        transactional: bool, version: int) -> None:
        """Raise the CoordinatorError Kafka answers an offset commit of this member with, if any."""
        self._validate_commit(self.group(group_id), member_id, epoch, instance_id, transactional, version)

    def _validate_commit(self, group: StreamsGroup | None, member_id: str, epoch: int, instance_id: str | None,
                         transactional: bool, version: int) -> None:
        if group is None or (epoch < 0 and not group.members):
            return
        if transactional and epoch == -1 and member_id == "" and instance_id is None:
            return
        member = _member_or_throw(group, member_id)
        if not transactional and version < 9:
            raise CoordinatorError(UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members "
                                                        "using the streams group protocol")
        if epoch != member.member_epoch:
            raise CoordinatorError(STALE_MEMBER_EPOCH, f"The received member epoch {epoch} does not match the "
                                                       f"expected member epoch {member.member_epoch}.")

    def _offset_commit(self, req: Message, version: int, now: int) -> tuple[Message, list[CoordinatorRecord]]:
        _, cls = api_classes(OFFSET_COMMIT)
        error = self._commit_error(req, False, version)
        topics, records = _commit(req, error, now, lambda topic, parts: cls.OffsetCommitResponseTopic(
            name=topic.name, topic_id=topic.topic_id, partitions=[cls.OffsetCommitResponsePartition(
                partition_index=p, error_code=error) for p in parts]))
        if records:
            self._group_for_replay(req.group_id)
            self.replay(records)
        return cls(topics=topics), records

    def _txn_offset_commit(self, req: Message, version: int, now: int) -> tuple[Message, list[CoordinatorRecord]]:
        _, cls = api_classes(TXN_OFFSET_COMMIT)
        error = self._commit_error(req, True, version)
        topics, records = _commit(req, error, now, lambda topic, parts: cls.TxnOffsetCommitResponseTopic(
            name=topic.name, partitions=[cls.TxnOffsetCommitResponsePartition(partition_index=p, error_code=error)
                                         for p in parts]))
        self._pending_txn.setdefault(req.producer_id, []).extend(records)
        return cls(topics=topics), records

    def _commit_error(self, req: Message, transactional: bool, version: int) -> int:
        group, epoch = self.group(req.group_id), req.generation_id_or_member_epoch
        if group is None and not transactional:  # Kafka's rules for a group that is not a streams group
            if self.is_other_group(req.group_id):  # an empty classic group: only commits outside a generation
                return 0 if epoch < 0 else UNKNOWN_MEMBER_ID
            if epoch >= 0:  # no group at all: a generation names a group that does not exist
                return GROUP_ID_NOT_FOUND if version >= 9 else ILLEGAL_GENERATION
            return 0
        try:
            self._validate_commit(group, req.member_id, epoch, getattr(req, "group_instance_id", None),
                                  transactional, version)
        except CoordinatorError as exc:
            return exc.code
        return 0

    def _offset_fetch(self, req: Message, version: int) -> Message:
        _, response_cls = api_classes(OFFSET_FETCH)
        if version < 8:  # any group's offsets, a streams group's or not
            group = self.groups.get(req.group_id) or StreamsGroup(req.group_id)
            topics = [response_cls.OffsetFetchResponseTopic(name=name, partitions=[
                self._fetched(response_cls.OffsetFetchResponsePartition, group, name, p) for p in parts])
                for name, parts in _requested(group, req.topics, "partition_indexes")]
            return response_cls(topics=topics)
        out = []
        for g in req.groups:
            group = self.groups.get(g.group_id) or StreamsGroup(g.group_id)
            try:
                member_id = getattr(g, "member_id", None)
                if group.exists and (member_id is not None or g.member_epoch >= 0):  # a streams group's member
                    if member_id is None:  # Kafka looks a null member id up in its member table: a NullPointerException
                        raise CoordinatorError(UNKNOWN_SERVER_ERROR)
                    member = _member_or_throw(group, member_id or "")
                    if g.member_epoch != member.member_epoch:
                        raise CoordinatorError(STALE_MEMBER_EPOCH, f"The received member epoch {g.member_epoch} "
                                               f"does not match the expected member epoch {member.member_epoch}.")
            except CoordinatorError as exc:
                out.append(response_cls.OffsetFetchResponseGroup(group_id=g.group_id, error_code=exc.code))
                continue
            topics = [response_cls.OffsetFetchResponseTopics(name=name, partitions=[
                self._fetched(response_cls.OffsetFetchResponsePartitions, group, name, p) for p in parts])
                for name, parts in _requested(group, g.topics, "partition_indexes")]
            out.append(response_cls.OffsetFetchResponseGroup(group_id=g.group_id, topics=topics))
        return response_cls(groups=out)

    @staticmethod
    def _fetched(cls: Any, group: StreamsGroup, topic: str, partition: int) -> Any:
        entry = group.offsets.get((topic, partition))
        if entry is None:
            return cls(partition_index=partition, committed_offset=-1, committed_leader_epoch=-1, metadata="")
        return cls(partition_index=partition, committed_offset=entry.offset, committed_leader_epoch=entry.leader_epoch,
                   metadata=entry.metadata)

    # --- LeaveGroup -----------------------------------------------------------------------------

    def _leave_group(self, req: Message, version: int, now: int) -> tuple[Message, list[CoordinatorRecord]]:
        """Kafka answers UNKNOWN_MEMBER_ID for every member of a streams group (streams-protocol members leave
        by heartbeat); the classic members compat keeps in a streams group (`classic_members`) do leave."""
        _, response_cls = api_classes(LEAVE_GROUP)
        group = self.group(req.group_id) or StreamsGroup(req.group_id)
        classic = self.classic_members.get(req.group_id, set())
        identities = list(req.members) if version >= 3 else [None]
        records: list[CoordinatorRecord] = []
        answers = []
        for identity in identities:
            member_id = identity.member_id if identity is not None else req.member_id
            instance_id = identity.group_instance_id if identity is not None else None
            if instance_id is not None:
                member_id = group.static_members.get(instance_id, member_id)
            error = 0 if member_id in group.members and member_id in classic else UNKNOWN_MEMBER_ID
            if error == 0:
                records += self._apply(group, self._fence(group, member_id, now))
            if identity is not None:
                answers.append(response_cls.MemberResponse(member_id=identity.member_id, group_instance_id=instance_id,
                                                           error_code=error))
            elif error:
                return response_cls(error_code=error), records
        return response_cls(members=answers), records


def _commit(req: Message, error: int, now: int, topic_answer: Any) -> tuple[list[Any], list[CoordinatorRecord]]:
    """The answer per topic (`topic_answer(topic, partition indexes)`) and, without error, one offset
    record per partition of an OffsetCommit or TxnOffsetCommit."""
    records = [] if error else [
        rec.offset_commit(req.group_id, t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                          p.committed_metadata, now) for t in req.topics for p in t.partitions]
    # Kafka's response builders list a topic with its first partition: a topic of no partitions is left out
    return [topic_answer(t, [p.partition_index for p in t.partitions]) for t in req.topics if t.partitions], records


_METADATA_FIELDS = ("instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms", "topology_epoch",
                    "process_id", "user_endpoint", "client_tags")
_STATIC_EPOCH_FIELDS = ("topology_epoch", "rack_id", "client_tags", "process_id")  # Kafka's epoch-relevant ones
# Restored when a heartbeat fails; the configured topology and the endpoint information epoch are not, as in
# Kafka (plain fields there, outside its snapshotted state).
_SOFT_STATE = ("task_offsets", "task_end_offsets", "caught_up", "topics_version", "session_deadlines",
               "rebalance_deadlines", "pending_assignment_at", "shutdown_requested_by")


def _in_order(table: dict[str, Any], due: list[tuple[int, str]]) -> list[str]:
    """The keys of `due` in the order of `table` (a dict's iteration order, as its scan met them)."""
    if len(due) <= 1:
        return [key for _, key in due]
    keys = {key for _, key in due}
    return [key for key in table if key in keys]


def _put_if_changed(table: dict[str, Any], key: str, value: Any) -> None:
    """Write only what changes (a journaled write costs an undo entry)."""
    if table.get(key) != value:
        table[key] = value


def _outside_soft_state(entry: tuple, group: StreamsGroup) -> bool:
    """Whether a journal entry of a refused heartbeat changed what stays changed: a field of the group
    outside `_SOFT_STATE` (a heartbeat changes the rest of the group only by its records, applied last)."""
    return entry[0] is timeline.restore_field and entry[1] is group and entry[2] not in _SOFT_STATE


JAVA_TRIMMED = "".join(map(chr, range(0x21)))  # what Java's String.trim() removes: every char up to the space
TOPOLOGY_DESCRIPTION_NOT_STORED = 1  # Kafka's status of a requested description when no plugin stores them


def _validate_heartbeat(req: Message) -> None:
    """The request-level checks Kafka makes before a heartbeat reaches its group (the topology's topic
    names first of all)."""
    if req.topology is not None:
        validate_names(req.topology)
        for s in req.topology.subtopologies:
            if s.source_topic_regex:
                raise CoordinatorError(INVALID_REQUEST, "Regular expressions for source topics are not supported yet.")
    for value, what in ((req.member_id, "MemberId"), (req.group_id, "GroupId"), (req.instance_id, "InstanceId"),
                        (req.rack_id, "RackId")):
        if value is not None and value.strip(JAVA_TRIMMED) == "":
            raise CoordinatorError(INVALID_REQUEST, f"{what} can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise CoordinatorError(INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        for tasks, what in ((req.active_tasks, "ActiveTasks"), (req.standby_tasks, "StandbyTasks"),
                            (req.warmup_tasks, "WarmupTasks")):
            if tasks is None or tasks:
                raise CoordinatorError(INVALID_REQUEST, f"{what} must be empty when (re-)joining.")
        if req.topology is None:
            raise CoordinatorError(INVALID_REQUEST, "Topology must be non-null when (re-)joining.")
        for s in req.topology.subtopologies:
            for t in s.state_changelog_topics:
                if t.partitions != 0:
                    raise CoordinatorError(STREAMS_INVALID_TOPOLOGY, f"Changelog topic {t.name} must have an "
                                           f"undefined partition count, but it is set to {t.partitions}.")
    elif req.member_epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise CoordinatorError(INVALID_REQUEST, "InstanceId can't be null.")
    elif req.member_epoch < STATIC_LEAVE_EPOCH:
        raise CoordinatorError(INVALID_REQUEST, f"MemberEpoch is {req.member_epoch}, but must be greater than or "
                                                "equal to -2.")
    if req.active_tasks is not None or req.standby_tasks is not None or req.warmup_tasks is not None:
        if req.active_tasks is None or req.standby_tasks is None or req.warmup_tasks is None:
            raise CoordinatorError(INVALID_REQUEST, "If one task-type is non-null, all must be non-null.")
    if req.member_epoch != 0 and req.topology is not None:
        raise CoordinatorError(INVALID_REQUEST, "Topology can only be provided when (re-)joining.")


def _member_or_throw(group: StreamsGroup, member_id: str) -> Member:
    member = group.members.get(member_id)
    if member is None:
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
    return member


def _static_member_or_throw(group: StreamsGroup, instance_id: str, member_id: str) -> Member:
    existing = group.static_members.get(instance_id)
    if existing is None:
        raise CoordinatorError(UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing != member_id:
        raise CoordinatorError(FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} was "
                                                   f"fenced by member {existing}.")
    return group.members[existing]


def _check_epoch(member: Member, received: int, owned: TaskSets | None) -> None:
    if received > member.member_epoch:
        raise CoordinatorError(FENCED_MEMBER_EPOCH, f"The streams group member has a greater member epoch "
                               f"({received}) than the one known by the group coordinator ({member.member_epoch}). "
                               "The member must abandon all its partitions and rejoin.")
    if received < member.member_epoch:
        if received != member.previous_member_epoch or owned is None or \
                not all(contains(a, o) for a, o in zip(member.assigned, owned)):
            raise CoordinatorError(FENCED_MEMBER_EPOCH, f"The streams group member has a smaller member epoch "
                                   f"({received}) than the one known by the group coordinator "
                                   f"({member.member_epoch}). The member must abandon all its partitions and rejoin.")


def _check_tasks(configured: Configured, tasks: Iterable[Any] | None) -> None:
    for t in tasks or ():
        count = configured.tasks.get(t.subtopology_id)
        if count is None:
            raise CoordinatorError(INVALID_REQUEST, f"Subtopology {t.subtopology_id} does not exist in the topology.")
        for p in t.partitions:
            if p < 0 or p >= count:
                raise CoordinatorError(INVALID_REQUEST, f"Task {p} for subtopology {t.subtopology_id} is invalid. "
                                                        f"Number of tasks for this subtopology: {count}")


def _recovery_lag(version: int, lag: int) -> dict[str, int]:
    """Kafka 4.4 fills only the int64 field (v1 on); a v0 response carries 0 in the legacy int32 one."""
    return {} if version == 0 else {"acceptable_recovery_lag": lag}


def _tags(client_tags: Iterable[Any]) -> tuple[tuple[str, str], ...]:
    tags = {kv.key: kv.value for kv in client_tags}
    return tuple((k, tags[k]) for k in hash_order(tags))


def _wire(cls: Any, tasks: Mapping[str, frozenset[int]], sort: bool = False) -> list[Any]:
    order = sorted(tasks) if sort else hash_order(tasks)
    return [cls(subtopology_id=s, partitions=sorted(tasks[s])) for s in order]


def _requested(group: StreamsGroup, topics: Iterable[Any] | None, field_name: str) -> list[tuple[str, list[int]]]:
    """The topics and partitions a fetch asks for; every committed one (in Kafka's order) when it names none."""
    if topics is None:
        return [(t, list(group.offset_order[t])) for t in group.topic_order]
    return [(t.name, list(getattr(t, field_name))) for t in topics]

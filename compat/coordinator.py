"""The migration coordinator: classic Streams members and streams-protocol members in one group.

A group is classic (leader-based, `ClassicGroup`) until a member joins with StreamsGroupHeartbeat:
then it becomes a streams group whose epoch continues the classic generation, every classic member
becomes a streams member (its tasks read from its last classic assignment) and is asked to rejoin.
From then on a classic member's JoinGroup is a heartbeat of that member (its SubscriptionInfo gives
process, endpoint, tags and task offsets; its owned partitions the actives it still runs), SyncGroup
hands it its current tasks as a classic assignment, and Heartbeat asks it to rejoin whenever its
assignment can move. When the last streams-protocol member leaves, the group turns classic again.
Sans-IO like the streams-group coordinator: `(token, response)` answers and records out.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from compat.classic import (COMPLETING, HEARTBEAT, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, JOIN_GROUP, LEAVE_GROUP,
                            REBALANCE_IN_PROGRESS, SYNC_GROUP, UNKNOWN_MEMBER_ID, ClassicConfig, ClassicGroup,
                            ClassicMember, GroupMetadataKey, admit, expire_pending)
from compat.group_state import Change, GroupField, GroupState
from compat.translate import (ClassicSubscription, Hosts, assigned_tasks, assignment_info, classic_assignment,
                              decode_subscription, host_partitions, owned_active_tasks)
from kprotocol.streams import AssignmentInfo
from kprotocol.errors import DecodeError
from kprotocol.registry import api_classes, message_class
from kprotocol.runtime.struct import Message
from kprotocol.streams.model import NO_NEXT_REBALANCE
from kprotocol.streams_group import GroupConfig, StreamsGroupCoordinator
from kprotocol.streams_group import records as rec
from kprotocol.streams_group.coordinator import STREAMS_GROUP_DESCRIBE, STREAMS_GROUP_HEARTBEAT
from kprotocol.streams_group.member import UNRELEASED_TASKS, UNREVOKED_TASKS, Member, reconcile
from kprotocol.streams_group.errors import FENCED_INSTANCE_ID, CoordinatorError
from kprotocol.streams_group.records import CoordinatorRecord
from kprotocol.streams_group.tasks import TaskSets
from kprotocol.streams_group.topology import from_request, to_request
from kprotocol.timeline import TDict, TimelineObject, TSet, recording, stamp

Token = Hashable
Answer = tuple[Token, Message]
HB = message_class("StreamsGroupHeartbeatRequest")
HEADER = message_class("RequestHeader")
STREAMS_PROTOCOL = "stream"
PROBING_INTERVAL_MS = 10_000  # a classic member holding warm-ups rejoins this often to report its offsets


@dataclass
class ClassicInfo(TimelineObject):
    """What the coordinator keeps of a classic member of a streams group (soft state: a member
    unknown after a restart is asked to rejoin and tells it again)."""

    subscription: ClassicSubscription
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    delivered: AssignmentInfo | None = None  # what its last SyncGroup told it (None: a SyncGroup is due)


class MigrationCoordinator:
    """Classic groups, streams groups and the conversions between them."""

    def __init__(self, config: GroupConfig = GroupConfig(), topics: Mapping[str, int] | None = None, *,
                 group_configs: Mapping[str, GroupConfig] | None = None, classic_initial_delay_ms: int = 3_000,
                 classic_config: ClassicConfig = ClassicConfig()) -> None:
        self._states: dict[str, GroupState] = {}  # each group's state, in one object
        self.streams = StreamsGroupCoordinator(config, topics, group_configs)
        self.streams.groups = GroupField(self._states, "streams")
        self.streams.classic_members = GroupField(self._states, "classic_members")
        self.classic: MutableMapping[str, ClassicGroup] = GroupField(self._states, "classic")
        self.classic_info: MutableMapping[str, dict[str, ClassicInfo]] = GroupField(self._states, "classic_info")
        self.classic_initial_delay_ms = classic_initial_delay_ms
        self.classic_config = classic_config  # the broker's admission bounds for classic members
        # built once per version of what they are built of, shared by the group's classic members
        self._hosts: dict[str, tuple[tuple, Hosts]] = {}  # group -> (key, partitions by host)
        self._versions: dict[str, tuple[int, int]] = {}  # group -> (info stamp, commonly supported version)
        self._told: dict[str, dict[str, tuple]] = {}  # group -> member -> (key, AssignmentInfo)
        self._mixed: dict[str, tuple[int, int]] = {}  # group -> (members, infos) stamps it was last found mixed at

    # --- groups and their changes ---------------------------------------------------------------

    def group_ids(self) -> list[str]:
        """Every group the coordinator holds anything of."""
        return sorted(g for g, state in self._states.items() if not state.is_empty())

    def begin(self, group_id: str) -> Change:
        """Start recording the changes to `group_id` (requests and timers): `rollback()` reverts them all,
        `commit()` keeps them. O(1); the changes of other groups are not part of it."""
        state = self._states.get(group_id)
        if state is None:
            state = self._states[group_id] = GroupState(group_id)
        return Change(self._states, state)

    def pending_ids(self, group_id: str) -> list[str]:
        """The member ids handed out to classic members of a streams group and not yet joined with."""
        state = self._states.get(group_id)
        return list(state.pending) if state is not None else []

    def forget(self, group_id: str) -> list[CoordinatorRecord]:
        """Drop an empty group (DeleteGroups): the tombstones that say so. Part of the group's open change."""
        with self._recording(group_id):
            records = []
            if self.classic.pop(group_id, None) is not None:
                records.append(CoordinatorRecord(GroupMetadataKey(group=group_id), None))
            return records + self._drop_streams_group(group_id)

    def _recording(self, group_id: str) -> Any:
        state = self._states.get(group_id)
        return recording(state.journal if state is not None and state.depth else None)

    # --- inputs -------------------------------------------------------------------------------

    def set_topics(self, topics: Mapping[str, int]) -> None:
        self.streams.set_topics(topics)

    def replay(self, records: Iterable[CoordinatorRecord | tuple[bytes, bytes | None]], now_ms: int = 0) -> None:
        """Rebuild from `__consumer_offsets` records: classic groups from GroupMetadata, the rest by the
        streams-group coordinator."""
        typed = [r if isinstance(r, CoordinatorRecord) else rec.decode(*r) for r in records]
        typed = [r for r in typed if r is not None]
        for r in typed:
            if r.type_id == rec.GROUP_METADATA:
                if r.value is None or not r.value.members:
                    self.classic.pop(r.key.group, None)
                else:
                    self.classic[r.key.group] = ClassicGroup.from_record(r.key.group, r.value, now_ms,
                                                                         self.classic_initial_delay_ms,
                                                                         self.classic_config)
        self.streams.replay(typed)
        self.streams.start_timers(now_ms)

    # --- requests -----------------------------------------------------------------------------

    def handle(self, token: Token, header: Message, request: Message, now: int, *,
               client_host: str = "") -> tuple[list[Answer], list[CoordinatorRecord]]:
        """Answer one request now or later: every answer comes back as (token, response). Its changes are
        part of the group's open change (`begin`), if any."""
        api_key = header.request_api_key
        if api_key == STREAMS_GROUP_DESCRIBE:
            return [(token, self.streams.handle(header, request, now)[0])], []
        with self._recording(request.group_id):
            return self._handle(token, header, request, now, client_host)

    def _handle(self, token: Token, header: Message, request: Message, now: int,
                client_host: str) -> tuple[list[Answer], list[CoordinatorRecord]]:
        api_key = header.request_api_key
        group_id = request.group_id
        streams_group = self.streams.group(group_id)
        if api_key == STREAMS_GROUP_HEARTBEAT:
            answers, records = self._to_streams(group_id, request, now) if request.member_epoch == 0 else ([], [])
            response, more = self.streams.handle(header, request, now, client_host=client_host)
            records += more
            return [(token, response), *answers], records + self._maybe_to_classic(group_id, now)
        if api_key not in (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP):
            response, records = self.streams.handle(header, request, now, client_host=client_host)
            return [(token, response)], records
        if streams_group is not None and api_key == JOIN_GROUP and not streams_group.members:
            records = self._drop_streams_group(group_id)  # an empty streams group: classic members start afresh
            streams_group = None
        else:
            records = []
        if streams_group is None:
            answers, more = self._classic(token, header, request, now, client_host)
            return answers, records + more
        if api_key == JOIN_GROUP:
            return self._join_streams(token, header, request, now, client_host)
        if api_key == SYNC_GROUP:
            return [(token, self._sync_streams(request, now))], []
        if api_key == HEARTBEAT:
            return [(token, self._heartbeat_streams(request, now))], []
        response, records = self.streams.handle(header, request, now)
        for identity in (request.members if header.request_api_version >= 3 else []):
            if self.classic_info.get(group_id, {}).pop(identity.member_id, None) is not None:
                self._states[group_id].info_stamp = stamp()
        return [(token, response)], records + self._maybe_to_classic(group_id, now)

    def poll(self, now: int) -> tuple[list[Answer], list[CoordinatorRecord], int | None]:
        """Every group's timers: (answers, records, the next deadline of any group)."""
        answers: list[Answer] = []
        records: list[CoordinatorRecord] = []
        deadlines = []
        for group_id in self.group_ids():
            more_answers, more_records, deadline = self.poll_group(group_id, now)
            answers += more_answers
            records += more_records
            if deadline is not None:
                deadlines.append(deadline)
        return answers, records, min(deadlines, default=None)

    def poll_group(self, group_id: str, now: int) -> tuple[list[Answer], list[CoordinatorRecord], int | None]:
        """One group's timers (sessions, rebalances, delayed assignments, pending member ids): (answers,
        records, the group's next deadline). Its changes are part of the group's open change, if any."""
        state = self._states.get(group_id)
        if state is None:
            return [], [], None
        answers: list[Answer] = []
        with self._recording(group_id):
            expire_pending(state.pending, now)
            records = self.streams.poll_group(group_id, now)
            if state.streams is not None:
                records += self._maybe_to_classic(group_id, now)
            if state.classic is not None:
                answers, more = state.classic.poll(now)
                records += more
        return answers, records, self.next_deadline(group_id)

    def next_deadline(self, group_id: str) -> int | None:
        """When the group's timers are next due (None: it has none)."""
        state = self._states.get(group_id)
        if state is None:
            return None
        deadlines = [*state.pending.values()]
        if state.streams is not None:
            deadlines.append(self.streams.group_deadline(state.streams))
        if state.classic is not None:
            deadlines.append(state.classic.next_deadline())
        return min((d for d in deadlines if d is not None), default=None)

    def classic_standby_replicas(self, group_id: str) -> int:
        """The most standby copies of one task the classic members of a streams group hold (what the classic
        leader's assignor was configured with, as far as their assignments show it)."""
        group = self.streams.group(group_id)
        copies: dict[tuple[str, int], int] = {}
        for member_id in self.streams.classic_members.get(group_id, set()) & set(group.members if group else ()):
            for sub, partitions in group.members[member_id].assigned.standby.items():
                for p in partitions:
                    copies[(sub, p)] = copies.get((sub, p), 0) + 1
        return max(copies.values(), default=0)

    # --- offset commits -----------------------------------------------------------------------

    def validate_commit(self, group_id: str, member_id: str, epoch: int, instance_id: str | None,
                        transactional: bool, version: int,
                        partitions: Iterable[tuple[str | None, int]] = ()) -> int:
        """The error code the group answers an OffsetCommit (or TxnOffsetCommit) of `partitions`
        ((topic, partition); topic None where an id did not resolve) with: 0 to accept it.

        A classic group follows Kafka's classic rules: an admin commit (no member, generation -1)
        only while the group is empty, a transactional one without member always, a member's at the
        current generation only, and no plain commit while the group completes a rebalance. In a
        streams group a streams-protocol member is checked as the broker checks it. A classic member
        of a streams group moves from epoch to epoch by its own JoinGroup and hears of its new
        generation only from the SyncGroup that follows, so a commit at its previous epoch is
        accepted for partitions it still owns since that epoch (KIP-848's rule for members
        converging on a new epoch): a task it keeps is never refused for a rejoin it was asked to make."""
        classic = self.classic.get(group_id)
        if classic is not None:
            return _classic_commit_error(classic, member_id, epoch, instance_id, transactional)
        group = self.streams.group(group_id)
        if group is None:
            return 0
        info = self.classic_info.get(group_id, {})
        if member_id not in info or member_id not in group.members:
            try:
                self.streams.validate_commit(group_id, member_id, epoch, instance_id, transactional, version)
            except CoordinatorError as exc:
                return exc.code
            return 0
        member = group.members[member_id]
        if instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
            return FENCED_INSTANCE_ID
        if epoch == member.member_epoch:
            return 0
        if epoch == member.previous_member_epoch and self._owned_since(group, member, epoch, partitions):
            return 0
        return ILLEGAL_GENERATION

    @staticmethod
    def _owned_since(group: Any, member: Member, epoch: int, partitions: Iterable[tuple[str | None, int]]) -> bool:
        """Whether every partition belongs to an active task `member` holds, assigned at `epoch` or before."""
        held = member.assigned.union(member.pending_revocation).active
        subtopologies = {}
        for s in group.topology.subtopologies if group.topology else ():
            for topic in [*s.source_topics, *(t.name for t in s.repartition_source_topics)]:
                subtopologies.setdefault(topic, []).append(s.subtopology_id)
        for topic, partition in partitions:
            owners = [sub for sub in subtopologies.get(topic, ()) if partition in held.get(sub, ())
                      and member.active_epochs.get(sub, {}).get(partition, epoch) <= epoch]
            if not owners:
                return False
        return True

    # --- classic groups -----------------------------------------------------------------------

    def _classic(self, token: Token, header: Message, req: Message, now: int,
                 client_host: str) -> tuple[list[Answer], list[CoordinatorRecord]]:
        api_key, version = header.request_api_key, header.request_api_version
        group = self.classic.get(req.group_id)
        if group is None:
            if api_key != JOIN_GROUP:
                _, cls = api_classes(api_key)
                return [(token, cls(error_code=UNKNOWN_MEMBER_ID))], []
            group = self.classic[req.group_id] = ClassicGroup(req.group_id, self.classic_initial_delay_ms,
                                                              config=self.classic_config)
        if api_key == JOIN_GROUP:
            return group.join(token, header, req, now, client_host)
        if api_key == SYNC_GROUP:
            return group.sync(token, header, req, now)
        _, cls = api_classes(api_key)
        if api_key == HEARTBEAT:
            return [(token, cls(error_code=group.heartbeat(req, now)))], []
        ids = [m.member_id for m in req.members] if version >= 3 else [req.member_id]
        errors, answers, records = group.leave(ids, now)
        if version >= 3:
            return [(token, cls(members=[cls.MemberResponse(
                member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=e)
                for m, e in zip(req.members, errors)]))] \
                + answers, records
        return [(token, cls(error_code=errors[0]))] + answers, records

    # --- conversions ----------------------------------------------------------------------------

    def _to_streams(self, group_id: str, request: Message, now: int) -> tuple[list[Answer], list[CoordinatorRecord]]:
        """A streams-protocol member joins a classic group: the group becomes a streams group. The classic
        members' JoinGroups and SyncGroups still waiting are answered REBALANCE_IN_PROGRESS (they join again,
        as members of the streams group); a heartbeat without a topology converts nothing (it is refused)."""
        classic = self.classic.get(group_id)
        if classic is None or self.streams.group(group_id) is not None or request.topology is None:
            return [], []
        self.classic.pop(group_id)
        answers = classic.complete_waiting()
        epoch = max(classic.generation, 1)
        topology = rec.topology(group_id, from_request(request.topology))
        records = [CoordinatorRecord(GroupMetadataKey(group=group_id), None), topology]
        infos = self.classic_info.setdefault(group_id, TDict())
        for m in classic.members.values():
            try:  # a member whose metadata does not read is left behind, as one without the protocol
                subscription = decode_subscription(dict(m.protocols)[STREAMS_PROTOCOL])
            except (KeyError, DecodeError):
                continue
            infos[m.member_id] = ClassicInfo(subscription, m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms,
                                             m.client_id)
            self._states[group_id].info_stamp = stamp()
            tasks = assigned_tasks(m.assignment)
            member = Member(m.member_id, instance_id=m.instance_id, client_id=m.client_id, client_host=m.client_host,
                            rebalance_timeout_ms=m.rebalance_timeout_ms, topology_epoch=request.topology.epoch,
                            process_id=subscription.process_id, user_endpoint=subscription.user_endpoint,
                            client_tags=subscription.info.client_tags, member_epoch=epoch,
                            previous_member_epoch=epoch - 1, assigned=tasks,
                            active_epochs={s: {p: epoch for p in ps} for s, ps in tasks.active.items()})
            records += [rec.member_metadata(group_id, member), rec.target_member(group_id, m.member_id, tasks),
                        rec.current_assignment(group_id, member)]
        records += [rec.target_metadata(group_id, epoch, now), rec.group_metadata(group_id, epoch, 0, -1, {})]
        self.streams.replay(records)
        group = self.streams.groups[group_id]
        session = self.streams.config_for(group_id).session_timeout_ms
        for member_id, info in infos.items():
            group.session_deadlines[member_id] = now + info.session_timeout_ms if info else now + session
        self.streams.classic_members[group_id] = TSet(infos)
        return answers, records

    def _maybe_to_classic(self, group_id: str, now: int) -> list[CoordinatorRecord]:
        """The last streams-protocol member left: the classic members carry on as a classic group."""
        group = self.streams.group(group_id)
        infos = self.classic_info.get(group_id, {})
        if group is None or not group.members:
            return []
        checked = (group.members_stamp, self._states[group_id].info_stamp)
        if self._mixed.get(group_id) == checked:
            return []  # neither the members nor the classic ones changed since they were found mixed
        if any(m not in infos for m in group.members):
            self._mixed[group_id] = checked
            return []
        records = rec.delete_group(group_id, list(group.members))
        # The generation the classic members hold, so that their next heartbeat asks them to rejoin.
        generation = max(m.member_epoch for m in group.members.values())
        classic = ClassicGroup(group_id, self.classic_initial_delay_ms, generation=generation,
                               protocol_type="consumer", protocol_name=STREAMS_PROTOCOL, config=self.classic_config)
        for member_id, m in group.members.items():
            info = infos[member_id]
            classic.members[member_id] = ClassicMember(
                member_id, m.instance_id, info.client_id, m.client_host, info.session_timeout_ms,
                info.rebalance_timeout_ms, "consumer", info.protocols, session_deadline=now + info.session_timeout_ms)
        classic.state, classic.rebalance_deadline = "PreparingRebalance", \
            now + max(i.rebalance_timeout_ms for i in infos.values())
        self._drop_streams_group(group_id)
        self.streams.replay(records)
        self.classic[group_id] = classic
        return records

    def _drop_streams_group(self, group_id: str) -> list[CoordinatorRecord]:
        for cache in (self._hosts, self._versions, self._told, self._mixed):
            cache.pop(group_id, None)
        self.streams.forget_group(group_id)
        group = self.streams.groups.pop(group_id, None)
        self.classic_info.pop(group_id, None)
        self.streams.classic_members.pop(group_id, None)
        if group is None or not group.exists:
            return []
        return rec.delete_group(group_id, list(group.members))

    # --- classic members of a streams group ---------------------------------------------------

    def _join_streams(self, token: Token, header: Message, req: Message, now: int,
                      client_host: str) -> tuple[list[Answer], list[CoordinatorRecord]]:
        _, cls = api_classes(JOIN_GROUP)
        group = self.streams.group(req.group_id)
        member_id, refusal = admit(header, req, group.members, self._states[req.group_id].pending, self.classic_config,
                                   now)
        if refusal is not None:
            return [(token, refusal)], []
        protocols = [(p.name, p.metadata) for p in req.protocols]
        try:
            subscription = decode_subscription(dict(protocols)[STREAMS_PROTOCOL])
        except (KeyError, DecodeError):  # no Streams subscription it can read
            return [(token, cls(error_code=INCONSISTENT_GROUP_PROTOCOL, member_id=member_id, generation_id=-1))], []
        info = ClassicInfo(subscription, protocols, req.session_timeout_ms, req.rebalance_timeout_ms,
                           header.client_id or "")
        self.classic_info.setdefault(req.group_id, TDict())[member_id] = info
        self._states[req.group_id].info_stamp = stamp()
        self.streams.classic_members.setdefault(req.group_id, TSet()).add(member_id)
        existing = group.members.get(member_id)
        owned = TaskSets(owned_active_tasks(subscription.subscription, group.topology),
                         *(existing.assigned[1:] if existing else ({}, {})))
        wire = lambda tasks: [HB.TaskIds(subtopology_id=s, partitions=sorted(p)) for s, p in tasks.items()]  # noqa
        epoch = existing.member_epoch if existing else 0
        endpoint = subscription.user_endpoint
        request = HB(group_id=req.group_id, member_id=member_id, member_epoch=epoch,
                     rebalance_timeout_ms=req.rebalance_timeout_ms, process_id=subscription.process_id,
                     user_endpoint=None if endpoint is None else HB.Endpoint(host=endpoint[0], port=endpoint[1]),
                     client_tags=[HB.KeyValue(key=k, value=v) for k, v in subscription.info.client_tags],
                     topology=to_request(group.topology) if epoch == 0 else None,
                     active_tasks=wire(owned.active) if epoch else [],
                     standby_tasks=wire(owned.standby) if epoch else [],
                     warmup_tasks=wire(owned.warmup) if epoch else [],
                     task_offsets=[HB.TaskOffset(subtopology_id=s, partition=p, offset=o)
                                   for (s, p), o in subscription.task_offsets.items()])
        header = HEADER(request_api_key=STREAMS_GROUP_HEARTBEAT, request_api_version=1,
                        correlation_id=header.correlation_id, client_id=header.client_id)
        response, records = self.streams.handle(header, request, now, client_host=client_host)
        if response.error_code:
            return [(token, cls(error_code=response.error_code, member_id=member_id, generation_id=-1))], records
        group.session_deadlines[member_id] = now + req.session_timeout_ms
        return [(token, cls(generation_id=response.member_epoch, protocol_type="consumer",
                            protocol_name=STREAMS_PROTOCOL, leader="", member_id=member_id, members=[]))], records

    def _classic_member(self, req: Message) -> tuple[Any, Member, ClassicInfo] | int:
        """The streams group, member and classic info a SyncGroup or Heartbeat is from, or its error code."""
        group = self.streams.group(req.group_id)
        member = group.members.get(req.member_id)
        info = self.classic_info.get(req.group_id, {}).get(req.member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if info is None:  # not heard of since a restart: its JoinGroup tells us who it is
            return REBALANCE_IN_PROGRESS
        if req.generation_id != member.member_epoch:
            return ILLEGAL_GENERATION
        return group, member, info

    def _assignment_info(self, group: Any, member: Member, info: ClassicInfo, next_rebalance_ms: int) -> AssignmentInfo:
        """What a SyncGroup tells `member` now: built once per change of the member, of the other members'
        endpoints and tasks, of the classic members' versions (a steady Heartbeat compares it in O(1))."""
        group_id = group.group_id
        hosts, version = self._host_partitions(group), self._commonly_supported_version(group_id)
        key = (member, info.subscription, hosts, version, next_rebalance_ms)
        told = self._told.setdefault(group_id, {})
        cached = told.get(member.member_id)
        if cached is not None and all(a is b for a, b in zip(cached[0][:3], key[:3])) and cached[0][3:] == key[3:]:
            return cached[1]
        result = assignment_info(member, info.subscription, group.topology, self._counts(group), hosts, version,
                                 next_rebalance_ms)
        told[member.member_id] = (key, result)
        if len(told) > 2 * len(group.members) + 16:  # members gone: forget theirs
            self._told[group_id] = {m: v for m, v in told.items() if m in group.members}
        return result

    def _counts(self, group: Any) -> dict[str, int]:
        return {**(group.configured.partitions if group.configured else {}), **self.streams.topics}

    def _host_partitions(self, group: Any) -> Hosts:
        key = (group.members_stamp, group.topology, group.configured, self.streams.topics_version)
        cached = self._hosts.get(group.group_id)
        if cached is not None and cached[0][0] == key[0] and cached[0][1] is key[1] and cached[0][2] is key[2] \
                and cached[0][3] == key[3]:
            return cached[1]
        hosts = host_partitions(group.members.values(), group.topology, self._counts(group))
        self._hosts[group.group_id] = (key, hosts)
        return hosts

    def _commonly_supported_version(self, group_id: str) -> int:
        state = self._states[group_id]
        cached = self._versions.get(group_id)
        if cached is None or cached[0] != state.info_stamp:
            versions = [i.subscription.info.latest_supported_version for i in state.classic_info.values()]
            cached = self._versions[group_id] = (state.info_stamp, min(versions))
        return cached[1]

    def _sync_streams(self, req: Message, now: int) -> Message:
        _, cls = api_classes(SYNC_GROUP)
        found = self._classic_member(req)
        if isinstance(found, int):
            return cls(error_code=found)
        group, member, info = found
        probe = now + PROBING_INTERVAL_MS if member.assigned.warmup else NO_NEXT_REBALANCE
        told = self._assignment_info(group, member, info, probe)
        info.delivered = told
        assignment = classic_assignment(told, info.subscription, group.topology, self._counts(group))
        return cls(protocol_type="consumer", protocol_name=STREAMS_PROTOCOL, assignment=assignment)

    def _heartbeat_streams(self, req: Message, now: int) -> Message:
        _, cls = api_classes(HEARTBEAT)
        found = self._classic_member(req)
        if isinstance(found, int):
            return cls(error_code=found)
        group, member, info = found
        group.session_deadlines[member.member_id] = now + info.session_timeout_ms
        return cls(error_code=REBALANCE_IN_PROGRESS if self.rejoin_reason(group, member, info) else 0)

    def rejoin_reason(self, group: Any, member: Member, info: ClassicInfo) -> str | None:
        """Why a classic member of a streams group must rejoin now, or None when what it holds is its
        target. A classic member changes its tasks only through JoinGroup (which reports what it
        owns and moves it through reconciliation) and SyncGroup (which tells it its tasks), so every
        way its tasks can differ from the target asks for one:
        - the target is being recomputed (the group epoch is ahead of the assignment epoch);
        - it is behind the assignment epoch (a new target: tasks to take, or to give up);
        - it holds tasks pending revocation, of any role: an active task's revocation is reported by
          its owned partitions, a standby's or warm-up's by the tasks the SyncGroup gave it, and a
          cooperative client rejoins by itself only after giving up partitions, never a standby;
        - it waits for tasks another member held, and they are free now;
        - what a SyncGroup would tell it now (tasks, roles, the other hosts' partitions) differs
          from what it was told."""
        if group.epoch > group.assignment_epoch:
            return "the target assignment is being recomputed"
        if member.member_epoch != group.assignment_epoch:
            return f"member epoch {member.member_epoch} is behind assignment epoch {group.assignment_epoch}"
        if member.state == UNREVOKED_TASKS:
            return "tasks pending revocation"
        if member.state == UNRELEASED_TASKS:
            progressed = reconcile(member, group.assignment_epoch, group.target(member.member_id), group.owners,
                                   member.assigned)
            if progressed.assigned != member.assigned:
                return "tasks released by other members"
        if info.delivered is None:
            return None  # its SyncGroup is still to come and will tell it the current state
        now_told = self._assignment_info(group, member, info, info.delivered.next_rebalance_ms)
        if now_told is not info.delivered and now_told != info.delivered:
            return "its assignment or the other hosts' partitions changed"
        return None


def _classic_commit_error(group: ClassicGroup, member_id: str, generation: int, instance_id: str | None,
                          transactional: bool) -> int:
    """Kafka's checks of an offset commit to a classic group."""
    if generation < 0 and not group.members:
        return 0  # an admin, or a consumer outside group management, commits for an empty group
    if generation >= 0 or member_id or instance_id is not None:
        if instance_id is not None:
            static = next((m.member_id for m in group.members.values() if m.instance_id == instance_id), None)
            if static is None:
                return UNKNOWN_MEMBER_ID
            if static != member_id:
                return FENCED_INSTANCE_ID
        if member_id not in group.members:
            return UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ILLEGAL_GENERATION
    elif not transactional:
        return UNKNOWN_MEMBER_ID  # no member nor generation: only while the group is empty
    if not transactional and group.state == COMPLETING:
        return REBALANCE_IN_PROGRESS
    return 0

"""A classic (leader-based) consumer group, as Kafka's classic group coordinator runs one, sans-IO.

Members join (JoinGroup), the coordinator waits until every known member has rejoined or the
rebalance time-out passes, elects a leader and answers all joins; the leader's SyncGroup brings
the assignments, which every member then collects. Answers that must wait are returned later,
tagged with the caller's token: `handle` and `poll` both return `(token, response)` pairs.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Hashable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from kprotocol.registry import api_classes, message_class
from kprotocol.runtime.struct import Message
from kprotocol.streams_group.records import CoordinatorRecord
from kprotocol.timeline import DeadlineMap, TDict, TimelineObject

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = 25, 22, 27
INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, GROUP_MAX_SIZE_REACHED = 23, 26, 79, 81
EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
GroupMetadataKey, GroupMetadataValue = message_class("GroupMetadataKey"), message_class("GroupMetadataValue")

Token = Hashable
Answer = tuple[Token, Message]


@dataclass(frozen=True)
class ClassicConfig:
    """The broker's admission bounds for classic members, under Kafka's config names."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size

    NAMES = {"group.min.session.timeout.ms": "min_session_timeout_ms",
             "group.max.session.timeout.ms": "max_session_timeout_ms", "group.max.size": "max_size"}

    @classmethod
    def from_kafka(cls, configs: Mapping[str, str]) -> ClassicConfig:
        """The bounds named in `configs` (other names are left to other parsers); a bad value is a ValueError."""
        values = {}
        for name, attribute in cls.NAMES.items():
            if name in configs:
                try:
                    values[attribute] = int(configs[name])
                except ValueError:
                    raise ValueError(f"{name} must be an integer, not {configs[name]!r}") from None
                if values[attribute] < (0 if attribute != "max_size" else 1):
                    raise ValueError(f"{name} must not be below {0 if attribute != 'max_size' else 1}")
        config = cls(**values)
        if config.min_session_timeout_ms > config.max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms is above group.max.session.timeout.ms")
        return config


DEFAULT_CONFIG = ClassicConfig()


def supports_protocols(group_empty: bool, group_type: str | None, members: Iterable[Any], protocol_type: str,
                       names: Collection[str]) -> bool:
    """Kafka's rule: an empty group takes any non-empty protocol type and list; otherwise the type must be
    the group's and one of the names must be supported by every member."""
    if group_empty:
        return protocol_type != "" and len(names) > 0
    if protocol_type != group_type:
        return False
    supported = [{name for name, _ in m.protocols} for m in members]
    return any(all(name in s for s in supported) for name in names)


def admit(header: Message, req: Message, members: Collection[str], pending: MutableMapping[str, int],
          config: ClassicConfig = DEFAULT_CONFIG, now: int = 0) -> tuple[str, Message | None]:
    """The member id a JoinGroup joins with, or the JoinGroup answer refusing it: a session time-out
    outside the broker's bounds is INVALID_SESSION_TIMEOUT; from v4 a new member first gets its id
    (MEMBER_ID_REQUIRED) and rejoins with it; an id nobody gave out is unknown.

    `pending` holds the ids handed out and not yet joined with, each until its session time-out (as
    Kafka expires them, `expire_pending`). Unlike Kafka, they count against `group.max.size`: a new
    member is refused GROUP_MAX_SIZE_REACHED at once when members and pending ids fill the group,
    rather than handed an id that its rejoin could not use (bounding what unauthenticated JoinGroups
    can make the gateway hold)."""
    _, cls = api_classes(JOIN_GROUP)
    member_id = req.member_id
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        return member_id, cls(error_code=INVALID_SESSION_TIMEOUT, member_id=member_id, generation_id=-1)
    if member_id == "":
        if header.request_api_version >= 4 and len(members) + len(pending) >= config.max_size:
            return member_id, cls(error_code=GROUP_MAX_SIZE_REACHED, member_id="", generation_id=-1)
        member_id = f"{header.client_id or 'member'}-{uuid.uuid4()}"
        if header.request_api_version >= 4:
            pending[member_id] = now + req.session_timeout_ms
            return member_id, cls(error_code=MEMBER_ID_REQUIRED, member_id=member_id, generation_id=-1)
    elif member_id not in members and member_id not in pending:
        return member_id, cls(error_code=UNKNOWN_MEMBER_ID, member_id=member_id, generation_id=-1)
    pending.pop(member_id, None)
    return member_id, None


def expire_pending(pending: MutableMapping[str, int], now: int) -> None:
    """Forget the pending member ids whose session time-out passed."""
    for member_id in [m for m, deadline in pending.items() if deadline <= now]:
        del pending[member_id]


@dataclass
class ClassicMember(TimelineObject):
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    session_deadline: int = 0
    join_token: Token | None = None
    join_version: int = 0
    sync_token: Token | None = None
    sync_version: int = 0

    def __setattr__(self, name: str, value: Any) -> None:
        TimelineObject.__setattr__(self, name, value)
        if name in _TIMED:
            timers = self.__dict__.get("_timers")
            if timers is not None:
                _time(timers, self)

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} has no protocol {protocol!r}")  # admission keeps this away


_TIMED = ("session_deadline", "join_token")


def _time(timers: DeadlineMap, member: ClassicMember) -> None:
    """A member's session runs while it does not wait in a join."""
    if member.join_token is None:
        timers[member.member_id] = member.session_deadline
    else:
        timers.pop(member.member_id, None)


class ClassicMembers(TDict):
    """A classic group's members (journaled) and their session deadlines, kept as the members change."""

    __slots__ = ("timers",)

    def __init__(self, members: Mapping[str, ClassicMember] | None = None) -> None:
        super().__init__()
        self.timers = DeadlineMap()
        for member_id, member in (members or {}).items():
            self[member_id] = member

    def __setitem__(self, member_id: str, member: ClassicMember) -> None:
        TDict.__setitem__(self, member_id, member)
        object.__setattr__(member, "_timers", self.timers)
        _time(self.timers, member)

    def __delitem__(self, member_id: str) -> None:
        TDict.__delitem__(self, member_id)
        self.timers.pop(member_id, None)

    def pop(self, member_id: str, *default: Any) -> Any:
        self.timers.pop(member_id, None)
        return TDict.pop(self, member_id, *default)


@dataclass
class ClassicGroup(TimelineObject):
    group_id: str
    initial_delay_ms: int = 3_000
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    state: str = EMPTY
    members: dict[str, ClassicMember] = field(default_factory=ClassicMembers)
    pending_ids: dict[str, int] = field(default_factory=TDict)  # member id handed out -> when it expires
    rebalance_deadline: int | None = None
    in_initial_delay: bool = False  # a new group waits for more members before its first generation
    config: ClassicConfig = DEFAULT_CONFIG

    def __post_init__(self) -> None:
        if not isinstance(self.members, ClassicMembers):
            self.members = ClassicMembers(self.members)

    # --- requests ---------------------------------------------------------------------------

    def join(self, token: Token, header: Message, req: Message, now: int, client_host: str) -> \
            tuple[list[Answer], list[CoordinatorRecord]]:
        _, cls = api_classes(JOIN_GROUP)
        version = header.request_api_version
        names = [p.name for p in req.protocols]
        if not self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms:
            return [(token, cls(error_code=INVALID_SESSION_TIMEOUT, member_id=req.member_id, generation_id=-1))], []
        if len(names) != len(set(names)) or \
                not supports_protocols(not self.members, self.protocol_type, self.members.values(),
                                       req.protocol_type, names):
            return [(token, cls(error_code=INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id,
                                generation_id=-1))], []
        if req.member_id not in self.members and len(self.members) >= self.config.max_size:
            return [(token, cls(error_code=GROUP_MAX_SIZE_REACHED, member_id="", generation_id=-1))], []
        member_id, refusal = admit(header, req, self.members, self.pending_ids, self.config, now)
        if refusal is not None:
            return [(token, refusal)], []
        protocols = [(p.name, p.metadata) for p in req.protocols]
        old = self.members.get(member_id)
        member = ClassicMember(member_id, req.group_instance_id, header.client_id or "", client_host,
                               req.session_timeout_ms, req.rebalance_timeout_ms if version >= 1 else
                               req.session_timeout_ms, req.protocol_type, protocols,
                               old.assignment if old else b"", now + req.session_timeout_ms, token, version)
        self.members[member_id] = member
        self.protocol_type = req.protocol_type
        if self.state == STABLE and old is not None and old.protocols == protocols and member_id != self.leader:
            member.join_token = None  # nothing changed for a follower: the current generation stands
            return [(token, self._join_response(member, version, with_members=False))], []
        answers: list[Answer] = []
        if self.state != PREPARING:
            answers += self._prepare(now)
        return answers + self._maybe_complete_join(now), []

    def sync(self, token: Token, header: Message, req: Message, now: int) -> \
            tuple[list[Answer], list[CoordinatorRecord]]:
        _, cls = api_classes(SYNC_GROUP)
        member = self.members.get(req.member_id)
        if member is None:
            return [(token, cls(error_code=UNKNOWN_MEMBER_ID))], []
        if req.generation_id != self.generation:
            return [(token, cls(error_code=ILLEGAL_GENERATION))], []
        if _inconsistent(getattr(req, "protocol_type", None), self.protocol_type) or \
                _inconsistent(getattr(req, "protocol_name", None), self.protocol_name):
            return [(token, cls(error_code=INCONSISTENT_GROUP_PROTOCOL))], []
        if self.state == PREPARING:
            return [(token, cls(error_code=REBALANCE_IN_PROGRESS))], []
        member.session_deadline = now + member.session_timeout_ms
        if self.state == STABLE:
            return [(token, self._sync_response(member, header.request_api_version))], []
        member.sync_token, member.sync_version = token, header.request_api_version
        if req.member_id != self.leader:
            return [], []
        given = {a.member_id: a.assignment for a in req.assignments}
        for m in self.members.values():
            m.assignment = given.get(m.member_id, b"")
        self.state = STABLE
        answers = []
        for m in self.members.values():
            if m.sync_token is not None:
                answers.append((m.sync_token, self._sync_response(m, m.sync_version)))
                m.sync_token = None
        return answers, [self.record(now)]

    def heartbeat(self, req: Message, now: int) -> int:
        member = self.members.get(req.member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if req.generation_id != self.generation:
            return ILLEGAL_GENERATION
        member.session_deadline = now + member.session_timeout_ms
        return REBALANCE_IN_PROGRESS if self.state == PREPARING else 0

    def leave(self, member_ids: list[str], now: int) -> tuple[list[int], list[Answer], list[CoordinatorRecord]]:
        errors, answers, records = [], [], []
        for member_id in member_ids:
            if member_id in self.members:
                del self.members[member_id]
                errors.append(0)
            else:
                errors.append(UNKNOWN_MEMBER_ID)
        if any(e == 0 for e in errors):
            more, records = self._membership_changed(now)
            answers += more
        return errors, answers, records

    def poll(self, now: int) -> tuple[list[Answer], list[CoordinatorRecord]]:
        answers: list[Answer] = []
        records: list[CoordinatorRecord] = []
        expire_pending(self.pending_ids, now)
        expired = [self.members[member_id] for _, member_id in self.members.timers.due(now)]
        for m in expired:
            del self.members[m.member_id]
        if expired:
            answers, records = self._membership_changed(now)
        if self.state == PREPARING and self.rebalance_deadline is not None and self.rebalance_deadline <= now:
            for m in [m for m in self.members.values() if m.join_token is None]:
                del self.members[m.member_id]  # did not rejoin in time
            answers += self._complete_join(now)
            if not self.members:
                records.append(self.record(now))
        return answers, records

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.members.timers.earliest(),) if d is not None]
        if self.state == PREPARING and self.rebalance_deadline is not None:
            deadlines.append(self.rebalance_deadline)
        deadlines += self.pending_ids.values()
        return min(deadlines, default=None)

    # --- transitions ----------------------------------------------------------------------------

    def _membership_changed(self, now: int) -> tuple[list[Answer], list[CoordinatorRecord]]:
        if not self.members:
            answers = self._complete_join(now) if self.state == PREPARING else []
            self.state, self.leader = EMPTY, None
            return answers, [self.record(now)]
        if self.state == PREPARING:
            return self._maybe_complete_join(now), []
        return self._prepare(now) + self._maybe_complete_join(now), []

    def complete_waiting(self) -> list[Answer]:
        """Every JoinGroup and SyncGroup still waiting answered REBALANCE_IN_PROGRESS (a retriable error: the member
        joins again), as Kafka completes a classic group's join and sync futures when it converts the group."""
        _, join_cls = api_classes(JOIN_GROUP)
        _, sync_cls = api_classes(SYNC_GROUP)
        answers: list[Answer] = []
        for m in self.members.values():
            if m.join_token is not None:
                answers.append((m.join_token, join_cls(error_code=REBALANCE_IN_PROGRESS, member_id=m.member_id,
                                                       generation_id=-1)))
                m.join_token = None
            if m.sync_token is not None:
                answers.append((m.sync_token, sync_cls(error_code=REBALANCE_IN_PROGRESS)))
                m.sync_token = None
        return answers

    def _prepare(self, now: int) -> list[Answer]:
        """Start a rebalance: pending syncs learn it, members must rejoin before the deadline."""
        _, sync_cls = api_classes(SYNC_GROUP)
        answers = [(m.sync_token, sync_cls(error_code=REBALANCE_IN_PROGRESS))
                   for m in self.members.values() if m.sync_token is not None]
        for m in self.members.values():
            m.sync_token = None
        self.in_initial_delay = self.state == EMPTY and self.initial_delay_ms > 0
        self.state = PREPARING
        self.rebalance_deadline = now + (self.initial_delay_ms if self.in_initial_delay else
                                         max(m.rebalance_timeout_ms for m in self.members.values()))
        return answers

    def _maybe_complete_join(self, now: int) -> list[Answer]:
        if self.in_initial_delay or any(m.join_token is None for m in self.members.values()):
            return []
        return self._complete_join(now)

    def _complete_join(self, now: int) -> list[Answer]:
        self.in_initial_delay = False
        self.generation += 1
        if not self.members:
            return []
        common = [name for name, _ in next(iter(self.members.values())).protocols
                  if all(any(n == name for n, _ in m.protocols) for m in self.members.values())]
        self.protocol_name = common[0] if common else None
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.state = COMPLETING
        answers = []
        for m in self.members.values():
            if m.join_token is not None:
                answers.append((m.join_token, self._join_response(m, m.join_version, m.member_id == self.leader)))
                m.join_token = None
            m.session_deadline = now + m.session_timeout_ms
        return answers

    def _join_response(self, member: ClassicMember, version: int, with_members: bool) -> Message:
        _, cls = api_classes(JOIN_GROUP)
        members = [cls.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.instance_id,
                                               metadata=m.metadata(self.protocol_name))
                   for m in self.members.values()] if with_members else []
        return cls(generation_id=self.generation, protocol_type=self.protocol_type, protocol_name=self.protocol_name,
                   leader=self.leader or "", member_id=member.member_id, members=members)

    def _sync_response(self, member: ClassicMember, version: int) -> Message:
        _, cls = api_classes(SYNC_GROUP)
        return cls(protocol_type=self.protocol_type, protocol_name=self.protocol_name, assignment=member.assignment)

    def record(self, now: int) -> CoordinatorRecord:
        """The GroupMetadata record of the group as it stands."""
        v = GroupMetadataValue
        return CoordinatorRecord(GroupMetadataKey(group=self.group_id), v(
            protocol_type=self.protocol_type or "", generation=self.generation, protocol=self.protocol_name,
            leader=self.leader, current_state_timestamp=now, members=[v.MemberMetadata(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms, subscription=m.metadata(self.protocol_name)
                if self.protocol_name else b"", assignment=m.assignment) for m in self.members.values()]))

    @classmethod
    def from_record(cls, group_id: str, value: Any, now: int, initial_delay_ms: int = 3_000,
                    config: ClassicConfig = DEFAULT_CONFIG) -> ClassicGroup:
        """The group a GroupMetadata record describes, stable, every session starting at `now`."""
        group = cls(group_id, initial_delay_ms, value.generation, value.protocol_type or None, value.protocol,
                    value.leader, STABLE if value.members else EMPTY, config=config)
        for m in value.members:
            group.members[m.member_id] = ClassicMember(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout,
                m.rebalance_timeout, value.protocol_type, [(value.protocol, m.subscription)], m.assignment,
                now + m.session_timeout)
        return group


def _inconsistent(given: str | None, held: str | None) -> bool:
    """A SyncGroup's protocol type or name disagreeing with the group's (either may be absent)."""
    return given is not None and held is not None and given != held

"""The `rebalances` table: one row per rebalance of a group, derived from its records in log order.

- streams and consumer groups (KIP-1071, KIP-848): a rebalance starts when the group epoch moves
  (the group's metadata record, written after the member records that caused it) and ends when
  every member's current assignment reached that epoch, at once when no member is left (the group
  became empty); members before and tasks moved compare with the group as the previous rebalance
  left it (so a member that left and the tasks it owned count), warm-ups count the target's
  warm-up tasks.
- classic groups: the log holds the completed generation only (GroupMetadata), so `start` stays
  null unless known; members, moved tasks (Streams userdata: against the previous generation, or for
  the first one in the log against the tasks members said they owned), warm-up standbys and a probing
  rebalance scheduled by the assignor (`nextRebalanceMs`) come from that record; a group that
  became empty (a GroupMetadata without members) ends with a row of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from kprotocol.pipeline.offsets_rows import Rows, member_rows
from kprotocol.pipeline.tables import GROUP_RECORDS, WORKING_SCHEMAS, to_arrow

Row = dict[str, Any]
COLUMNS = ("group", "protocol", "epoch", "start_timestamp", "end_timestamp", "duration_ms", "trigger",
           "members_before", "members_after", "tasks_moved", "warmup_tasks", "probing")
METADATA = {3: "consumer", 17: "streams"}
TARGET_MEMBER = {7: "consumer", 21: "streams"}
CURRENT = {8: "consumer", 22: "streams"}
MEMBER = {5: "consumer", 19: "streams"}
NO_PROBING = (None, 0, -1, 2**63 - 1)
GROUP_RECORD_TYPES = (2, *METADATA, *TARGET_MEMBER, *CURRENT, *MEMBER)


def group_records(records: Rows) -> pa.Table:
    """The rows of a split's records table that `derive` reads (group records without a problem), for the
    working table GROUP_RECORDS."""
    schema = WORKING_SCHEMAS[GROUP_RECORDS]
    if not isinstance(records, pa.Table):
        return to_arrow([r for r in records if r["record_type"] in GROUP_RECORD_TYPES and r["problem"] is None
                         and r["group"] is not None], schema)
    wanted = pc.and_(pc.is_in(records["record_type"], pa.array(GROUP_RECORD_TYPES, pa.int32())),
                     pc.and_(pc.is_null(records["problem"]), pc.is_valid(records["group"])))
    return records.filter(wanted).select(schema.names)


def _trigger(before: set[str], after: set[str]) -> str:
    joined, left = after - before, before - after
    if joined and left:
        return f"{len(joined)} joined, {len(left)} left"
    if joined:
        return f"{len(joined)} joined"
    if left:
        return f"{len(left)} left"
    return "assignment or metadata change"


def _moved(previous: dict[str, set[str]], current: dict[str, set[str]]) -> int:
    """Active tasks whose owner changed between two assignments."""
    owner = {task: who for who, tasks in previous.items() for task in tasks}
    return sum(1 for who, tasks in current.items() for task in tasks if task in owner and owner[task] != who)


class _ModernGroup:
    """A streams or consumer group followed through its records."""

    def __init__(self, group: str, protocol: str) -> None:
        self.group, self.protocol = group, protocol
        self.members: set[str] = set()
        self.member_epochs: dict[str, int] = {}
        self.target: dict[str, set[str]] = {}
        self.settled_members: set[str] = set()  # as the previous rebalance left the group
        self.settled_target: dict[str, set[str]] = {}
        self.warmups: dict[str, int] = {}
        self.open: Row | None = None
        self.done: list[Row] = []

    def metadata(self, epoch: int, ts: int) -> None:
        if self.open is not None and self.open["epoch"] == epoch:
            return
        self._close(None)
        self.open = {"group": self.group, "protocol": self.protocol, "epoch": epoch, "start_timestamp": ts,
                     "end_timestamp": None, "duration_ms": None, "members_before": sorted(self.settled_members),
                     "probing": False}
        self._check(ts)  # no member left: the group became empty, its last step ends here

    def member(self, member_id: str, left: bool, ts: int) -> None:
        if left:
            self.members.discard(member_id)
            self.member_epochs.pop(member_id, None)
            self.target.pop(member_id, None)
            self._check(ts)
        else:
            self.members.add(member_id)

    def target_member(self, member_id: str, row: Row | None) -> None:
        if row is None:
            self.target.pop(member_id, None)
            self.warmups.pop(member_id, None)
            return
        self.target[member_id] = set(row["assigned_active"] or row["assigned_partitions"] or ())
        self.warmups[member_id] = len(row["assigned_warmup"] or ())

    def current(self, member_id: str, epoch: int | None, ts: int) -> None:
        if epoch is None:
            self.member_epochs.pop(member_id, None)
        else:
            self.member_epochs[member_id] = epoch
        self._check(ts)

    def _check(self, ts: int) -> None:
        if self.open is None:
            return
        epoch = self.open["epoch"]
        if all(self.member_epochs.get(m) == epoch for m in self.members):
            self._close(ts)

    def close_open(self) -> None:
        self._close(None)

    def _close(self, ts: int | None) -> None:
        if self.open is None:
            return
        row = self.open
        row.update(end_timestamp=ts, duration_ms=None if ts is None else ts - row["start_timestamp"],
                   members_after=sorted(self.members),
                   trigger=_trigger(set(row["members_before"]), self.members),
                   tasks_moved=_moved(self.settled_target, self.target),
                   warmup_tasks=sum(self.warmups.values()))
        self.done.append(row)
        self.open = None
        self.settled_members = set(self.members)
        self.settled_target = {m: set(t) for m, t in self.target.items()}


def _loads(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # a lone surrogate escape (a Java string): the standard library reads it
        return json.loads(text)


def derive(group: str, records: Iterable[Row]) -> list[Row]:
    """Rebalance rows of one group from its `records` rows (any order; sorted here by log position)."""
    ordered = sorted(records, key=lambda r: (r["timestamp"], r["partition"] or 0, r["offset"]))
    modern: dict[str, _ModernGroup] = {}
    classic: list[Row] = []
    last_classic: list[Row] | None = None
    for record in ordered:
        type_id = record["record_type"]
        key = _loads(record["key_json"])["data"]
        value_doc = _loads(record["value_json"]) if record["value_json"] else None
        value = value_doc["data"] if value_doc else None
        ts = record["timestamp"]
        if type_id == 2:
            if value is None or not value.get("members"):
                if value is not None and last_classic:  # every member left: the group's last step
                    classic.append(_emptied_row(group, last_classic, value.get("generation"), ts))
                last_classic = [] if value is not None or last_classic is None else last_classic
                continue
            members = member_rows(2, key, value)
            if last_classic is None or not last_classic or members[0]["generation"] != last_classic[0]["generation"]:
                classic.append(_classic_row(group, last_classic or [], members, ts))
            last_classic = members
            continue
        protocol = METADATA.get(type_id) or TARGET_MEMBER.get(type_id) or CURRENT.get(type_id) or MEMBER.get(type_id)
        if protocol is None:
            continue
        state = modern.get(protocol)
        if state is None:
            state = modern[protocol] = _ModernGroup(group, protocol)
        if type_id in METADATA:
            if value is not None:
                state.metadata(value["epoch"], ts)
        elif type_id in MEMBER:
            state.member(key["memberId"], value is None, ts)
        elif type_id in TARGET_MEMBER:
            state.target_member(key["memberId"], member_rows(type_id, key, value)[0] if value else None)
        else:
            state.current(key["memberId"], value["memberEpoch"] if value else None, ts)
    rows = classic
    for state in modern.values():
        state.close_open()  # a rebalance never reconciled within the data keeps a null end
        rows.extend(state.done)
    return [{c: r.get(c) for c in COLUMNS} for r in rows]


def _emptied_row(group: str, before: list[Row], generation: int | None, ts: int) -> Row:
    return {"group": group, "protocol": "classic", "epoch": generation, "start_timestamp": None, "end_timestamp": ts,
            "duration_ms": None, "trigger": _trigger({r["member_id"] for r in before}, set()),
            "members_before": sorted(r["member_id"] for r in before), "members_after": [], "tasks_moved": 0,
            "warmup_tasks": 0, "probing": False}


def _classic_row(group: str, before: list[Row], after: list[Row], ts: int) -> Row:
    def by_process(rows: list[Row], column: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for r in rows:
            out.setdefault(r["process_id"] or r["member_id"], set()).update(r[column] or ())
        return out

    # Who had each task before: the previous generation's assignment when the log holds it, else what
    # each member said it owned when it joined (Streams' prevTasks).
    previous = by_process(before, "assigned_active") if before else by_process(after, "owned_active")

    owned = {t for r in after for t in [*(r["owned_active"] or ()), *(r["owned_standby"] or ())]}
    warmups = sum(1 for r in after for t in (r["assigned_standby"] or ()) if t not in owned)
    return {"group": group, "protocol": "classic", "epoch": after[0]["generation"], "start_timestamp": None,
            "end_timestamp": ts, "duration_ms": None,
            "trigger": _trigger({r["member_id"] for r in before}, {r["member_id"] for r in after}),
            "members_before": sorted(r["member_id"] for r in before),
            "members_after": sorted(r["member_id"] for r in after),
            "tasks_moved": _moved(previous, by_process(after, "assigned_active")), "warmup_tasks": warmups,
            "probing": any(r["next_rebalance_ms"] not in NO_PROBING for r in after)}

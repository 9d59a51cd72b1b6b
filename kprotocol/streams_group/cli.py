"""`kprotocol streams-groups`: Kafka's `kafka-streams-groups.sh` for a broker or the migration gateway.

    streams-groups list            --gateway|--bootstrap-server HOST:PORT [--state [STATE ...]]
    streams-groups describe        ... --group APP [--members | --offsets | --state] [--wait-stable]
    streams-groups reset-offsets   ... --group APP (--all-input-topics | --input-topic T[:P,..]) --to-... (--dry-run | --execute)
    streams-groups delete          ... --group APP

A group still (or again) on the classic protocol, as every managed group is in the first and last
phase of a migration, is shown as well: its members, protocol and the tasks decoded from the
Streams userdata of their assignments, as `kafka-consumer-groups.sh --describe` shows a classic group.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from kprotocol.errors import error_text
from kprotocol.tools.inputs import UsageError, host_port
from kprotocol.tools.jsontext import dumps
from kprotocol.tools.tables import render

STATES = ("Empty", "NotReady", "Assigning", "Reconciling", "Stable", "Dead")


def _where(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--gateway", type=host_port, metavar="HOST:PORT", help="the migration gateway")
    where.add_argument("--bootstrap-server", type=host_port, metavar="HOST:PORT", help="a broker")


def register(subparsers: argparse._SubParsersAction) -> None:
    groups = subparsers.add_parser("streams-groups", help="describe streams groups (KIP-1071)")
    actions = groups.add_subparsers(dest="action", required=True)
    describe = actions.add_parser("describe", help="state, epochs, members and offsets of streams groups")
    _where(describe)
    describe.add_argument("--group", action="append", required=True, help="a group id; repeatable")
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument("--members", action="store_true", help="one row per member, with its assignment")
    shown.add_argument("--offsets", action="store_true",
                       help="one row per partition: committed offset, log end offset, lag (and its owner)")
    shown.add_argument("--state", action="store_true", help="coordinator, assignor or protocol, state, members")
    describe.add_argument("--format", choices=("table", "json"), default="table")
    describe.add_argument("--pretty", action="store_true", help="indented JSON (with --format json)")
    describe.add_argument("--wait-stable", action="store_true",
                          help="wait until every group is settled; a streams group: Stable, every member at the "
                               "target assignment epoch holding its target, every task active on exactly one "
                               "member; a classic group: Stable, every member synced at the current generation, "
                               "every partition of the subscribed topics assigned to exactly one member; exit 1 "
                               "with the reasons (who is behind, which task is unowned) if --timeout passes first")
    describe.add_argument("--timeout", type=float, default=120.0, metavar="S",
                          help="seconds --wait-stable waits (default 120)")
    describe.set_defaults(func=run)

    listing = actions.add_parser("list", help="the streams groups (and the classic groups of Streams applications)")
    _where(listing)
    listing.add_argument("--state", nargs="*", metavar="STATE",
                         help="show each group's state; with states, only groups in them (case-insensitive)")
    listing.set_defaults(func=run_list)

    reset = actions.add_parser("reset-offsets", help="reset the committed offsets of an inactive group")
    _where(reset)
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--all-input-topics", action="store_true",
                       help="every partition the group has committed an offset for")
    scope.add_argument("--input-topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions; repeatable")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    to.add_argument("--shift-by", type=int, metavar="N", help="from the committed offset, by N (may be negative)")
    to.add_argument("--to-datetime", type=_datetime, metavar="YYYY-MM-DDThh:mm:ss[.sss][Z|+hh:mm]",
                    help="the first offset at or after that time (UTC when no zone is given)")
    mode = reset.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="print the new offsets, change nothing")
    mode.add_argument("--execute", action="store_true", help="commit them")
    reset.set_defaults(func=run_reset)

    delete = actions.add_parser("delete", help="delete inactive groups (their offsets with them)")
    _where(delete)
    delete.add_argument("--group", action="append", required=True, help="a group id; repeatable")
    delete.set_defaults(func=run_delete)


def _datetime(text: str) -> int:
    """--to-datetime: epoch milliseconds (Kafka's format; UTC unless a zone is given)."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DDThh:mm:ss.sss, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def _admin(args: argparse.Namespace) -> Any:
    from kprotocol.streams_group.admin import GroupAdmin

    host, port = args.gateway or args.bootstrap_server
    return GroupAdmin(host, port, gateway=args.gateway is not None)


def _reachable(func: Any) -> Any:
    """A connection that fails midway is one line, as one that cannot be opened."""
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (OSError, EOFError) as exc:
            host, port = args.gateway or args.bootstrap_server
            raise UsageError(f"{host}:{port}: {getattr(exc, 'strerror', None) or exc or type(exc).__name__}") \
                from None
    return run


# --- describe ---------------------------------------------------------------------------------------------


def _tasks(assignment: Any) -> str:
    parts = []
    for role in ("active", "standby", "warmup"):
        ids = getattr(assignment, f"{role}_tasks")
        if ids:
            parts.append(f"{role.upper()}:" + " ".join(f"{t.subtopology_id}:{list(t.partitions)}" for t in ids))
    return " ".join(parts) or "-"


def _classic_tasks(member: Any) -> str:
    """A classic member's tasks, in the streams rows' notation (subtopology:[partitions])."""
    parts = []
    for role, ids in (("ACTIVE", member.active), ("STANDBY", member.standby)):
        by_sub: dict[str, list[int]] = {}
        for task in ids:
            sub, _, partition = task.partition("_")
            by_sub.setdefault(sub, []).append(int(partition))
        if by_sub:
            parts.append(f"{role}:" + " ".join(f"{s}:{sorted(ps)}" for s, ps in sorted(by_sub.items())))
    if member.problem:
        parts.append(f"(undecodable: {member.problem})")
    return " ".join(parts) or "-"


@_reachable
def run(args: argparse.Namespace) -> int:
    if args.wait_stable:
        return _wait_stable(args)
    with _admin(args) as admin:
        streams, classic, version = admin.describe(args.group)
        failed = [g for g in streams.values() if g.error_code]
        for g in failed:  # the same line and exit code in both formats
            sys.stderr.write(f"kprotocol: group {g.group_id}: {error_text(g.error_code, g.error_message)}\n")
        found = [g for g in streams.values() if not g.error_code]
        if args.format == "json":
            from kprotocol.registry import api_classes, message_class

            response = api_classes(message_class("StreamsGroupDescribeRequest").api_key)[1](groups=list(streams.values()))
            shown = response.to_json(version)
            if classic:
                shown["classicGroups"] = [_classic_json(c) for c in classic.values()]
            print(dumps(shown, 2 if args.pretty else None))
            return 1 if failed else 0
        if args.offsets:
            header, rows = _offset_rows(admin, found, classic)
        elif args.state:
            header, rows = _state_rows(admin, found, classic)
        elif args.members:
            header = ["GROUP", "TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH", "MEMBER", "MEMBER-PROTOCOL",
                      "MEMBER-EPOCH", "PROCESS", "CLIENT-ID", "ASSIGNMENTS"]
            rows = [[g.group_id, g.assignment_epoch, g.topology.epoch if g.topology else "-", m.member_id,
                     "classic" if m.is_classic else "streams", m.member_epoch, m.process_id, m.client_id,
                     _tasks(m.assignment)] for g in found for m in g.members]
            rows += [[c.group_id, "-", "-", m.member_id, "classic", "-", m.process_id, m.client_id, _classic_tasks(m)]
                     for c in classic.values() for m in c.members]
        else:
            header = ["GROUP", "STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS", "#CLASSIC"]
            rows = [[g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, len(g.members),
                     sum(m.is_classic for m in g.members)] for g in found]
            rows += [[c.group_id, c.state, "-", "-", len(c.members), len(c.members)] for c in classic.values()]
    if classic and not args.offsets and not args.state:
        sys.stderr.write(f"kprotocol: classic protocol (no streams-protocol member yet or any more): "
                         f"{', '.join(classic)}\n")
    sys.stdout.write(render(header, rows))
    return 1 if failed else 0


def _classic_json(c: Any) -> dict[str, Any]:
    return {"groupId": c.group_id, "groupState": c.state, "protocolType": c.protocol_type, "protocol": c.protocol,
            "members": [{"memberId": m.member_id, "groupInstanceId": m.instance_id, "clientId": m.client_id,
                         "clientHost": m.host, "processId": m.process_id, "topics": m.topics,
                         "partitions": [[t, p] for t, p in m.partitions], "activeTasks": m.active,
                         "standbyTasks": m.standby, "problem": m.problem} for m in c.members]}


def _state_rows(admin: Any, found: list[Any], classic: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """As `kafka-streams-groups.sh --describe --state --verbose`; a classic group's protocol in ASSIGNOR."""
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNOR", "STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]

    def coordinator(group_id: str) -> str:
        where = admin.coordinator(group_id)
        return f"{where[0]}:{where[1]} ({admin.node_ids.get(where, 'gateway')})"

    rows = [[g.group_id, coordinator(g.group_id), g.assignor_name or "-", g.group_state, g.group_epoch,
             g.assignment_epoch, len(g.members)] for g in found]
    rows += [[c.group_id, coordinator(c.group_id), f"{c.protocol_type}/{c.protocol or '-'}(classic)", c.state, "-",
              "-", len(c.members)] for c in classic.values()]
    return header, rows


def _offset_rows(admin: Any, found: list[Any], classic: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """One row per partition the group committed or is assigned: committed offset, log end offset, lag
    (as Kafka's tool: end - committed, negative when the log was truncated below the commit, the end
    when nothing is committed), owner."""
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "OFFSET-LAG", "MEMBER", "CLIENT-ID"]
    rows = []
    for group_id, owners in [*((g.group_id, _streams_owners(admin, g)) for g in found),
                             *((c.group_id, {tp: m for m in c.members for tp in m.partitions})
                               for c in classic.values())]:
        committed = admin.committed(group_id)
        partitions = sorted(set(committed) | set(owners))
        ends = admin.list_offsets(partitions, -1)
        for tp in partitions:
            current, end = committed.get(tp), ends.get(tp)
            lag = None if end is None else end - (current or 0)
            owner = owners.get(tp)
            rows.append([group_id, tp[0], tp[1], current, end, lag, owner.member_id if owner else None,
                         owner.client_id if owner else None])
    return header, rows


def _streams_owners(admin: Any, group: Any) -> dict[tuple[str, int], Any]:
    """The input partitions of each member's active tasks (its subtopologies' source topics)."""
    if group.topology is None:
        return {}
    sources = {s.subtopology_id: [*s.source_topics, *(r.name for r in s.repartition_source_topics)]
               for s in group.topology.subtopologies}
    counts = admin.partition_counts(t for ts in sources.values() for t in ts)
    owners = {}
    for m in group.members:
        for t in m.assignment.active_tasks or ():
            for topic in sources.get(t.subtopology_id, ()):
                for p in t.partitions:
                    if p < counts.get(topic, 0):
                        owners[(topic, p)] = m
    return owners


def _wait_stable(args: argparse.Namespace) -> int:
    """--wait-stable: one line per group once it is settled, or its reasons and exit 1."""
    import time

    from kprotocol.streams_group.stability import describe_settled

    failed = 0
    deadline = time.monotonic() + args.timeout
    with _admin(args) as admin:
        for group_id in args.group:
            conn = admin.connection(admin.coordinator(group_id))
            settled, reasons, waited = describe_settled(conn, group_id, max(0.0, deadline - time.monotonic()))
            if settled:
                print(f"{group_id}: stable after {waited:.1f} s")
                continue
            failed += 1
            sys.stderr.write(f"kprotocol: group {group_id} is not stable after {waited:.1f} s:\n")
            for reason in reasons:
                sys.stderr.write(f"  {reason}\n")
    return 1 if failed else 0


def find_coordinator(host: str, port: int, group_id: str, timeout_s: float = 15.0) -> tuple[str, int]:
    """The broker coordinating `group_id`, asked of `host:port` (retried while the coordinator loads)."""
    from kprotocol.streams_group.admin import GroupAdmin

    with GroupAdmin(host, port, gateway=False, timeout_s=timeout_s) as admin:
        return admin.coordinator(group_id)


# --- list, reset-offsets, delete --------------------------------------------------------------------------


@_reachable
def run_list(args: argparse.Namespace) -> int:
    """Streams groups as Kafka's `--list [--state]`; classic groups of Streams applications (protocol
    `stream`: a group before or after its migration) too, their protocol named."""
    wanted = None
    if args.state:
        by_lower = {s.lower(): s for s in STATES}
        unknown = [s for s in args.state if s.lower() not in by_lower]
        if unknown:
            raise UsageError(f"--state {', '.join(unknown)}: one of {', '.join(STATES)}")
        wanted = {by_lower[s.lower()] for s in args.state}
    with _admin(args) as admin:
        listed = admin.list_groups(["streams", "classic"])
        streams = [(g.group_id, g.group_state, "streams") for g in listed if g.group_type.lower() == "streams"]
        candidates = [g.group_id for g in listed if g.group_type.lower() == "classic"]
        classic = admin.describe_classic(candidates) if candidates else {}
        streams += [(c.group_id, c.state, "classic") for c in classic.values()
                    if not c.error_code and c.protocol_type == "consumer" and c.protocol == "stream"]
    rows = sorted(r for r in streams if wanted is None or r[1] in wanted)
    if args.state is None:
        sys.stdout.write("".join(f"{g}\n" for g, _, _ in rows))
    else:
        sys.stdout.write(render(["GROUP", "STATE", "PROTOCOL"], rows))
    return 0


def _scope(args: argparse.Namespace, admin: Any) -> list[tuple[str, int]]:
    """The partitions --all-input-topics (those with committed offsets) or --input-topic name (a topic's
    partitions from Metadata)."""
    if args.all_input_topics:  # as Kafka's tool: the partitions the group has committed offsets for
        return sorted(admin.committed(args.group))
    named: dict[str, list[int] | None] = {}
    for item in args.input_topic:
        topic, colon, listed = item.partition(":")
        try:
            named[topic] = [int(p) for p in listed.split(",")] if colon else None
        except ValueError:
            raise UsageError(f"--input-topic {item!r}: TOPIC or TOPIC:P,P...") from None
    counts = admin.partition_counts(named)
    missing = sorted(set(named) - set(counts))
    if missing:
        raise UsageError(f"topics not found: {', '.join(missing)}")
    out = []
    for topic, partitions in named.items():
        for p in partitions if partitions is not None else range(counts[topic]):
            if not 0 <= p < counts[topic]:
                raise UsageError(f"{topic}-{p}: {topic} has {counts[topic]} partitions")
            out.append((topic, p))
    return sorted(out)


@_reachable
def run_reset(args: argparse.Namespace) -> int:
    """Kafka's `--reset-offsets`: the group must be inactive (Empty, or Dead: no group yet); new offsets
    are bounded by each partition's log start and end, as Kafka's tool bounds them."""
    from kprotocol.streams_group.admin import EARLIEST, LATEST

    with _admin(args) as admin:
        streams, classic, _ = admin.describe([args.group])
        state = classic[args.group].state if args.group in classic else streams[args.group].group_state \
            if not streams[args.group].error_code else "Dead"
        if state not in ("Empty", "Dead"):
            raise UsageError(f"group {args.group} is {state}: its members must stop before its offsets are reset "
                             "(Kafka's tool refuses the same)")
        partitions = _scope(args, admin)
        earliest, latest = admin.list_offsets(partitions, EARLIEST), admin.list_offsets(partitions, LATEST)
        committed = admin.committed(args.group)
        if args.to_datetime is not None:
            target = admin.list_offsets(partitions, args.to_datetime)
        else:
            target = {}
            for tp in partitions:
                current = committed.get(tp, latest.get(tp, 0))
                target[tp] = (earliest.get(tp) if args.to_earliest else latest.get(tp) if args.to_latest
                              else current if args.to_current else args.to_offset if args.to_offset is not None
                              else current + args.shift_by)
        new = {tp: max(earliest.get(tp, 0), min(o, latest.get(tp, o))) for tp, o in target.items() if o is not None}
        if args.execute:
            errors = {tp: e for tp, e in admin.commit(args.group, new).items() if e}
            for (t, p), e in sorted(errors.items()):
                sys.stderr.write(f"kprotocol: {args.group} {t}-{p}: {error_text(e)}\n")
            if errors:
                return 1
    sys.stdout.write(render(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                            [[args.group, t, p, o] for (t, p), o in sorted(new.items())]))
    return 0


@_reachable
def run_delete(args: argparse.Namespace) -> int:
    """DeleteGroups: an inactive group goes with its offsets; a group with members is refused by its
    coordinator (NON_EMPTY_GROUP), named with the code."""
    with _admin(args) as admin:
        results = admin.delete(args.group)
    failed = {g: e for g, e in results.items() if e}
    deleted = [g for g in results if not failed.get(g)]
    if deleted:
        print(f"Deletion of requested streams groups ({', '.join(repr(g) for g in deleted)}) was successful.")
    for g, e in failed.items():
        sys.stderr.write(f"kprotocol: group {g}: {error_text(e)}\n")
    return 1 if failed else 0

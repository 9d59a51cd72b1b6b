"""`kprotocol streams-groups describe --gateway HOST:PORT --group APP [--members]`: a streams group as
Kafka's `kafka-streams-groups.sh --describe [--members]` shows it, from a broker or the gateway."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kprotocol.errors import error_text
from kprotocol.tools.inputs import UsageError, host_port
from kprotocol.tools.jsontext import dumps
from kprotocol.tools.tables import render


def register(subparsers: argparse._SubParsersAction) -> None:
    groups = subparsers.add_parser("streams-groups", help="describe streams groups (KIP-1071)")
    actions = groups.add_subparsers(dest="action", required=True)
    describe = actions.add_parser("describe", help="state, epochs and members of streams groups")
    where = describe.add_mutually_exclusive_group(required=True)
    where.add_argument("--gateway", type=host_port, metavar="HOST:PORT", help="the migration gateway")
    where.add_argument("--bootstrap-server", type=host_port, metavar="HOST:PORT", help="a broker")
    describe.add_argument("--group", action="append", required=True, help="a group id; repeatable")
    describe.add_argument("--members", action="store_true", help="one row per member, with its assignment")
    describe.add_argument("--format", choices=("table", "json"), default="table")
    describe.add_argument("--pretty", action="store_true", help="indented JSON (with --format json)")
    describe.add_argument("--wait-stable", action="store_true",
                          help="wait until every group is Stable: every member at the target assignment epoch "
                               "holding its target, every task active on exactly one member; exit 1 with the "
                               "reasons (who is behind, which task is unowned) if --timeout passes first")
    describe.add_argument("--timeout", type=float, default=120.0, metavar="S",
                          help="seconds --wait-stable waits (default 120)")
    describe.set_defaults(func=run)


def _tasks(assignment: Any) -> str:
    parts = []
    for role in ("active", "standby", "warmup"):
        ids = getattr(assignment, f"{role}_tasks")
        if ids:
            parts.append(f"{role.upper()}:" + " ".join(f"{t.subtopology_id}:{list(t.partitions)}" for t in ids))
    return " ".join(parts) or "-"


def run(args: argparse.Namespace) -> int:
    from kprotocol.connection import Connection
    from kprotocol.registry import api_classes, message_class

    host, port = args.gateway or args.bootstrap_server
    describe = message_class("StreamsGroupDescribeRequest")
    try:
        # A broker answers for the groups it coordinates: each group is asked of its coordinator (the
        # gateway coordinates its groups itself).
        where = {g: (host, port) for g in args.group} if args.gateway else \
            {g: find_coordinator(host, port, g) for g in args.group}
        if args.wait_stable:
            return _wait_stable(where, args.timeout)
        groups, version = [], 0
        for (h, p) in dict.fromkeys(where.values()):
            with Connection(h, p, client_id="kprotocol-streams-groups") as conn:
                version = conn.version_for(describe)
                groups += conn.send(describe(group_ids=[g for g, at in where.items() if at == (h, p)]), version).groups
        response = api_classes(describe.api_key)[1](groups=groups)
    except OSError as exc:
        raise UsageError(f"cannot reach {host}:{port}: {exc}") from None
    failed = [g for g in response.groups if g.error_code]
    for g in failed:  # the same line and exit code in both formats
        sys.stderr.write(f"kprotocol: group {g.group_id}: {error_text(g.error_code, g.error_message)}\n")
    if args.format == "json":
        print(dumps(response.to_json(version), 2 if args.pretty else None))
        return 1 if failed else 0
    found = [g for g in response.groups if not g.error_code]
    if args.members:
        header = ["GROUP", "TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH", "MEMBER", "MEMBER-PROTOCOL", "MEMBER-EPOCH",
                  "PROCESS", "CLIENT-ID", "ASSIGNMENTS"]
        rows = [[g.group_id, g.assignment_epoch, g.topology.epoch if g.topology else "-", m.member_id,
                 "classic" if m.is_classic else "streams", m.member_epoch, m.process_id, m.client_id,
                 _tasks(m.assignment)] for g in found for m in g.members]
    else:
        header = ["GROUP", "STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS", "#CLASSIC"]
        rows = [[g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, len(g.members),
                 sum(m.is_classic for m in g.members)] for g in found]
    sys.stdout.write(render(header, rows))
    return 1 if failed else 0


def find_coordinator(host: str, port: int, group_id: str, timeout_s: float = 15.0) -> tuple[str, int]:
    """The broker coordinating `group_id`, asked of `host:port` (retried while the coordinator loads)."""
    from kprotocol.connection import Connection
    from kprotocol.registry import message_class

    find = message_class("FindCoordinatorRequest")
    deadline = time.monotonic() + timeout_s
    with Connection(host, port, client_id="kprotocol-streams-groups") as conn:
        version = conn.version_for(find)
        while True:
            request = find(key=group_id, key_type=0) if version < 4 else find(key_type=0, coordinator_keys=[group_id])
            answer = conn.send(request, version)
            found = answer if version < 4 else answer.coordinators[0]
            if found.error_code == 0:
                return found.host, found.port
            if found.error_code not in (14, 15, 16) or time.monotonic() > deadline:  # loading, not available, not it
                raise UsageError(f"no coordinator for group {group_id}: {error_text(found.error_code, found.error_message)}")
            time.sleep(0.5)


def _wait_stable(where: dict[str, tuple[str, int]], timeout_s: float) -> int:
    """--wait-stable: one line per group once it is settled, or its reasons and exit 1."""
    from kprotocol.connection import Connection
    from kprotocol.streams_group.stability import describe_settled

    failed = 0
    deadline = time.monotonic() + timeout_s
    for group_id, (host, port) in where.items():
        with Connection(host, port, client_id="kprotocol-streams-groups") as conn:
            settled, reasons, waited = describe_settled(conn, group_id, max(0.0, deadline - time.monotonic()))
        if settled:
            print(f"{group_id}: stable after {waited:.1f} s")
            continue
        failed += 1
        sys.stderr.write(f"kprotocol: group {group_id} is not stable after {waited:.1f} s:\n")
        for reason in reasons:
            sys.stderr.write(f"  {reason}\n")
    return 1 if failed else 0

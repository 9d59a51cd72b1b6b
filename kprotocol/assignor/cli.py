"""`kprotocol assign SCENARIO.json`: print the assignment of a scenario as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from kprotocol.tools.tables import render, tasks


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("assign", help="assign the tasks of a scenario JSON file")
    parser.add_argument("scenario", help="scenario JSON file (format: shared assignor README)")
    parser.add_argument("--format", choices=["json", "table"], default="json",
                        help="one JSON document (default) or a table per member")
    parser.add_argument("--pretty", action="store_true", help="indented JSON")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from . import ScenarioError, TaskAssignmentError, assign_scenario

    try:
        with open(args.scenario, encoding="utf-8") as f:
            scenario = json.load(f)
        result = assign_scenario(scenario)
    except OSError as exc:
        print(f"kprotocol: error: {args.scenario}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"kprotocol: error: {args.scenario}: not JSON: {exc}", file=sys.stderr)
        return 2
    except (ScenarioError, TaskAssignmentError) as exc:
        print(f"kprotocol assign: {exc}", file=sys.stderr)
        return 1
    if args.format == "table":
        rows = [(member, len(roles.get("active", [])), len(roles.get("standby", [])), len(roles.get("warmup", [])),
                 tasks(roles.get("active", [])), tasks(roles.get("standby", [])), tasks(roles.get("warmup", [])))
                for member, roles in sorted(result["members"].items())]
        sys.stdout.write(render(["member", "active", "standby", "warmup", "active tasks", "standby tasks",
                                 "warm-up tasks"], rows))
        sys.stdout.write(f"probing rebalance: {'yes' if result['probing_rebalance'] else 'no'}\n")
    else:
        print(json.dumps(result, indent=1 if args.pretty else None, sort_keys=True))
    return 0

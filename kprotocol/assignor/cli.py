"""`kprotocol assign SCENARIO.json`: print the assignment of a scenario as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from kprotocol.tools.jsontext import dumps
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
        with open(args.scenario, "rb") as f:
            scenario = json.loads(f.read())
        result = assign_scenario(scenario)
    except OSError as exc:
        print(f"kprotocol: error: {args.scenario}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # text that is not JSON, or bytes that are not text
        print(f"kprotocol: error: {args.scenario}: not JSON: {exc}", file=sys.stderr)
        return 2
    except (ScenarioError, TaskAssignmentError) as exc:
        print(f"kprotocol assign: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # an optional dependency (scipy for the rack-aware assignor): which extra to install
        print(f"kprotocol assign: {exc}", file=sys.stderr)
        return 2
    if args.format == "table":
        rows = [(member, len(roles.get("active", [])), len(roles.get("standby", [])), len(roles.get("warmup", [])),
                 tasks(roles.get("active", [])), tasks(roles.get("standby", [])), tasks(roles.get("warmup", [])))
                for member, roles in sorted(result["members"].items())]
        sys.stdout.write(render(["member", "active", "standby", "warmup", "active tasks", "standby tasks",
                                 "warm-up tasks"], rows))
        sys.stdout.write(f"probing rebalance: {'yes' if result['probing_rebalance'] else 'no'}\n")
    else:
        print(dumps(result, 2 if args.pretty else None, sort_keys=True))
    return 0

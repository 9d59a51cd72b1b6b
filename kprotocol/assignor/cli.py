"""`kprotocol assign SCENARIO.json`: print the assignment of a scenario as JSON."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("assign", help="assign the tasks of a scenario JSON file")
    parser.add_argument("scenario", help="scenario JSON file (format: shared assignor README)")
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
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0

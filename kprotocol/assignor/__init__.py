"""The shared task assignor: sticky (KIP-1071) and highly-available (KIP-441) assignors with KIP-925 rack
awareness behind the KIP-924 `TaskAssignor` API, plus the neutral scenario interface `assign_scenario`."""

from __future__ import annotations

from typing import Any

from .api import (AssignedTask, AssignedTaskType, AssignmentConfigs, AssignmentError, ApplicationState,
                  KafkaStreamsAssignment, KafkaStreamsState, TaskAssignment, TaskAssignor, TaskInfo,
                  TaskTopicPartition, load_assignor, validate_task_assignment)
from .errors import ScenarioError, TaskAssignmentError
from .highly_available import HighAvailabilityTaskAssignor
from .members import distribute
from .scenario import parse_scenario
from .sticky import StickyTaskAssignor
from .utils import TaskAssignmentUtils

BUILT_IN_ASSIGNORS: dict[str, type] = {"sticky": StickyTaskAssignor, "highly_available": HighAvailabilityTaskAssignor}


def resolve_assignor(name: str) -> TaskAssignor:
    """A built-in assignor by name, or a user's one by `"package.module:Class"`."""
    if name in BUILT_IN_ASSIGNORS:
        return BUILT_IN_ASSIGNORS[name]()
    if ":" in name:
        try:
            return load_assignor(name)
        except TaskAssignmentError as exc:
            raise ScenarioError(str(exc)) from exc
    raise ScenarioError(f"unknown assignor {name!r}: use sticky, highly_available or 'package.module:Class'")


def assign_scenario(scenario: dict[str, Any]) -> dict[str, Any]:
    """Assign a scenario in the shared JSON format; returns {"members": ..., "probing_rebalance": ...}."""
    parsed = parse_scenario(scenario)
    assignor = resolve_assignor(parsed.assignor)
    assignment = assignor.assign(parsed.state)
    error = validate_task_assignment(parsed.state, assignment)
    if error is not AssignmentError.NONE:
        raise TaskAssignmentError(f"assignor {parsed.assignor!r} returned an invalid assignment: {error.value}")
    return {"members": distribute(assignment, parsed.members), "probing_rebalance": assignment.follow_up_requested()}


__all__ = [
    "BUILT_IN_ASSIGNORS", "ApplicationState", "AssignedTask", "AssignedTaskType", "AssignmentConfigs",
    "AssignmentError",
    "HighAvailabilityTaskAssignor", "KafkaStreamsAssignment", "KafkaStreamsState", "ScenarioError",
    "StickyTaskAssignor", "TaskAssignment", "TaskAssignmentError", "TaskAssignmentUtils", "TaskAssignor",
    "TaskInfo", "TaskTopicPartition", "assign_scenario", "load_assignor", "resolve_assignor",
    "validate_task_assignment",
]

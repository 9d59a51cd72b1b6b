"""Errors of the task assignor."""

from __future__ import annotations


class ScenarioError(ValueError):
    """An assignment input that cannot be assigned: unknown task ids, duplicate members, bad counts..."""


class TaskAssignmentError(RuntimeError):
    """A pluggable assignor failed or returned an invalid assignment."""

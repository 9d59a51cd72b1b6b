"""What a Spark task runs on: whether its Python has kprotocol's compiled paths.

Every task reports `task_runtime()`; the job's summary counts the tasks with each compiled path,
and a task without one of them (kprotocol shipped as a zip, or an executor Python without the
extensions) is a loud warning, an error with `--require-accel`.
"""

from __future__ import annotations

import sys
from typing import Any

RUNTIME = "runtime"  # the name a task's runtime report goes by among its (table, rows) pairs


def compiled() -> dict[str, bool]:
    """accel: the codec's compiled plans (`kprotocol.runtime.accel.ENABLED`); walk: the compiled capture
    walk; offsets: the compiled __consumer_offsets path (`kprotocol.coordinator_topics.lines`)."""
    from kprotocol.capture import walk
    from kprotocol.coordinator_topics import lines
    from kprotocol.runtime import accel

    return {"accel": accel.ENABLED, "walk": walk._walk is not None, "offsets": lines.ENABLED}


def task_runtime() -> tuple[str, dict[str, bool]]:
    """(Python executable, `compiled()`) of the process running this task."""
    return sys.executable, compiled()


def runtime_summary(runtimes: list[tuple[str, dict[str, bool]]]) -> dict[str, Any]:
    """For the job's summary: tasks, how many had each compiled path (`tasks_accel`...), how many
    lacked one (`pure_python_tasks`), and the executors' Pythons."""
    summary: dict[str, Any] = {"tasks": len(runtimes)}
    for name in compiled():
        summary[f"tasks_{name}"] = sum(status.get(name, False) for _, status in runtimes)
    summary["pure_python_tasks"] = sum(not all(status.values()) for _, status in runtimes)
    summary["executor_pythons"] = sorted({python for python, _ in runtimes})
    return summary

"""What a Spark task runs on: whether its Python has kprotocol's compiled paths.

Every task reports `compiled()`; the job's summary counts the tasks with and without them, and a
task in pure Python (kprotocol shipped as a zip, or an executor Python without the extensions) is
a loud warning, an error with `--require-accel`.
"""

from __future__ import annotations

import socket
import sys


def compiled() -> dict[str, bool]:
    """accel: the codec's compiled plans (`kprotocol.runtime.accel.ENABLED`); walk: the compiled capture walk."""
    from kprotocol.capture import walk
    from kprotocol.runtime import accel

    return {"accel": accel.ENABLED, "walk": walk._walk is not None}


def task_runtime() -> tuple[str, str, bool, bool]:
    """(host, Python executable, accel, walk) of the process running this task."""
    status = compiled()
    return socket.gethostname(), sys.executable, status["accel"], status["walk"]


RUNTIME = "runtime"  # the name a task's runtime report goes by among its (table, rows) pairs


def runtime_summary(runtimes: list[tuple[str, str, bool, bool]]) -> dict[str, object]:
    """For the job's summary: tasks, how many had each compiled path, and the executors' Pythons."""
    return {"tasks": len(runtimes), "tasks_accel": sum(r[2] for r in runtimes),
            "tasks_walk": sum(r[3] for r in runtimes),
            "pure_python_tasks": sum(not (r[2] and r[3]) for r in runtimes),
            "executor_pythons": sorted({r[1] for r in runtimes})}

"""Child processes that cannot outlive the Python process that started them.

Tests stop every JVM by its PID; this covers the case where Python itself is killed first
(a CI time-out, Ctrl-C twice): the kernel then sends the child SIGTERM (Linux's parent-death
signal), so no broker or Streams app is left behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn` for subprocess.Popen."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_process(process: subprocess.Popen, timeout: float) -> int:
    """SIGTERM `process` by its PID, wait for it to exit (SIGKILL after `timeout`); its exit code."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode

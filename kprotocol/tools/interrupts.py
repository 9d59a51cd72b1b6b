"""Ctrl-C ends a command with one line on stderr and exit status 130, whatever it was running."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

INTERRUPTED = 130  # as a shell reports a command that SIGINT ended
MESSAGE = "kprotocol: interrupted\n"


def _exit_now(signum: int, frame: object) -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os.write(2, MESSAGE.encode())
    os._exit(INTERRUPTED)


@contextmanager
def exit_on_interrupt() -> Iterator[None]:
    """From here on, Ctrl-C writes the one line and ends the process at once, unwinding nothing; within
    the block, nothing else may take SIGINT over. For a process driving a JVM through Py4J: an interrupt
    unwinding through a Py4J call is logged with its traceback, the handler a SparkContext installs
    cancels jobs from inside the signal handler (more tracebacks), and stopping the session may wait on
    them. A JVM that PySpark started ends by itself when this process's end closes its standard input."""
    install = signal.signal

    def keep(signum: int, handler: object) -> object:
        return signal.getsignal(signum) if signum == signal.SIGINT else install(signum, handler)  # type: ignore[arg-type]

    install(signal.SIGINT, _exit_now)
    signal.signal = keep  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = install

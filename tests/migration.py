"""The migration gateway as a process (`kprotocol gateway`), started and stopped by its PID."""

from __future__ import annotations

import collections
import itertools
import subprocess
import sys
import time
from pathlib import Path

from kprotocol.toolchain.broker import free_port
from kprotocol.toolchain.processes import die_with_parent, stop_process


class PortTaken(RuntimeError):
    """The gateway could not listen: another process took the port."""


class GatewayProcess:
    def __init__(self, upstream: str, groups: list[str], state: Path, log: Path,
                 group_configs: dict[str, str] | None = None) -> None:
        self.upstream, self.groups, self.state, self.log = upstream, groups, state, log
        self.group_configs = {"streams.session.timeout.ms": "10000", **(group_configs or {})}  # as the apps' classic consumers
        self.port, self.broker_base = free_port(), free_port()
        self.started_once = False
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> GatewayProcess:
        """Start it; a port taken meanwhile by another process (free_port is only a guess) is picked anew,
        the bootstrap port only before the first start (clients keep it across restarts)."""
        for attempt in range(3):
            try:
                return self._start()
            except PortTaken:
                if attempt == 2:
                    raise
                self.broker_base = free_port()
                if not self.started_once:
                    self.port = free_port()

    def _start(self) -> GatewayProcess:
        command = [sys.executable, "-m", "kprotocol", "gateway", "--upstream", self.upstream,
                   "--listen", self.bootstrap, "--broker-port-base", str(self.broker_base), "--state", str(self.state),
                   "--initial-rebalance-delay-ms", "1000", "--no-uvloop", "--verbose"]
        for name, value in self.group_configs.items():
            command += ["--group-config", f"{name}={value}"]
        for group in self.groups:
            command += ["--group", group]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log.open("ab"),
                                        stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                        preexec_fn=die_with_parent)
        line = self.process.stdout.readline()  # "gateway on ..." once it listens
        if not line.startswith("gateway on"):
            self.process.wait(10)
            self.process = None
            tail = self.log.read_text()[-2000:]
            raise (PortTaken if "address already in use" in tail.splitlines()[-1] else RuntimeError)(
                f"gateway did not start: {line!r}; log: {tail}")
        self.started_once = True
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 20)
            self.process = None

    def kill(self) -> None:
        """kill -9: no drain, no last state write."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        self.stop()
        time.sleep(0.5)
        self.start()


def overlaps(histories: list[list[dict]]) -> list[str]:
    """Tasks reported active by two instances over a common time span (from the apps' own events).

    Kafka Streams revokes a task only during a rebalance and its thread metadata shows the change at
    the rebalance's end, so a task that is gone once an instance is RUNNING again counts as given up
    when that rebalance began."""
    spans: dict[str, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for who, events in enumerate(histories):
        tasks = [e for e in events if e.get("event") == "tasks"]
        end_of_life = max((e.get("timeMs", 0) for e in events), default=0)
        rebalance_began = None
        for current, following in zip(tasks, tasks[1:] + [None]):
            if current.get("state") == "REBALANCING":
                rebalance_began = current["timeMs"] if rebalance_began is None else rebalance_began
            else:
                rebalance_began = None
            until = following["timeMs"] if following else end_of_life
            for task in current["active"]:
                gone = following is not None and task not in following["active"]
                end = rebalance_began if gone and rebalance_began is not None else until
                if end > current["timeMs"] or rebalance_began is None:
                    spans[task].append((current["timeMs"], end, who))
    found = []
    for task, owned in spans.items():
        for (a0, a1, x), (b0, b1, y) in itertools.combinations(owned, 2):
            if x != y and max(a0, b0) < min(a1, b1):
                found.append(f"{task}: instance {x} {a0}-{a1} and {y} {b0}-{b1}")
    return found

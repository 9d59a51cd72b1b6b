"""The Kafka Streams test application (java/.../streamsapp/CountApp.java) driven from Python.

    app = StreamsApp.start(broker.bootstrap, "counts-app", "input", "output", group_protocol="streams")
    app.wait_for(lambda e: e["event"] == "state" and e["to"] == "RUNNING")
    app.stop()

It counts records per key in a persistent store and writes the counts to the output topic; every
lifecycle event (state changes, the tasks each instance runs, errors, the clean close) arrives as
one JSON line, collected in `events`. `streams_version` runs it on an older Kafka Streams release.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kprotocol.toolchain.maven import java_command, legacy_streams_libs
from kprotocol.toolchain.processes import die_with_parent, stop_process

MAIN_CLASS = "io.kprotocol.streamsapp.CountApp"
Event = dict[str, Any]


@dataclass
class StreamsApp:
    process: subprocess.Popen[str]
    state_dir: Path
    owns_state_dir: bool
    events: list[Event] = field(default_factory=list)
    stderr_path: Path | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, bootstrap: str, application_id: str, input_topic: str, output_topic: str, *,
              group_protocol: str = "classic", num_standby_replicas: int = 0,
              processing_guarantee: str = "at_least_once", instances: int = 1, state_dir: Path | None = None,
              streams_version: str | None = None, extra: dict[str, str] | None = None) -> StreamsApp:
        owns = state_dir is None
        state_dir = Path(state_dir or tempfile.mkdtemp(prefix="kprotocol-streams-"))
        config = {
            "bootstrap": bootstrap, "application.id": application_id, "input": input_topic, "output": output_topic,
            "instances": str(instances), "state.dir": str(state_dir), "num.standby.replicas": str(num_standby_replicas),
            "processing.guarantee": processing_guarantee, "commit.interval.ms": "200",
            "statestore.cache.max.bytes": "0", "consumer.session.timeout.ms": "10000",
            "consumer.heartbeat.interval.ms": "500", "consumer.max.poll.interval.ms": "30000",
            **({"group.protocol": group_protocol} if group_protocol != "classic" or streams_version is None else {}),
            **(extra or {}),
        }
        libs = legacy_streams_libs(streams_version) if streams_version else None
        state_dir.mkdir(parents=True, exist_ok=True)
        stderr_path = next(state_dir / f"app{n or ''}.log" for n in itertools.count()  # one log per start
                           if not (state_dir / f"app{n or ''}.log").exists())
        process = subprocess.Popen(
            java_command(MAIN_CLASS, *(f"{k}={v}" for k, v in config.items()), libs=libs, heap="384m"),
            stdout=subprocess.PIPE, stderr=stderr_path.open("wb"), stdin=subprocess.DEVNULL, text=True,
            start_new_session=True, preexec_fn=die_with_parent)
        app = cls(process, state_dir, owns, stderr_path=stderr_path)
        threading.Thread(target=app._read, daemon=True).start()
        return app

    def _read(self) -> None:
        for line in self.process.stdout:  # type: ignore[union-attr]
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"event": "output", "line": line.rstrip("\n")}
            with self._changed:
                self.events.append(event)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 60.0) -> list[Event]:
        """Wait until `predicate(events)` holds; raise TimeoutError (with the app's last log lines) if not."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not predicate(self.events)):
                    tail = self.stderr_path.read_text(errors="replace")[-3000:] if self.stderr_path else ""
                    raise TimeoutError(f"Streams app condition not met (exit {self.process.poll()}); "
                                       f"events: {self.events[-10:]}; log tail: {tail}")
                self._changed.wait(min(left, 0.5))
            return list(self.events)

    def latest_tasks(self) -> dict[int, Event]:
        """The last `tasks` event of each instance."""
        with self._changed:
            return {e["instance"]: e for e in self.events if e.get("event") == "tasks"}

    def running_with_tasks(self, instances: int, active: int | None = None) -> Callable[[list[Event]], bool]:
        """A predicate: every instance RUNNING, and (optionally) `active` active tasks in total."""
        def check(events: list[Event]) -> bool:
            latest = {e["instance"]: e for e in events if e.get("event") == "tasks"}
            if len(latest) < instances or any(e["state"] != "RUNNING" for e in latest.values()):
                return False
            return active is None or sum(len(e["active"]) for e in latest.values()) == active
        return check

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM the app's PID (its instances close cleanly), SIGKILL after `timeout`."""
        stop_process(self.process, timeout)
        if self.owns_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return self.process.returncode

"""Apache Kafka's published Kafka Streams examples run as they ship, driven from Python.

    app = ExampleApp.start("wordcount", broker.bootstrap, "wc-app", state_dir, group_protocol="streams",
                           num_standby_replicas=1, processing_guarantee="exactly_once_v2")
    app.kill()          # kill -9
    app.stop()          # SIGTERM: the example's shutdown hook closes Kafka Streams; how long it took

The examples (`org.apache.kafka:kafka-streams-examples`, pinned in java/streams-examples/pom.xml)
take one optional argument, a properties file, and fix their topic names; everything else (the
application id, the group protocol, standbys, the processing guarantee, threads) goes in that file.
They run on the current Kafka Streams release, or on an older one with `streams_version`.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kprotocol.toolchain.maven import java_command, legacy_streams_libs, streams_examples_libs
from kprotocol.toolchain.processes import die_with_parent


@dataclass(frozen=True)
class Example:
    main_class: str
    input_topics: tuple[str, ...]
    output_topic: str
    subtopologies: int
    count_format: str  # how the output values carry counts: "long" (8 bytes, big-endian) or "text"

    def count(self, value: bytes) -> int:
        return int.from_bytes(value, "big", signed=True) if self.count_format == "long" else int(value)


EXAMPLES = {
    # flatMapValues -> groupBy (a repartition topic) -> count: two subtopologies, one state store
    "wordcount": Example("org.apache.kafka.streams.examples.wordcount.WordCountDemo",
                         ("streams-plaintext-input",), "streams-wordcount-output", 2, "long"),
    # the Processor API with a state store and punctuation: one subtopology
    "wordcount-processor": Example("org.apache.kafka.streams.examples.wordcount.WordCountProcessorDemo",
                                   ("streams-plaintext-input",), "streams-wordcount-processor-output", 1, "text"),
}


@dataclass
class ExampleApp:
    name: str
    process: subprocess.Popen
    log_path: Path

    @classmethod
    def start(cls, name: str, bootstrap: str, application_id: str, state_dir: Path, *,
              group_protocol: str = "classic", num_standby_replicas: int = 0,
              processing_guarantee: str = "at_least_once", threads: int = 1,
              streams_version: str | None = None, extra: dict[str, str] | None = None) -> ExampleApp:
        example = EXAMPLES[name]
        state_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "application.id": application_id, "bootstrap.servers": bootstrap, "state.dir": str(state_dir),
            "num.standby.replicas": str(num_standby_replicas), "processing.guarantee": processing_guarantee,
            "num.stream.threads": str(threads), "commit.interval.ms": "200",
            "consumer.session.timeout.ms": "10000", "consumer.heartbeat.interval.ms": "500",
            "consumer.max.poll.interval.ms": "30000", "acceptable.recovery.lag": "10000",
            **({"group.protocol": group_protocol} if group_protocol != "classic" else {}),
            **(extra or {}),
        }
        start = next(n for n in itertools.count() if not (state_dir / f"app{n}.properties").exists())
        properties = state_dir / f"app{start}.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        log_path = state_dir / f"app{start}.log"
        libs = legacy_streams_libs(streams_version) if streams_version else None
        command = java_command(example.main_class, str(properties), libs=libs, heap="384m",
                               extra_libs=(streams_examples_libs(),))
        process = subprocess.Popen(command, stdout=log_path.open("ab"), stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
        return cls(name, process, log_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """kill -9, as a crashed machine would leave it."""
        if self.alive():
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 60.0) -> float | None:
        """SIGTERM; the seconds it took to exit, or None when it hung and was killed after `timeout`."""
        if not self.alive():
            return 0.0
        begin = time.monotonic()
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        return time.monotonic() - begin

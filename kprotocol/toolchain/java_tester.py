"""Kafka's own generated Java message classes as the judge of kprotocol's bytes and JSON.

    with JavaTester() as java:
        java.known()                                   # {"JoinGroupRequest": (0, 9), ...}
        java.round_trip("JoinGroupRequest", 7, [data]) # [{"hex": ..., "json": {...}} | {"error": ...}]

One long-lived JVM (java/.../tester/RoundTripServer.java) reads each payload with Kafka's class,
writes it back and renders it with Kafka's JSON converter; requests and answers are JSON lines.
`compare` checks a batch of kprotocol messages against it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from kprotocol.runtime.struct import Message
from kprotocol.toolchain.maven import java_command
from kprotocol.toolchain.processes import die_with_parent

MAIN_CLASS = "io.kprotocol.tester.RoundTripServer"


@dataclass
class Mismatch:
    spec: str
    version: int
    hex: str
    problem: str


@dataclass
class Tally:
    """Counts of one run: messages compared, mismatches, and what Kafka itself refused."""

    spec_versions: int = 0
    messages: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    kafka_refused: list[Mismatch] = field(default_factory=list)


RECORDS_FIELDS = {"records", "unalignedRecords"}


def _without(doc: Any, keys: frozenset[str]) -> Any:
    if not keys:
        return doc
    if isinstance(doc, dict):
        return {k: _without(v, keys) for k, v in doc.items() if k not in keys}
    if isinstance(doc, list):
        return [_without(v, keys) for v in doc]
    return doc


def same_json(kafka: Any, ours: Any) -> bool:
    """Equal JSON, except that Kafka's converter renders every non-null records field as an empty
    binary (the bytes themselves are compared exactly)."""
    if isinstance(kafka, dict) and isinstance(ours, dict):
        if kafka.keys() != ours.keys():
            return False
        return all(same_json(v, ours[k]) or (k in RECORDS_FIELDS and v == "" and isinstance(ours[k], str))
                   for k, v in kafka.items())
    if isinstance(kafka, list) and isinstance(ours, list):
        return len(kafka) == len(ours) and all(same_json(a, b) for a, b in zip(kafka, ours))
    return kafka == ours


class JavaTester:
    def __init__(self) -> None:
        self.process = subprocess.Popen(java_command(MAIN_CLASS, heap="768m"), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        encoding="utf-8", start_new_session=True, preexec_fn=die_with_parent)

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the Java round-trip server exited with {self.process.poll()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"Java round-trip server: {reply['error']}")
        return reply

    def known(self) -> dict[str, tuple[int, int]]:
        """Every spec the Kafka jars have generated classes for, with its version range."""
        return {name: (low, high) for name, (low, high) in self._call({"op": "list"})["specs"].items()}

    def round_trip(self, spec: str, version: int, payloads: list[bytes]) -> list[dict[str, Any]]:
        reply = self._call({"op": "roundtrip", "spec": spec, "version": version, "items": [p.hex() for p in payloads]})
        return reply["results"]

    def compare(self, spec: str, version: int, messages: list[Message], tally: Tally,
                kept: frozenset[str] = frozenset()) -> None:
        """Encode `messages` with kprotocol, round-trip them through Kafka's class, record any difference.
        `kept` names JSON keys of tagged fields the release no longer knows (Kafka keeps them as
        unknown tags, so only the bytes can agree)."""
        payloads = [m.encode(version) for m in messages]
        tally.spec_versions += 1
        tally.messages += len(payloads)
        for message, payload, result in zip(messages, payloads, self.round_trip(spec, version, payloads)):
            if "error" in result:
                tally.kafka_refused.append(Mismatch(spec, version, payload.hex(), result["error"]))
            elif result["hex"] != payload.hex():
                tally.mismatches.append(Mismatch(spec, version, payload.hex(), f"Kafka wrote {result['hex']}"))
            elif "json" in result and not same_json(result["json"], _without(message.to_json(version), kept)):
                tally.mismatches.append(Mismatch(spec, version, payload.hex(),
                                                 f"JSON differs: Kafka {result['json']} kprotocol "
                                                 f"{message.to_json(version)}"))

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self) -> JavaTester:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

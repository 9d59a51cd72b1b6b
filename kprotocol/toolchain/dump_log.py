"""Kafka's `kafka-dump-log` (DumpLogSegments, run from the jars) parsed into batches and records,
so its view of a segment can be compared with kprotocol's.

    batches = dump_log(paths, decoder="--offsets-decoder")
    batches[0]["baseOffset"], batches[0]["records"][0]["key"]   # key/payload as parsed JSON
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kprotocol.toolchain.broker import run_kafka_tool

MAIN_CLASS = "org.apache.kafka.tools.DumpLogSegments"
FIELD = re.compile(r"(\w+): (\S+)")


def _scalar(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text


def _record(line: str) -> dict[str, Any]:
    """`| offset: 0 CreateTime: ... key: {...} payload: {...}` (key and payload are JSON, last)."""
    record: dict[str, Any] = {}
    head, _, rest = line[2:].partition(" key: ")
    for name, value in FIELD.findall(head):
        record[name] = _scalar(value)
    if rest:
        key_text, _, payload = rest.partition(" payload: ")
        record["key"] = json.loads(key_text)
        record["payload"] = None if payload.strip() in ("", "null", "<DELETE>") else json.loads(payload)
    return record


def dump_log(paths: list[Path], decoder: str = "--offsets-decoder") -> list[dict[str, Any]]:
    """Every batch of `paths` as Kafka's tool prints it, each with its `file` and `records`."""
    out = run_kafka_tool(MAIN_CLASS, "--files", ",".join(map(str, paths)), "--print-data-log", decoder).stdout
    batches: list[dict[str, Any]] = []
    current_file = ""
    for line in out.splitlines():
        if line.startswith("Dumping "):
            current_file = line[len("Dumping "):].strip()
        elif line.startswith("baseOffset: "):
            batch = {name: _scalar(value) for name, value in FIELD.findall(line)}
            batch.update(file=current_file, records=[])
            batches.append(batch)
        elif line.startswith("| offset: "):
            try:
                batches[-1]["records"].append(_record(line))
            except ValueError as exc:
                raise ValueError(f"unexpected kafka-dump-log line {line[:300]!r}: {exc}") from None
    return batches

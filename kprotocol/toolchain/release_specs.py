"""The JSON message specs inside the resolved Kafka release's jars, compared with `schemas/`.

A spec "agrees" when its wire structure is the same as ours once descriptions and the
release-level bookkeeping (the supported version range, listeners, unstable flags) are set
aside: kprotocol keeps older versions that newer releases stopped accepting, so captures of
older clients still decode.
"""

from __future__ import annotations

import json
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

from codegen.jsonc import strip_comments
from kprotocol.toolchain.maven import kafka_libs, kafka_version

SPEC_JARS = ("kafka-clients", "kafka-group-coordinator", "kafka-share-coordinator",
             "kafka-transaction-coordinator", "kafka-streams")
BOOKKEEPING = {"validVersions", "deprecatedVersions", "listeners", "latestVersionUnstable", "about"}
SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@cache
def release_specs() -> dict[str, dict[str, Any]]:
    """Spec name -> parsed spec, for every JSON spec in the release's message jars."""
    specs: dict[str, dict[str, Any]] = {}
    version = kafka_version()
    for jar in SPEC_JARS:
        with zipfile.ZipFile(kafka_libs() / f"{jar}-{version}.jar") as archive:
            for entry in archive.namelist():
                if entry.startswith("common/message/") and entry.endswith(".json"):
                    spec = json.loads(strip_comments(archive.read(entry).decode("utf-8")))
                    specs[spec["name"]] = spec
    return specs


def structure(node: Any, top: bool = True) -> Any:
    """A spec without prose and, at the top, without release bookkeeping."""
    if isinstance(node, dict):
        return {k: structure(v, False) for k, v in node.items()
                if k != "about" and not (top and k in BOOKKEEPING)}
    if isinstance(node, list):
        return [structure(v, False) for v in node]
    return node


def ours(name: str) -> dict[str, Any] | None:
    path = SCHEMAS / f"{name}.json"
    return json.loads(strip_comments(path.read_text(encoding="utf-8"))) if path.is_file() else None


def disagreements() -> dict[str, str]:
    """Release spec name -> how schemas/ differs from it (missing, or structure). Specs the
    release retired (no valid versions) are not compared."""
    out: dict[str, str] = {}
    for name, spec in sorted(release_specs().items()):
        mine = ours(name)
        if spec.get("validVersions") == "none":
            continue  # retired by the release; kprotocol keeps it for older traffic
        if mine is None:
            out[name] = "missing from schemas/"
        elif structure(mine) != structure(spec):
            keys = sorted(k for k in set(mine) | set(spec)
                          if k not in BOOKKEEPING and structure(mine.get(k), False) != structure(spec.get(k), False))
            out[name] = "differs in " + ", ".join(keys)
    return out

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
BOOKKEEPING = {"validVersions", "deprecatedVersions", "latestVersionUnstable"}
# Code-generation hints that releases change without changing a byte on the wire.
NOT_WIRE = {"about", "mapKey", "ignorable", "zeroCopy", "listeners"}
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


def _default(value: Any) -> Any:
    """A default as releases variously write it (-1, "-1", "0x7fffffff", false, "false")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return value.lower() if value.lower() in ("true", "false", "null") else value
    return value


def _last_version(versions: str) -> int:
    if versions.endswith("+"):
        return 1 << 15
    low, _, high = versions.partition("-")
    return int(high or low)


def structure(node: Any, top: bool = True, low: int = 0) -> Any:
    """A spec's wire structure: no prose, no code-generation hints, defaults normalised, no fields
    that only versions below `low` have and, at the top, no release bookkeeping."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in NOT_WIRE or (top and k in BOOKKEEPING) or (k == "default" and v in (None, "")):
                continue  # a JSON null or empty default is no default at all
            if k in ("fields", "commonStructs"):
                v = [f for f in v if _last_version(f.get("versions", "0+")) >= low]
            out[k] = _default(v) if k == "default" else structure(v, False, low)
        return out
    if isinstance(node, list):
        return [structure(v, False, low) for v in node]
    return node


def _without_tags(node: Any, tags: set[str]) -> Any:
    if isinstance(node, dict):
        return {k: [_without_tags(f, tags) for f in v if f.get("name") not in tags]
                if k in ("fields", "commonStructs") else _without_tags(v, tags) for k, v in node.items()}
    if isinstance(node, list):
        return [_without_tags(v, tags) for v in node]
    return node


def kept_tagged(name: str) -> set[str]:
    """Tagged fields schemas/ keeps that the release dropped (older brokers wrote them; the release
    reads them as unknown tags, so the bytes agree): their spec names."""
    mine, spec = ours(name), release_specs().get(name)
    if mine is None or spec is None:
        return set()

    def tagged(node: Any, out: set[str]) -> set[str]:
        for key in ("fields", "commonStructs"):
            for f in node.get(key, []):
                if "tag" in f:
                    out.add(f["name"])
                tagged(f, out)
        return out

    def names(node: Any, out: set[str]) -> set[str]:
        for key in ("fields", "commonStructs"):
            for f in node.get(key, []):
                out.add(f["name"])
                names(f, out)
        return out

    return tagged(mine, set()) - names(spec, set())


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
        else:
            low, _, high = spec["validVersions"].partition("-")
            low, high = int(low), int(high or low)
            our_high = _last_version(mine["validVersions"])
            ours_now = structure(_without_tags(mine, kept_tagged(name)), low=low)
            theirs = structure(spec, low=low)
            if our_high < high:
                out[name] = f"lacks versions {our_high + 1}-{high}"
            elif ours_now != theirs:
                keys = sorted(k for k in set(ours_now) | set(theirs) if ours_now.get(k) != theirs.get(k))
                out[name] = "differs in " + ", ".join(keys)
    return out

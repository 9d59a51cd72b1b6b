"""How the resolved Kafka release's specs legitimately differ from the older reference specs the
golden vectors were made with: versions added at the top, tagged fields added, field ranges closed
where the release stopped at a version, and fields renamed in place (same position, type and
versions, so the same bytes; only the JSON name changed)."""

from __future__ import annotations

from typing import Any


def first_version(versions: str) -> int:
    return int(versions.rstrip("+").partition("-")[0])


def _clamp(versions: str, high: int) -> str:
    """"a-b" (or "a") reaching `high` is "a+" as far as versions up to `high` are concerned."""
    if not versions or versions.endswith("+") or versions == "none":
        return versions
    low, _, end = versions.partition("-")
    return f"{low}+" if int(end or low) >= high else versions


def up_to(node: Any, high: int, reference: Any) -> Any:
    """`node` as a spec of versions <= `high` that knows only the reference's tagged fields."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            ref = reference.get(k) if isinstance(reference, dict) else None
            if k in ("fields", "commonStructs"):
                known = {f["name"]: f for f in ref or ()}
                v = [up_to(f, high, known.get(f["name"])) for f in v
                     if first_version(f.get("versions", "0")) <= high and (f["name"] in known or "tag" not in f)]
            elif k in ("versions", "nullableVersions", "taggedVersions") and isinstance(v, str):
                v = _clamp(v, high)
            else:
                v = up_to(v, high, ref)
            out[k] = v
        return out
    if isinstance(node, list):
        return [up_to(v, high, reference[i] if isinstance(reference, list) and i < len(reference) else None)
                for i, v in enumerate(node)]
    return node


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _high(spec: dict) -> int:
    low, _, high = spec["validVersions"].partition("-")
    return int(high or low)


def renames(reference: dict, ours: dict) -> dict[str, str]:
    """JSON names of fields the release renamed in place: {old: new} (compared at the reference's
    versions, where the renamed field has the same position, type and versions)."""
    found: dict[str, str] = {}
    high = _high(reference)

    def walk(ref_fields: list, our_fields: list) -> None:
        ours_then = [f for f in our_fields if first_version(f.get("versions", "0")) <= high and "tag" not in f]
        for old, new in zip([f for f in ref_fields if "tag" not in f], ours_then):
            same_wire = old.get("type") == new.get("type") and \
                _clamp(old.get("versions", ""), high) == _clamp(new.get("versions", ""), high)
            if old["name"] != new["name"] and same_wire:
                found[_camel(old["name"])] = _camel(new["name"])
            if old["name"] == new["name"] or same_wire:
                walk(old.get("fields", []), new.get("fields", []))

    walk(reference.get("fields", []), ours.get("fields", []))
    return found


def rename_fields(node: Any, names: dict[str, str]) -> Any:
    """A spec with fields renamed by their JSON names."""
    if isinstance(node, dict):
        out = {k: rename_fields(v, names) for k, v in node.items()}
        if isinstance(out.get("name"), str) and _camel(out["name"]) in names and "type" in out:
            new = names[_camel(out["name"])]
            out["name"] = new[:1].upper() + new[1:]
        return out
    if isinstance(node, list):
        return [rename_fields(v, names) for v in node]
    return node


def rename_json(doc: Any, names: dict[str, str]) -> Any:
    """A message's JSON with renamed keys."""
    if isinstance(doc, dict):
        return {names.get(k, k): rename_json(v, names) for k, v in doc.items()}
    if isinstance(doc, list):
        return [rename_json(v, names) for v in doc]
    return doc


def added_tagged(reference: dict, ours: dict) -> set[str]:
    """JSON names of tagged fields the release added to versions the reference already had."""
    found: set[str] = set()

    def walk(ref_fields: list, our_fields: list) -> None:
        known = {f["name"]: f for f in ref_fields}
        for f in our_fields:
            if f["name"] not in known and "tag" in f:
                found.add(_camel(f["name"]))
            elif f["name"] in known:
                walk(known[f["name"]].get("fields", []), f.get("fields", []))

    walk(reference.get("fields", []), ours.get("fields", []))
    for struct in ours.get("commonStructs", []):
        ref = next((s for s in reference.get("commonStructs", []) if s["name"] == struct["name"]), None)
        walk(ref.get("fields", []) if ref else [], struct.get("fields", []))
    return found


def without_keys(doc: Any, names: set[str]) -> Any:
    if isinstance(doc, dict):
        return {k: without_keys(v, names) for k, v in doc.items() if k not in names}
    if isinstance(doc, list):
        return [without_keys(v, names) for v in doc]
    return doc


def vector_target(vec: dict) -> tuple[Any, int]:
    """The class and version a golden vector is read with now: a record whose layout the release
    changed in place is read with its earlier layout, and a former "data" record whose version prefix
    became its record type with the record's first version."""
    import kprotocol
    from kprotocol.coordinator_topics.decode import EARLIER_LAYOUTS
    from kprotocol.coordinator_topics.record_types import OTHER_TOPICS

    cls = kprotocol.message_class(EARLIER_LAYOUTS.get(vec["name"], vec["name"]))
    version = vec["version"]
    if cls.__name__ in OTHER_TOPICS and not cls.valid_versions[0] <= version <= cls.valid_versions[1]:
        version = cls.valid_versions[0]
    return cls, version

"""The spec model: Kafka's JSON message specs parsed into structs, fields and version ranges."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codegen.jsonc import load

MAX_VERSION = 0x7FFF
PRIMITIVES = {
    "bool", "int8", "int16", "int32", "int64", "uint16", "uint32", "float64",
    "string", "bytes", "uuid", "records",
}
# Field names that would shadow the struct or message API (or Python keywords) get a trailing underscore.
STRUCT_RESERVED = {"replace", "to_dict", "unknown_tagged_fields"}
MESSAGE_RESERVED = STRUCT_RESERVED | {
    "encode", "decode", "decode_prefix", "encode_into", "to_json", "from_json",
    "api_key", "spec_type", "valid_versions", "flexible_versions",
}

Range = tuple[int, int] | None


def parse_range(text: str | None, *, default: Range = None) -> Range:
    """'3+', '0-5', '7' or 'none' as an inclusive (lo, hi) pair; None means no versions."""
    if text is None:
        return default
    text = text.strip()
    if text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), MAX_VERSION
    if "-" in text:
        lo, hi = text.split("-")
        return int(lo), int(hi)
    return int(text), int(text)


def in_range(version: int, rng: Range) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


def snake_case(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


def json_name(name: str) -> str:
    return name[:1].lower() + name[1:]


@dataclass
class FieldSpec:
    name: str
    attr: str
    json: str
    type: str  # primitive name, "struct" or "array"
    element: str | None  # array element: primitive name or "struct"
    struct: str | None  # struct name for struct fields and struct arrays
    versions: Range
    nullable: Range
    tagged: Range
    tag: int | None
    default: Any
    ignorable: bool
    flexible: Range  # field-level override of the message's flexible versions
    has_flexible_override: bool


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]


@dataclass
class MessageSpec:
    name: str
    type: str
    api_key: int | None
    valid: tuple[int, int]
    flexible: Range
    structs: list[StructSpec] = field(default_factory=list)  # dependencies first, root last
    source: str = ""

    @property
    def root(self) -> StructSpec:
        return self.structs[-1]

    @property
    def versions(self) -> range:
        return range(self.valid[0], self.valid[1] + 1)


def _default(raw: Any, ftype: str, nullable: Range, name: str) -> Any:
    """The Python default value of a field (structs get their default instance later)."""
    if isinstance(raw, str):
        raw = raw.strip()
    if raw == "null":
        if nullable is None:
            raise ValueError(f"{name}: default null on a non-nullable field")
        return None
    if ftype in ("array",):
        if raw not in (None, ""):
            raise ValueError(f"{name}: arrays can only default to null or empty")
        return ()
    if ftype == "struct":
        return "struct"
    if raw is None or raw == "":
        return {"bool": False, "string": "", "bytes": b"", "records": b"", "uuid": "uuid", "float64": 0.0}.get(ftype, 0)
    if ftype == "bool":
        return raw if isinstance(raw, bool) else {"true": True, "false": False}[raw]
    if ftype in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return raw if isinstance(raw, int) else int(raw, 0)
    if ftype == "float64":
        return float(raw)
    if ftype == "string":
        return raw
    raise ValueError(f"{name}: unsupported default {raw!r} for {ftype}")


class SpecParser:
    """Turn one parsed spec file into a MessageSpec."""

    def __init__(self, doc: dict[str, Any], source: str) -> None:
        self.doc = doc
        self.source = source
        self.structs: dict[str, StructSpec] = {}
        self.order: list[StructSpec] = []
        self.common = {c["name"]: c for c in doc.get("commonStructs", [])}

    def parse(self) -> MessageSpec:
        doc = self.doc
        valid = parse_range(doc["validVersions"])
        if valid is None:
            raise ValueError(f"{self.source}: validVersions is none")
        msg = MessageSpec(
            name=doc["name"],
            type=doc.get("type", "data"),
            api_key=doc.get("apiKey"),
            valid=valid,
            flexible=parse_range(doc.get("flexibleVersions", "none")),
            source=self.source,
        )
        root = self._struct(doc["name"], doc.get("fields", []))
        for f in root.fields:
            if f.attr in MESSAGE_RESERVED:
                f.attr += "_"
        msg.structs = self.order
        return msg

    def _struct(self, name: str, fields: list[dict[str, Any]]) -> StructSpec:
        if name in self.structs:
            raise ValueError(f"{self.source}: struct {name} is defined twice")
        spec = StructSpec(name, [])
        self.structs[name] = spec
        spec.fields = [self._field(f) for f in fields]
        for f in spec.fields:
            if f.attr in STRUCT_RESERVED:
                f.attr += "_"
        self.order.append(spec)
        return spec

    def _struct_ref(self, name: str, inline: list[dict[str, Any]] | None) -> str:
        if inline is not None:
            self._struct(name, inline)
        elif name not in self.structs:
            if name not in self.common:
                raise ValueError(f"{self.source}: unknown struct {name}")
            self._struct(name, self.common[name]["fields"])
        return name

    def _field(self, f: dict[str, Any]) -> FieldSpec:
        name = f["name"]
        ftype = f["type"]
        element = struct = None
        if ftype.startswith("[]"):
            element = ftype[2:]
            kind = "array"
            if element not in PRIMITIVES:
                struct = self._struct_ref(element, f.get("fields"))
                element = "struct"
        elif ftype in PRIMITIVES:
            kind = ftype
        else:
            kind = "struct"
            struct = self._struct_ref(ftype, f.get("fields"))
        nullable = parse_range(f.get("nullableVersions"))
        tagged = parse_range(f.get("taggedVersions"))
        versions = parse_range(f.get("versions"), default=tagged)
        return FieldSpec(
            name=name,
            attr=snake_case(name),
            json=json_name(name),
            type=kind,
            element=element,
            struct=struct,
            versions=versions,
            nullable=nullable,
            tagged=tagged,
            tag=f.get("tag"),
            default=_default(f.get("default"), kind, nullable, name),
            ignorable=bool(f.get("ignorable", False)),
            flexible=parse_range(f.get("flexibleVersions")),
            has_flexible_override="flexibleVersions" in f,
        )


def load_specs(directory: Path) -> list[MessageSpec]:
    """Every `*.json` spec below `directory`, sorted by name."""
    specs = [SpecParser(load(p), p.name).parse() for p in sorted(directory.rglob("*.json"))]
    names = [s.name for s in specs]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"specs defined twice: {sorted(dupes)}")
    return sorted(specs, key=lambda s: s.name)

"""Apache Kafka's JSON-converter shape for any generated struct, driven by the field schema.

Rules (as Kafka's generated converters write them): keys are spec names with the first letter
lower-cased, in spec order; fields absent at the version are omitted; tagged fields appear only
when they differ from their default; bytes are base64, uuids URL-safe base64 without padding,
records the base64 of their raw bytes.
"""

from __future__ import annotations

import base64
import math
from typing import Any
from uuid import UUID

from kprotocol.runtime.struct import Field, Struct

try:
    from kprotocol._speedups import to_json as _compiled
except ImportError:  # the extension was not built: the Python converter below
    _compiled = None

_INTS = {"int8": (-(1 << 7), 1 << 7), "int16": (-(1 << 15), 1 << 15), "int32": (-(1 << 31), 1 << 31),
         "int64": (-(1 << 63), 1 << 63), "uint16": (0, 1 << 16), "uint32": (0, 1 << 32)}


def uuid_to_json(value: UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_json(text: str) -> UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"uuid {text!r} is not 16 bytes")
    return UUID(bytes=raw)


def _value_to_json(kind: str, value: Any, version: int) -> Any:
    if value is None:
        return None
    if kind in ("bytes", "records"):
        return base64.b64encode(value).decode("ascii")
    if kind == "uuid":
        return uuid_to_json(value)
    if kind == "float64" and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _value_to_json_without_records(kind: str, value: Any, version: int) -> Any:
    return None if kind == "records" else _value_to_json(kind, value, version)


PLAIN, STRUCT, STRUCT_ARRAY, PLAIN_ARRAY, SPECIAL_ARRAY, SPECIAL = range(6)
_SPECIAL = frozenset({"bytes", "records", "uuid", "float64"})
Plan = tuple[tuple[int, str, int, bool, Any, str], ...]
_TO_JSON_PLANS: dict[tuple[type, int], Plan] = {}


def _to_json_plan(cls: type[Struct], version: int) -> Plan:
    """Per struct class and version: (index, key, how to convert, tagged, default, kind) of each present field."""
    plan = []
    for index, f in enumerate(cls._spec):
        if not f.present(version):
            continue
        if f.type == "struct":
            code = STRUCT
        elif f.type == "array":
            code = STRUCT_ARRAY if f.element == "struct" else SPECIAL_ARRAY if f.element in _SPECIAL else PLAIN_ARRAY
        else:
            code = SPECIAL if f.type in _SPECIAL else PLAIN
        plan.append((index, f.json_name, code, f.tagged_at(version), f.default, f.element or f.type))
    _TO_JSON_PLANS[(cls, version)] = result = tuple(plan)
    return result


def struct_to_json(obj: Struct, version: int, records: bool = True) -> dict[str, Any]:
    """`obj` in Kafka's JSON shape; with `records=False`, records fields are null (for callers that
    summarise records apart and would throw their base64 away)."""
    special = _value_to_json if records else _value_to_json_without_records
    if _compiled is not None:
        return _compiled(obj, version, _TO_JSON_PLANS, _to_json_plan, special)
    return py_struct_to_json(obj, version, special)


def py_struct_to_json(obj: Struct, version: int, special: Any = _value_to_json) -> dict[str, Any]:
    plan = _TO_JSON_PLANS.get((type(obj), version)) or _to_json_plan(type(obj), version)
    out: dict[str, Any] = {}
    for index, name, code, tagged, default, kind in plan:
        value = obj[index]
        if tagged and value == default:
            continue
        if value is None or code == PLAIN:
            out[name] = value
        elif code == STRUCT:
            out[name] = py_struct_to_json(value, version, special)
        elif code == STRUCT_ARRAY:
            out[name] = [py_struct_to_json(x, version, special) for x in value]
        elif code == PLAIN_ARRAY:
            out[name] = list(value)
        elif code == SPECIAL_ARRAY:
            out[name] = [special(kind, x, version) for x in value]
        else:
            out[name] = special(kind, value, version)
    return out


def _value_from_json(f: Field, kind: str, value: Any, path: str) -> Any:
    if value is None:
        return None
    try:
        if kind in ("bytes", "records"):
            return base64.b64decode(value, validate=True)
        if kind == "uuid":
            return uuid_from_json(value)
        if kind == "string":
            if not isinstance(value, str):
                raise TypeError("expected a string")
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise TypeError("expected true or false")
            return value
        if kind == "float64":
            if isinstance(value, str):
                return float(value.replace("Infinity", "inf"))
            return float(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("expected an integer")
        lo, hi = _INTS[kind]
        if not lo <= value < hi:
            raise ValueError(f"{value} is out of range for {kind}")
        return value
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def struct_from_json(cls: type[Struct], doc: Any, version: int, path: str) -> Any:
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    values: dict[str, Any] = {}
    for f in cls._spec:
        if not f.present(version):
            continue
        here = f"{path}.{f.json_name}"
        if f.json_name not in doc:
            if f.tagged_at(version):
                continue
            raise ValueError(f"{here}: required field missing")
        value = doc[f.json_name]
        if value is None:
            if not f.nullable_at(version):
                raise ValueError(f"{here}: null is not allowed at version {version}")
            values[f.name] = None
        elif f.type == "struct":
            values[f.name] = struct_from_json(f.struct, value, version, here)
        elif f.type == "array":
            if not isinstance(value, list):
                raise ValueError(f"{here}: expected a JSON array")
            if f.element == "struct":
                values[f.name] = tuple(
                    struct_from_json(f.struct, x, version, f"{here}[{i}]") for i, x in enumerate(value)
                )
            else:
                values[f.name] = tuple(
                    _value_from_json(f, f.element, x, f"{here}[{i}]") for i, x in enumerate(value)
                )
        else:
            values[f.name] = _value_from_json(f, f.type, value, here)
    return cls(**values)

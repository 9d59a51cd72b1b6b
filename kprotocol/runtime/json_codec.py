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


def struct_to_json(obj: Struct, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f, value in zip(obj._spec, obj):
        if not f.present(version):
            continue
        if f.tagged_at(version) and value == f.default:
            continue
        if value is None:
            out[f.json_name] = None
        elif f.type == "struct":
            out[f.json_name] = struct_to_json(value, version)
        elif f.type == "array":
            if f.element == "struct":
                out[f.json_name] = [struct_to_json(x, version) for x in value]
            else:
                out[f.json_name] = [_value_to_json(f.element, x, version) for x in value]
        else:
            out[f.json_name] = _value_to_json(f.type, value, version)
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

"""Hypothesis strategies that build any generated message at any version (needs `hypothesis`).

    from kprotocol.fuzz.strategies import messages
    @given(messages(kprotocol.message_class("JoinGroupRequest"), 7))
"""

from __future__ import annotations

from functools import cache
from typing import Any
from uuid import UUID

from hypothesis import strategies as st

from kprotocol.runtime.struct import Field, Struct

_INT_BOUNDS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _flexible(cls: type[Struct], version: int, root: type[Struct]) -> bool:
    fv = getattr(root, "flexible_versions", None)
    return fv is not None and fv[0] <= version <= fv[1]


def _primitive(kind: str, max_len: int) -> st.SearchStrategy[Any]:
    if kind in _INT_BOUNDS:
        bits = _INT_BOUNDS[kind]
        return st.integers(-(1 << bits), (1 << bits) - 1)
    if kind == "uint16":
        return st.integers(0, 0xFFFF)
    if kind == "uint32":
        return st.integers(0, 0xFFFFFFFF)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "string":
        return st.text(max_size=max_len)
    if kind in ("bytes", "records"):
        return st.binary(max_size=max_len * 2)
    if kind == "uuid":
        return st.uuids() | st.just(UUID(int=0))
    raise ValueError(kind)


def _field(f: Field, version: int, flexible: bool, depth: int, max_len: int) -> st.SearchStrategy[Any]:
    if f.type == "struct":
        value = structs(f.struct, version, flexible, depth + 1, max_len)
    elif f.type == "array":
        size = 0 if depth > 3 else max(1, max_len // (depth + 1))
        element = (
            structs(f.struct, version, flexible, depth + 1, max_len)
            if f.element == "struct"
            else _primitive(f.element, max_len)  # type: ignore[arg-type]
        )
        value = st.lists(element, max_size=size).map(tuple)
    else:
        value = _primitive(f.type, max_len)
    if f.nullable_at(version):
        value = st.none() | value
    if f.tagged_at(version):
        value = st.just(f.default) | value
    return value


def _unknown_tags(known: set[int]) -> st.SearchStrategy[tuple[tuple[int, bytes], ...]]:
    tag = st.integers(0, 300).filter(lambda t: t not in known)
    return st.dictionaries(tag, st.binary(max_size=8), max_size=2).map(lambda d: tuple(sorted(d.items())))


@cache
def structs(cls: type[Struct], version: int, flexible: bool, depth: int = 0, max_len: int = 4) -> st.SearchStrategy:
    """Instances of struct `cls` whose fields absent at `version` hold their defaults."""
    parts: dict[str, st.SearchStrategy[Any]] = {}
    # Kafka refuses a tag that the spec gives a field in any version, even one absent at this version.
    known_tags = {f.tag for f in cls._spec if f.tag is not None}
    for f in cls._spec:
        if f.present(version):
            parts[f.name] = _field(f, version, flexible, depth, max_len)
    if flexible:
        parts["unknown_tagged_fields"] = _unknown_tags(known_tags)  # type: ignore[assignment]
    return st.fixed_dictionaries(parts).map(lambda kw: cls(**kw))


def messages(cls: type[Struct], version: int, max_len: int = 4) -> st.SearchStrategy:
    """Messages of class `cls` encodable at `version`."""
    return structs(cls, version, _flexible(cls, version, cls), 0, max_len)


def sample(cls: type[Struct], version: int, n: int) -> list[Struct]:
    """`n` generated messages of `cls` at `version` (hypothesis' generation phase only, no shrinking; every health
    check on: none fires for any message at any version)."""
    from hypothesis import Phase, given, settings

    found: list[Struct] = []

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate])
    @given(messages(cls, version))
    def collect(message: Struct) -> None:
        found.append(message)

    collect()
    return found

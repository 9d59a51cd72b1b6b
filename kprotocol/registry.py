"""Look up generated message classes by spec name (modules are imported on first use)."""

from __future__ import annotations

import importlib
from functools import cache

from kprotocol.generated import SPECS
from kprotocol.runtime.struct import Message


def spec_names() -> list[str]:
    """Every spec name, sorted: requests, responses, headers, data and coordinator records."""
    return sorted(SPECS)


@cache
def message_class(name: str) -> type[Message]:
    """The generated class of spec `name`, e.g. "JoinGroupRequest" or "GroupMetadataValue"."""
    try:
        module, _, _ = SPECS[name]
    except KeyError:
        raise KeyError(f"unknown spec {name!r}") from None
    return getattr(importlib.import_module(f"kprotocol.generated.{module}"), name)


@cache
def _api_names() -> dict[int, dict[str, str]]:
    names: dict[int, dict[str, str]] = {}
    for name, (_, kind, key) in SPECS.items():
        if key is not None and kind in ("request", "response"):
            names.setdefault(key, {})[kind] = name
    return names


@cache
def _api_classes(api_key: int) -> tuple[type[Message], type[Message]]:
    names = _api_names()[api_key]
    return message_class(names["request"]), message_class(names["response"])


def api_classes(api_key: int) -> tuple[type[Message], type[Message]]:
    """(request class, response class) of an API key; KeyError for an unknown one (a cheap lookup
    either way: resynchronising capture decoders ask about every byte offset)."""
    names = _api_names().get(api_key)
    if names is None or len(names) != 2:
        raise KeyError(f"unknown api key {api_key}")
    return _api_classes(api_key)


@cache
def coordinator_classes(kind: str, exclude: frozenset[str] = frozenset()) -> dict[int, type[Message]]:
    """Record type -> class for `coordinator-key` or `coordinator-value` specs (less `exclude`d names)."""
    return {key: message_class(name) for name, (_, k, key) in SPECS.items()
            if k == kind and key is not None and name not in exclude}

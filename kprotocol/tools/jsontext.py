"""JSON text for the command line: compact JSON lines (indented with `--pretty`), UTF-8 kept readable,
lone surrogates (from Java strings) escaped."""

from __future__ import annotations

import json
from typing import Any

COMPACT = (",", ":")


def dumps(doc: Any, indent: int | None = None, sort_keys: bool = False) -> str:
    """One line without spaces (`jq -c`'s shape, as `capture decode` writes), or indented by `indent`."""
    separators = None if indent else COMPACT
    text = json.dumps(doc, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate cannot be written as UTF-8: escape everything
        text = json.dumps(doc, indent=indent, separators=separators, sort_keys=sort_keys)
    return text

"""JSON text for the command line: UTF-8 kept readable, lone surrogates (from Java strings) escaped."""

from __future__ import annotations

import json
from typing import Any


def dumps(doc: Any, indent: int | None = None) -> str:
    text = json.dumps(doc, ensure_ascii=False, indent=indent)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate cannot be written as UTF-8: escape everything
        text = json.dumps(doc, indent=indent)
    return text

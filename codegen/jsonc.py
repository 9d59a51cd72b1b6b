"""Read Kafka's spec files: JSON with `//` and `/* */` comments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def strip_comments(text: str) -> str:
    """Remove comments outside string literals, keeping line structure for error messages."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError("unterminated /* comment")
            out.append("\n" * text.count("\n", i, end))
            i = end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def load(path: Path) -> dict[str, Any]:
    """Parse one spec file."""
    return json.loads(strip_comments(path.read_text(encoding="utf-8")))

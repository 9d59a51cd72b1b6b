"""Plain-text tables for `--format table` (what people read: group state, assignments, summaries)."""

from __future__ import annotations

from collections.abc import Sequence


def render(header: Sequence[str], rows: Sequence[Sequence[object]], numeric_from: int | None = None) -> str:
    """Columns padded to their widest cell; columns from `numeric_from` on are right-aligned."""
    cells = [list(map(str, header)), *[["-" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    right = len(header) if numeric_from is None else numeric_from
    return "\n".join("  ".join(c.rjust(w) if i >= right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     .rstrip() for row in cells) + "\n"


def tasks(ids: Sequence[str], most: int = 12) -> str:
    shown = ",".join(ids[:most])
    return shown + (f",... ({len(ids)})" if len(ids) > most else "") if ids else "-"

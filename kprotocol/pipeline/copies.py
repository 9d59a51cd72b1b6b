"""Copies in the input: the same records or exchanges read from several files, kept once.

A record is identified by its topic, partition and offset, with its timestamp and key: a segment given
outside its partition directory (partition unknown) is compared with every partition of its topic, and
its records are copies of those with the same offset, timestamp and key (a key always goes to one
partition); the copy kept is then the one whose partition is known. An exchange is identified by its
connection, correlation id, API and request and response times (the same packets in a pcap and its
pcapng conversion). Otherwise the copy kept is the one of the first source in name order; the others
are dropped from the tables and counted in the `duplicates` table.

Each task reports the range of identities of each source in its part (`Coverage`: offsets, or request
times); only parts whose ranges meet another source's are compared (`overlaps`), a group of them in one
task that reads their identity columns (`drop_copies`): input without copies costs nothing more, a
thousand copies a thousand reads.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kprotocol.pipeline.files import filesystem

COVERAGE = "coverage"  # the name a task's coverage goes by among its (table, rows) pairs
RECORD_IDENTITY = ("topic", "offset", "timestamp", "key_json")  # and the partition: see `overlaps`
EXCHANGE_IDENTITY = ("conn", "correlation_id", "api_key", "request_time", "response_time")
ROW = "_row"
FIRST = "_first"
RANK = "_rank"


@dataclass(frozen=True, slots=True)
class Coverage:
    """The identities one source holds in one part file: `key` (records: topic and partition) and the
    range [low, high] of `column` (offset, request time)."""

    part: str
    key: tuple[Any, ...]
    source: str
    low: float
    high: float


def coverage(part: str, rows: pa.Table, source: str, column: str, key: tuple[str, ...] = ()) -> list[Coverage]:
    """Coverage of each (key, source) in a part's rows (an Arrow table); a null in `key` stands for any value."""
    if rows.num_rows == 0:
        return []
    names = [*key, source]
    found = rows.group_by(names).aggregate([(column, "min"), (column, "max")]).to_pylist()
    return [Coverage(part, tuple(r[k] for k in key), r[source], r[f"{column}_min"], r[f"{column}_max"])
            for r in found if r[f"{column}_min"] is not None]


def overlaps(covered: list[Coverage]) -> list[list[str]]:
    """The groups of parts to compare: parts joined when they hold identities of a matching key (equal,
    or unknown in one of them: None) and range from different sources, each group in name order; parts
    that share nothing with another source are left out."""
    by_key: dict[Any, list[Coverage]] = defaultdict(list)
    for c in covered:
        by_key[c.key[0] if c.key else None].append(c)
    parent: dict[str, str] = {}

    def root(part: str) -> str:
        while parent.setdefault(part, part) != part:
            parent[part] = parent[parent[part]]
            part = parent[part]
        return part

    for items in by_key.values():
        items.sort(key=lambda c: c.low)
        active: list[Coverage] = []
        for c in items:  # a sweep over the ranges in order of their starts
            active = [a for a in active if a.high >= c.low]
            for a in active:
                if a.source != c.source and all(x == y or x is None or y is None for x, y in zip(a.key, c.key)):
                    parent[root(a.part)] = root(c.part)
            active.append(c)
    groups: dict[str, list[str]] = defaultdict(list)
    for part in parent:
        groups[root(part)].append(part)
    return sorted(sorted(parts) for parts in groups.values() if len(parts) > 1)


def _identity(table: pa.Table, identity: tuple[str, ...]) -> pa.Table:
    """The identity columns with nulls as a value of their own (joins never match nulls)."""
    columns = []
    for name in identity:
        column = table[name]
        sentinel = "" if pa.types.is_string(column.type) else -1
        columns.append(pc.fill_null(column, pa.scalar(sentinel, column.type)))
    return pa.Table.from_arrays(columns, names=list(identity))


def _read(path: str, columns: list[str]) -> pa.Table:
    fsys, where = filesystem(path)
    return pq.read_table(where, columns=columns, filesystem=fsys)


def _rewrite(path: str, keep: pa.Array, write_options: dict[str, Any]) -> None:
    """Rewrite a part file with the rows `keep` marks, atomically (a reader sees either version)."""
    fsys, where = filesystem(path)
    table = pq.read_table(where, filesystem=fsys)
    temporary = where.rsplit("/", 1)[0] + "/.tmp-" + where.rsplit("/", 1)[1]
    pq.write_table(table.filter(keep), temporary, filesystem=fsys, **write_options)
    fsys.move(temporary, where)


def _ranked(table: pa.Table, source: str, prefer: str | None) -> pa.Array:
    """The order in which copies are kept: rows whose `prefer` column is known first, then by source."""
    first = pc.if_else(pc.is_valid(table[prefer]), "0", "1") if prefer else pa.repeat(pa.scalar("0"), table.num_rows)
    return pc.binary_join_element_wise(first, table[source], "")


def drop_copies(parts: list[str], identity: tuple[str, ...], source: str, column: str,
                dependents: Callable[[str], dict[str, str]], options: Callable[[str], dict[str, Any]],
                prefer: str | None = None) -> list[tuple[str, str, int]]:
    """Among `parts` (a group of `overlaps`, compared in one task: each part is read twice at most), drop
    from each the rows whose identity a row of an earlier source holds (earlier: with `prefer` known,
    then in name order); returns (source, copy of, rows dropped). `dependents(part)`: other part files
    (path -> their column holding `column`'s value) whose rows go with the part's dropped ones.
    `options(path)`: a part's Parquet write options."""
    wanted = sorted({*identity, source, column, *([prefer] if prefer else [])})
    tables = [_read(path, wanted) for path in parts]
    everything = pa.concat_tables(tables)
    keys = _identity(everything, identity).append_column(RANK, _ranked(everything, source, prefer))
    firsts = keys.group_by(list(identity)).aggregate([(RANK, "min")]).rename_columns([*identity, FIRST])
    found: list[tuple[str, str, int]] = []
    for path, mine in zip(parts, tables):
        if mine.num_rows == 0:
            continue
        numbered = _identity(mine, identity).append_column(RANK, _ranked(mine, source, prefer)).append_column(
            ROW, pa.array(range(mine.num_rows), pa.int64()))
        joined = numbered.join(firsts, keys=list(identity)).sort_by(ROW)
        copy = pc.not_equal(joined[RANK], joined[FIRST])
        if not pc.any(copy).as_py():
            continue
        counts = joined.filter(copy).group_by([RANK, FIRST]).aggregate([(ROW, "count")]).to_pylist()
        found += [(r[RANK][1:], r[FIRST][1:], r[f"{ROW}_count"]) for r in counts]
        dropped = mine[column].filter(copy)
        _rewrite(path, pc.invert(copy), options(path))
        for other, name in dependents(path).items():
            fsys, where = filesystem(other)
            if fsys.get_file_info(where).type != 2:  # 2: a file
                continue
            values = pq.read_table(where, columns=[name], filesystem=fsys)[name]
            _rewrite(other, pc.invert(pc.fill_null(pc.is_in(values, value_set=dropped), False)), options(other))
    return found

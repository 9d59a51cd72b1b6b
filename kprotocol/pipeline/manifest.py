"""What each job wrote, so that a reader tells complete tables from partial ones.

A job marks itself running in `_jobs/<job>.json` under the output directory before it touches a table,
and complete at its end with the rows it wrote to each table (its own part files) and what it read.
`partial` finds a job that never finished (interrupted, killed) or tables whose parts no longer hold
what their job wrote (parts missing, or a copy of the directory cut short).
"""

from __future__ import annotations

import json
import time
from typing import Any

from pyarrow import fs as pafs

from kprotocol.pipeline.files import filesystem
from kprotocol.pipeline.tables import GROUP_RECORDS, table_dir

JOBS = "_jobs"
PREFIXES = {"offsets": "part", "captures": "capture"}  # the part-file prefix of each job's tables


def _path(out: str, job: str) -> tuple[pafs.FileSystem, str]:
    fsys, path = filesystem(table_dir(out, JOBS))
    return fsys, f"{path}/{job}.json"


def mark(out: str, job: str, state: str, **details: Any) -> None:
    """Record `job`'s state ("running", "complete") and `details` (tables: rows per table; inputs)."""
    fsys, path = _path(out, job)
    fsys.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fsys.open_output_stream(path) as stream:
        stream.write(json.dumps({"job": job, "state": state, "time": time.time(), **details}, indent=1).encode())


def read(out: str, job: str) -> dict[str, Any] | None:
    fsys, path = _path(out, job)
    if fsys.get_file_info(path).type != pafs.FileType.File:
        return None
    with fsys.open_input_stream(path) as stream:
        return json.loads(stream.read())


def rows_written(out: str, table: str, prefix: str) -> int:
    """Rows of a table's part files of one job (their Parquet metadata: nothing else is read)."""
    import pyarrow.dataset as ds

    fsys, path = filesystem(table_dir(out, table))
    if fsys.get_file_info(path).type != pafs.FileType.Directory:
        return 0
    files = [e.path for e in fsys.get_file_info(pafs.FileSelector(path)) if e.base_name.startswith(prefix + "-")]
    return ds.dataset(files, filesystem=fsys, format="parquet").count_rows() if files else 0


def partial(out: str) -> list[str]:
    """Why the tables under `out` are incomplete: one sentence per job that did not finish or whose
    tables lost rows; [] when every job that left a mark finished and its tables hold what it wrote."""
    found = []
    for job, prefix in PREFIXES.items():
        state = read(out, job)
        if state is None:
            continue
        if state["state"] != "complete":
            found.append(f"the `kprotocol pipeline {job}` run that wrote these tables never finished (interrupted or "
                         f"killed): its tables are partial. Run it again with the same --out")
            continue
        for table, rows in state.get("tables", {}).items():
            now = rows_written(out, table, prefix)
            if now != rows:
                found.append(f"the {table} table holds {now} of the {rows} rows `kprotocol pipeline {job}` wrote "
                             "(parts missing or cut short): run the job again")
    fsys, path = filesystem(table_dir(out, GROUP_RECORDS))
    if fsys.get_file_info(path).type != pafs.FileType.NotFound and not any("offsets" in f for f in found):
        found.append("an offsets job left its working table behind (interrupted): the tables are partial. "
                     "Run `kprotocol pipeline offsets` again with the same --out")
    return found

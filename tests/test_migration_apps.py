"""Apache Kafka's own example applications (and the project's Streams app in other shapes) migrated online through the gateway (tests/migration_scenario.py).

`make test` runs one shape, with a standby and exactly-once; `make test-migration` runs the whole
matrix (KPROTOCOL_MIGRATION=matrix) and writes its table to build/migration-matrix.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from migration_scenario import RunResult, Shape, run_migration

IN_MAKE_TEST = [Shape("wordcount", standbys=1, guarantee="exactly_once_v2")]  # a repartition step, standbys, EOS
MATRIX = [
    *IN_MAKE_TEST,
    Shape("wordcount-processor", standbys=0, guarantee="at_least_once"),
    Shape("wordcount", standbys=0, guarantee="at_least_once"),
    Shape("wordcount", standbys=2, guarantee="exactly_once_v2"),
    Shape("wordcount", standbys=1, guarantee="at_least_once", threads=2),
    Shape("wordcount-processor", standbys=1, guarantee="exactly_once_v2"),
    Shape("wordcount", standbys=1, guarantee="exactly_once_v2", classic_version="3.9.1"),
    Shape("join", standbys=1, guarantee="exactly_once_v2"),
    Shape("stateless", standbys=0, guarantee="exactly_once_v2", threads=2),
    Shape("count", standbys=2, guarantee="at_least_once"),
    # several stream threads per instance at a larger scale: 18 threads, 24 tasks (two subtopologies)
    Shape("wordcount", standbys=1, guarantee="exactly_once_v2", threads=6, partitions=12),
]
SHAPES = MATRIX if os.environ.get("KPROTOCOL_MIGRATION") == "matrix" else IN_MAKE_TEST
TABLE = Path(__file__).resolve().parents[1] / "build" / "migration-matrix.md"
RESULTS: list[RunResult] = []


@pytest.fixture(scope="module", autouse=True)
def table():
    yield
    if RESULTS:
        TABLE.parent.mkdir(exist_ok=True)
        names = [s.name for s in RESULTS[0].steps]
        lines = ["| shape | " + " | ".join(names) + " | records | exact | slowest stop |",
                 "|---" * (len(names) + 4) + "|"]
        for r in RESULTS:
            cells = [f"{s.settle_s:.0f} s / {s.longest_stall_ms / 1000:.1f} s" for s in r.steps]
            lines.append(f"| {r.shape.name} | " + " | ".join(cells) +
                         f" | {r.records} | {'yes' if r.exact else 'no (at least once)'} | "
                         f"{max(r.shutdown_s, default=0):.1f} s |")
        TABLE.write_text("settle time / longest output stall per step\n\n" + "\n".join(lines) + "\n")
        print("\n" + TABLE.read_text())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_migrating_a_published_example(shape: Shape, tmp_path: Path) -> None:
    result = run_migration(shape, tmp_path)
    RESULTS.append(result)
    assert len(result.steps) == 8
    if shape.guarantee == "exactly_once_v2":
        assert result.exact

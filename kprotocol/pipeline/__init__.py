"""Bulk decoding on Spark: coordinator-topic segments and packet captures to Parquet tables.

    from kprotocol.pipeline import run_captures, run_offsets
    run_offsets(["/var/lib/kafka/data"], "tables/")   # records, offsets_committed, group_members,
                                                      # rebalances, problems (see tables.py)
    run_captures(["captures/"], "tables/", ports=(9092,))   # exchanges, problems

Runs in a local SparkSession (`local[*]`) by default, on a cluster under spark-submit.
"""

from typing import Any

__all__ = ["SCHEMAS", "plan_captures", "plan_offsets", "run_captures", "run_offsets", "spark_session"]


def __getattr__(name: str) -> Any:
    """Import the jobs (PySpark, pyarrow: the `pipeline` extra) only when they are used, so that the
    command line and everything else work without that extra."""
    if name == "SCHEMAS":
        from kprotocol.pipeline.tables import SCHEMAS

        return SCHEMAS
    if name in __all__:
        from kprotocol.pipeline import jobs

        return getattr(jobs, name)
    raise AttributeError(f"module 'kprotocol.pipeline' has no attribute {name!r}")

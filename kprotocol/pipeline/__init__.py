"""Bulk decoding on Spark: coordinator-topic segments and packet captures to Parquet tables.

    from kprotocol.pipeline import run_captures, run_offsets
    run_offsets(["/var/lib/kafka/data"], "tables/")   # records, offsets_committed, group_members,
                                                      # rebalances, problems (see tables.py)
    run_captures(["captures/"], "tables/", ports=(9092,))   # exchanges, problems

Runs in a local SparkSession (`local[*]`) by default, on a cluster under spark-submit.
"""

from kprotocol.pipeline.jobs import plan_captures, plan_offsets, run_captures, run_offsets, spark_session
from kprotocol.pipeline.tables import SCHEMAS

__all__ = ["SCHEMAS", "plan_captures", "plan_offsets", "run_captures", "run_offsets", "spark_session"]

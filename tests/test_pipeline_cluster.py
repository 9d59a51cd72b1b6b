"""Both pipeline jobs on a real Spark standalone cluster (a master, two one-core workers whose own
Python lacks kprotocol), submitted with the README's commands: the executors run kprotocol from the
packed environment with its compiled paths, and every table equals a local run's row for row.

Cost: 112 s of CPU in all (user 98.5 s + sys 13.7 s, JVMs and pip included: the packed environment
about 12 s of it), so about 60-90 s on an idle 2-core machine; 470-580 s of wall time measured on this
machine shared at a load of 20-30.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from spark_cluster import WORKER_PYTHON, SparkCluster

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.xdist_group("spark-cluster")
OFFSETS_TABLES = ("records", "offsets_committed", "group_members", "rebalances")
CAPTURE_PORTS = "60127"


def readme_cluster_commands() -> list[str]:
    """The shell block of the README's cluster recipe, continuation lines joined."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    block = next(b for b in blocks if "kprotocol pipeline package" in b and "spark-submit" in b)
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _shared_inputs(shared: Path) -> None:
    """A Kafka data directory as a broker leaves it (coordinator partitions beside an ordinary topic's
    and the metadata log, which the offsets job must skip) and a capture, on a directory every worker sees."""
    data = shared / "kafka" / "data"
    shutil.copytree(ROOT / "fixtures" / "kafka" / "data", data)
    for other in ("orders-0", "__cluster_metadata-0"):
        shutil.copytree(data / "__consumer_offsets-0", data / other)  # read as junk if it were read at all
    (shared / "captures").mkdir()
    shutil.copy(ROOT / "fixtures" / "captures" / "clients.pcapng", shared / "captures")


def _rows(out: Path, table: str, prefix: str | None = None) -> list[str]:
    """A table's rows, paths made comparable (file:// URIs as plain paths), as sorted JSON lines."""
    directory = out / table
    files = sorted(p for p in directory.glob("*.parquet") if prefix is None or p.name.startswith(prefix))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    return sorted(json.dumps(r, sort_keys=True, default=str).replace("file://", "") for r in rows)


def _summary(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_both_jobs_on_a_standalone_cluster_equal_the_local_run(tmp_path) -> None:
    assert subprocess.run([WORKER_PYTHON, "-c", "import kprotocol"], capture_output=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin"}).returncode != 0, \
        "the workers' Python must not have kprotocol for this test to mean anything"
    shared = tmp_path / "shared"
    _shared_inputs(shared)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}", SPARK_LOCAL_IP="127.0.0.1")

    # The reference: the same jobs in local mode, the executors' Python forced to pure Python (so the
    # tables also show compiled and pure paths agree), which the job must warn about and refuse with
    # --require-accel.
    conf = tmp_path / "local-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.executorEnv.KPROTOCOL_PURE_PYTHON 1\n")
    local = tmp_path / "local"
    options = ["--out", str(local), "--master", "local[2]", "--no-progress", "--require-accel"]
    offsets = ["pipeline", "offsets", str(shared / "kafka" / "data"), *options]
    captures = ["pipeline", "captures", str(shared / "captures"), "--ports", CAPTURE_PORTS, *options]
    both = f"import sys; from kprotocol.cli import main; sys.exit(10 * main({offsets!r}) + main({captures!r}))"
    done = subprocess.run([str(BIN / "python"), "-c", both], capture_output=True, text=True, cwd=tmp_path,
                          env={**env, "SPARK_CONF_DIR": str(conf)}, timeout=300)  # one JVM for both local runs
    assert done.returncode == 11, done.stderr[-3000:]
    for line in done.stdout.splitlines():
        summary = json.loads(line)
        assert summary["pure_python_tasks"] == summary["tasks"] > 0 and summary["tasks_accel"] == 0
    assert done.stderr.count("ran without kprotocol's compiled paths") == 2 and "kprotocol: error:" in done.stderr

    with SparkCluster(tmp_path / "cluster", workers=2, cores=1) as cluster:
        commands = [line.replace("spark://HOST:7077", cluster.master_url)
                    .replace("file:///shared/", f"file://{shared}/").replace("--ports 9092", f"--ports {CAPTURE_PORTS}")
                    for line in readme_cluster_commands()]
        script = "set -e\n" + "\n".join(commands) + "\n"
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
                              timeout=480)
        assert done.returncode == 0, done.stderr[-4000:]

    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [("archive" in s, "records" in s, "exchanges" in s) for s in summaries[:3]] == \
        [(True, False, False), (False, True, False), (False, False, True)]
    workers = [f"{tmp_path / 'cluster'}/worker-{n}/" for n in range(2)]
    for summary in summaries[1:3]:
        assert summary["tasks"] > 0
        assert summary["tasks_accel"] == summary["tasks_walk"] == summary["tasks_offsets"] == summary["tasks"]
        assert summary["pure_python_tasks"] == 0
        # Every task ran the packed environment's Python, as a worker unpacked it for its executor.
        pythons = summary["executor_pythons"]
        assert all(re.fullmatch(r".*/app-[\d-]+/\d+/environment/bin/python", p) and p.startswith(tuple(workers))
                   for p in pythons), pythons
    cluster_out = shared / "tables"
    for table in OFFSETS_TABLES:
        got, expected = _rows(cluster_out, table), _rows(local, table)
        assert got == expected and expected, table
    assert not any('"topic": "orders"' in r or "__cluster_metadata" in r for r in _rows(cluster_out, "records"))
    assert _rows(cluster_out, "exchanges") == _rows(local, "exchanges") and _rows(local, "exchanges")
    for prefix in ("part", "capture"):
        assert _rows(cluster_out, "problems", prefix) == _rows(local, "problems", prefix)
    report = (tmp_path / "report.html").read_text()
    assert "streams-g" in report and "<svg class='chart'" in report

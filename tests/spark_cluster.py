"""A Spark standalone cluster on loopback for the tests: a master and workers started with PySpark's
`spark-class` (one core each, their own work directories), stopped by PID.

The workers' own Python (`PYSPARK_PYTHON` in their environment) is the system's, which does not
have kprotocol: executors get it only from what a job ships.

    with SparkCluster(tmp_path, workers=2) as cluster:
        cluster.master_url   # spark://127.0.0.1:PORT
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
MASTER_STARTED = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")
WORKER_REGISTERED = "Successfully registered with master"
WORKER_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"


class SparkCluster:
    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 start_timeout: float = 90.0) -> None:
        self.root = root
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.processes: list[tuple[subprocess.Popen, Path]] = []
        self.master_url = ""

    def env(self) -> dict[str, str]:
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(self.root / "logs"), PYSPARK_PYTHON=WORKER_PYTHON,
                   SPARK_DAEMON_MEMORY="256m", PATH="/usr/bin:/bin")
        return env

    def _start(self, name: str, *args: str) -> Path:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(),
                                       cwd=self.root, start_new_session=True)
        self.processes.append((process, log))
        return log

    def _wait_for(self, log: Path, pattern: str | re.Pattern[str], deadline: float) -> re.Match[str] | str:
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            found = pattern.search(text) if isinstance(pattern, re.Pattern) else (pattern if pattern in text else None)
            if found:
                return found
            if any(p.poll() is not None for p, _ in self.processes):
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Spark cluster did not start ({log.name}):\n{log.read_text(errors='replace')[-3000:]}")

    def start(self) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.start_timeout
        log = self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                          "--webui-port", "0")
        found = self._wait_for(log, MASTER_STARTED, deadline)
        assert isinstance(found, re.Match)
        self.master_url = found[1]
        logs = []
        for n in range(self.workers):
            work = self.root / f"worker-{n}"
            work.mkdir(exist_ok=True)
            logs.append(self._start(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                                    "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                                    "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work)))
        for log in logs:
            self._wait_for(log, WORKER_REGISTERED, deadline)
        return self.master_url

    def stop(self) -> None:
        """Workers first (each kills its executors), then the master; each by its PID."""
        for process, _ in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
        self.processes.clear()

    def __enter__(self) -> SparkCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

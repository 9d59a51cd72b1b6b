"""Ctrl-C and the long-running commands: one line, the documented exit status, nothing left running.
Each command runs in a session of its own and gets SIGINT on its whole process group, as a terminal's
Ctrl-C does; afterwards no process of that group may remain."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "kprotocol", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _group_left(pgid: int, wait_s: float = 15.0) -> list[int]:
    """The processes still in process group `pgid` after up to `wait_s` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[3]) == pgid:
                    left.append(int(entry))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _interrupt(process: subprocess.Popen[str]) -> tuple[str, str]:
    os.killpg(process.pid, signal.SIGINT)
    try:
        return process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _wait_for(path: Path, process: subprocess.Popen[str], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)


def test_broker_interrupted_while_starting_and_after(tmp_path: Path) -> None:
    starting = _start("kafka", "broker", "--dir", str(tmp_path / "a"))
    _wait_for(tmp_path / "a" / "broker.log", starting)  # the JVM is launched, not ready yet
    out, err = _interrupt(starting)
    assert starting.returncode == 130 and out == ""
    assert err == "kprotocol: interrupted before the broker was ready; nothing left running\n"
    assert _group_left(starting.pid) == []

    running = _start("kafka", "broker", "--dir", str(tmp_path / "b"))
    assert running.stdout is not None and "Ctrl-C stops it" in running.stdout.readline()
    out, err = _interrupt(running)
    assert (running.returncode, out, err) == (0, "broker stopped\n", "")
    assert _group_left(running.pid) == []


def test_broker_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    for given in (file, file / "below"):
        result = subprocess.run([sys.executable, "-m", "kprotocol", "kafka", "broker", "--dir", str(given)],
                                cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"kprotocol: error: --dir {given}: ") and "irectory" in result.stderr


def test_pipeline_interrupted_is_one_line_without_py4j(tmp_path: Path) -> None:
    for i in range(4):  # 40 tasks: the job runs for seconds, not one
        shutil.copytree(ROOT / "fixtures" / "offsets", tmp_path / "in" / f"copy-{i}")
    job = _start("pipeline", "offsets", str(tmp_path / "in"), "--out", str(tmp_path / "out"),
                 "--split-mb", "0.001", "--no-progress")
    assert job.stderr is not None
    seen = []
    for line in job.stderr:  # Spark's own start-up lines, until its context is up
        seen.append(line)
        if "Setting default log level" in line:
            break
    assert job.poll() is None, seen  # the session is being created: its 40 tasks take seconds more
    _, err = _interrupt(job)
    assert job.returncode == 130, err
    mine = [line for line in err.splitlines() if "kprotocol" in line or "Traceback" in line or "py4j" in line
            or "ERROR" in line]
    assert mine == ["kprotocol: interrupted"], err
    assert _group_left(job.pid) == []  # the JVM and the Python workers ended with it


def test_any_command_interrupted_is_one_line() -> None:
    waiting = subprocess.Popen([sys.executable, "-m", "kprotocol", "message", "decode", "HeartbeatRequest", "0", "-"],
                               cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{waiting.pid}/syscall").read_text().split()[:2] != ["0", "0x0"]:  # read(0, ...): stdin
        assert waiting.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    out, err = _interrupt(waiting)
    assert (waiting.returncode, out, err) == (130, "", "kprotocol: interrupted\n")

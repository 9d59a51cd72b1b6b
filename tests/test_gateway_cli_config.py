"""The gateway's configuration as an operator meets it: --check-config runs every validation start-up
runs, every value type-checked by the same code (one line, exit 2, never a traceback), only regular
files of a bounded size read, secrets in a world-readable file warned about; the banner names the
groups, the state and the limits; SIGINT exits 130 and SIGTERM 0, each with one line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kprotocol.toolchain import KafkaBroker
from kprotocol.toolchain.broker import free_port

GATEWAY = [sys.executable, "-m", "kprotocol", "gateway"]
UNREACHABLE = 'upstream = "127.0.0.1:1"\n'  # validation comes before any connection


def gateway(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GATEWAY, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line_error(done: subprocess.CompletedProcess[str], says: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("toml, says", [
    ('group = ["app"]\ngroup_config = ["streams.sesion.timeout.ms=10000"]\n',
     "streams.sesion.timeout.ms (did you mean streams.session.timeout.ms?)"),
    ('group = ["app"]\n[group_config]\n"streams.session.timeout.ms" = "soon"\n', "must be an integer"),
    ('limit = ["max.conections=3"]\n', "max.conections (did you mean max.connections?)"),
    ('limit = ["max.connections=0"]\n', "at least 1"),
    ("limit = 5\n", "limit: a table"),
    ("group_config = 7\n", "group_config: a table"),
    ("group = [1, 2]\n", "group: a string or a list of strings, not an integer"),
    ('group = [""]\n', "empty group id"),
    ("gruops = [\"app\"]\n", "gruops: not a gateway setting"),
    ("upstream = 5\n", "upstream: a string, not an integer"),
])
@pytest.mark.parametrize("check", [True, False], ids=["check-config", "start"])
def test_check_config_refuses_what_start_refuses(tmp_path: Path, toml: str, says: str, check: bool) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text((UNREACHABLE if not toml.startswith("upstream") else "") + toml)
    done = gateway("--config", str(config), *(["--check-config"] if check else []), "--no-uvloop")
    one_line_error(done, says)
    assert done.stdout == ""


def test_only_small_regular_files_are_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_line_error(gateway("--config", str(fifo), "--check-config", timeout=20), "not a regular file")
    one_line_error(gateway("--config", "/dev/zero", "--check-config", timeout=20), "not a regular file")
    one_line_error(gateway("--upstream", "127.0.0.1:1", "--upstream-config", str(fifo), "--check-config", timeout=20),
                   "not a regular file")
    big = tmp_path / "big.toml"
    big.write_text(UNREACHABLE + "# padding\n" * 200_000)
    one_line_error(gateway("--config", str(big), "--check-config"), "larger than 1048576 bytes")


def test_a_world_readable_secret_is_warned_about(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(UNREACHABLE + '[upstream_config]\n"security.protocol" = "SASL_PLAINTEXT"\n'
                      '"sasl.mechanism" = "PLAIN"\n"sasl.username" = "gw"\n"sasl.password" = "s3cret"\n')
    config.chmod(0o644)
    done = gateway("--config", str(config), "--check-config")
    assert f"warning: {config} holds a password or secret and every user may read it" in done.stderr
    assert "s3cret" not in done.stderr
    config.chmod(0o600)
    assert "warning" not in gateway("--config", str(config), "--check-config").stderr


def _started(broker: KafkaBroker, *options: str) -> tuple[subprocess.Popen[str], list[str]]:
    process = subprocess.Popen([*GATEWAY, "--upstream", broker.bootstrap, "--listen", f"127.0.0.1:{free_port()}",
                                "--no-uvloop", *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
    lines = [process.stdout.readline(), process.stdout.readline()]  # type: ignore[union-attr]
    return process, lines


@pytest.mark.parametrize("sig, code, says", [(signal.SIGINT, 130, "interrupted (SIGINT)"),
                                             (signal.SIGTERM, 0, "stopped (SIGTERM)")])
def test_banner_and_signals(kafka_broker: KafkaBroker, sig: int, code: int, says: str) -> None:
    process, lines = _started(kafka_broker, "--group", "app-a", "--group", "app-b", "--limit", "max.connections=50")
    try:
        assert lines[0].startswith("gateway on "), lines
        assert lines[1].startswith("groups: app-a, app-b; state: in memory only (lost on restart); limits: "), lines
        assert "max.connections=50" in lines[1] and "socket.request.max.bytes=104857600" in lines[1]
        process.send_signal(sig)
        assert process.wait(30) == code
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = process.stderr.read().splitlines()  # type: ignore[union-attr]
    assert any("state is in memory only" in line for line in err), err
    assert [line for line in err if line.startswith("kprotocol gateway:")] == [f"kprotocol gateway: {says}; "
                                                                              "connections closed"]
    assert "Traceback" not in "\n".join(err)


def test_a_metrics_port_in_use_fails_before_the_gateway_says_it_is_on(kafka_broker: KafkaBroker) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        done = gateway("--upstream", kafka_broker.bootstrap, "--listen", f"127.0.0.1:{free_port()}", "--no-uvloop",
                       "--metrics", f"127.0.0.1:{busy.getsockname()[1]}")
    finally:
        busy.close()
    one_line_error(done, "--metrics 127.0.0.1:")
    assert done.stdout == ""

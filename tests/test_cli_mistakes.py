"""Every command, given the everyday mistakes: one line on stderr (no traceback), and the documented
exit code: 2 for a usage mistake (missing file, directory, unknown name, bad input, unknown version),
1 for input that was read but does not decode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MISSING = "/nonexistent/kprotocol-input"

USAGE_MISTAKES = [
    ["message", "decode", "HeartbeatRequst", "0", "00"],
    ["message", "decode", "HeartbeatRequest", "99", "00"],
    ["message", "decode", "HeartbeatRequest", "0", "not hex!"],
    ["message", "decode", "HeartbeatRequest", "0", f"@{MISSING}"],
    ["message", "encode", "HeartbeatRequest", "0", "{not json"],
    ["message", "encode", "HeartbeatRequest", "0", f"@{sys.executable}"],  # a binary file, not JSON text
    ["streams-userdata", "decode", "not hex!"],
    ["streams-userdata", "decode", f"@{MISSING}"],
    ["frames", "decode", MISSING, MISSING],
    ["frames", "decode", "/tmp", "/tmp"],
    ["offsets", "decode", MISSING],
    ["offsets", "state", MISSING],
    ["assign", MISSING],
    ["capture", "decode", MISSING],
    ["capture", "decode", "/tmp"],
    ["capture", "summary", MISSING],
    ["capture", "decode", "x.pcap", "--ports", "http"],
    ["capture", "decode", "x.pcap", "--api", "NoSuchApi"],
    ["pipeline", "offsets", MISSING, "--out", "/tmp/kprotocol-never"],
    ["pipeline", "captures", MISSING, "--out", "/tmp/kprotocol-never"],
    ["report", MISSING, "--out", "/tmp/kprotocol-never.html"],
]
DATA_ERRORS = [
    ["message", "decode", "HeartbeatRequest", "0", "0003617070"],
    ["streams-userdata", "decode", "00010203"],
]


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kprotocol", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


@pytest.mark.parametrize("args", USAGE_MISTAKES, ids=lambda a: " ".join(a)[:60])
def test_usage_mistakes_give_one_line_and_exit_2(args: list[str]) -> None:
    result = _run(args)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line and not line.startswith(("usage:", " "))]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "error" in lines[0]


@pytest.mark.parametrize("args", DATA_ERRORS, ids=lambda a: " ".join(a)[:60])
def test_undecodable_input_gives_one_line_and_exit_1(args: list[str]) -> None:
    result = _run(args)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_version_and_message_list() -> None:
    assert _run(["--version"]).stdout.startswith("kprotocol ")
    names = _run(["message", "list"]).stdout.splitlines()
    assert len(names) > 250 and '{"name":"StreamsGroupHeartbeatRequest",' in "".join(names)


@pytest.mark.parametrize("args", [["capture", "decode", "x.pcap", "--bogus"], ["offsets", "state", "x", "--nope"],
                                  ["message", "decode", "HeartbeatRequest", "0", "00", "--fromat", "json"]],
                         ids=lambda a: " ".join(a))
def test_a_mistyped_option_shows_the_usage_of_its_sub_command(args: list[str]) -> None:
    result = _run(args)
    command = " ".join(args[:2])
    assert result.returncode == 2 and result.stderr.startswith(f"usage: kprotocol {command} "), result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"kprotocol {command}: error: unrecognized arguments: ")


def test_report_says_what_is_wrong_with_its_directory(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    file, empty, tables = tmp_path / "tables.parquet", tmp_path / "empty", tmp_path / "out"
    file.write_bytes(b"PAR1")
    empty.mkdir()
    (tables / "group_members").mkdir(parents=True)
    pq.write_table(pa.table({"group": ["orders", "payments"]}), tables / "group_members" / "part-0.parquet")
    html = str(tmp_path / "report.html")
    answers = {
        "file": (_run(["report", str(file), "--out", html]), 2, f"{file} is not a directory"),
        "empty": (_run(["report", str(empty), "--out", html]), 2, f"{empty} holds no group_members table"),
        "group": (_run(["report", str(tables), "--out", html, "--group", "nosuch"]), 1,
                  f"no group nosuch in {tables} (groups there: orders, payments)"),
    }
    for name, (result, code, says) in answers.items():
        assert result.returncode == code and result.stderr.count("\n") == 1 and says in result.stderr, (name, result)
    assert not Path(html).exists()

"""`kprotocol streams-userdata decode`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kprotocol.streams import cli
from kprotocol.tools.inputs import UsageError

SUBSCRIPTION_V12_PROBE = "0000000c0000000c"
ASSIGNMENT_V11 = (
    "0000000b0000000b000000020000000100000002000000000000000300000004fffffffb" + "00" * 20 + "7fffffffffffffff"
)


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["streams-userdata", "decode", *argv])
    return args.func(args)


def test_autodetect_says_which_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(ASSIGNMENT_V11) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["kind"], doc["detected"], doc["version"], doc["layoutVersion"]) == ("AssignmentInfo", True, 11, 10)
    assert doc["fields"]["activeTasks"] == ["1_2", "3_4"]


def test_explicit_kind_and_probe_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(SUBSCRIPTION_V12_PROBE, "--kind", "subscription") == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["kind"], doc["detected"], doc["layoutVersion"]) == ("SubscriptionInfo", False, "probe-header")
    assert doc["fields"]["latestSupportedVersion"] == 12


def test_at_file_hex_or_raw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hex.txt").write_text(ASSIGNMENT_V11 + "\n")
    (tmp_path / "raw.bin").write_bytes(bytes.fromhex(ASSIGNMENT_V11))
    for name in ("hex.txt", "raw.bin"):
        assert run(f"@{tmp_path / name}", "--kind", "assignment") == 0
        assert json.loads(capsys.readouterr().out)["version"] == 11


def test_undecodable_input_reports_each_attempt(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("0000000c") == 1
    err = capsys.readouterr().err
    assert "SubscriptionInfo" in err and "AssignmentInfo" in err
    with pytest.raises(UsageError, match="neither hex nor base64"):  # kprotocol prints it and exits 2
        run("zz!")


def test_random_bytes_are_not_taken_for_userdata() -> None:
    """Any 8 bytes parse as a version-probing header: the CLI believes only versions Kafka Streams could send."""
    import random

    rng = random.Random(11)
    for _ in range(5000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(4, 80)))
        doc, errors = cli.decode(data, None)
        assert doc is None and errors

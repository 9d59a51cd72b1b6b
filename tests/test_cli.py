"""The command line, run as users run it (`python -m kprotocol ...`)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def kprotocol(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprotocol", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_message_decode_and_encode() -> None:
    hex_body = "0003617070000000010001" + "6d"
    result = kprotocol("message", "decode", "HeartbeatRequest", "0", hex_body)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc == {"groupId": "app", "generationId": 1, "memberId": "m"}
    again = kprotocol("message", "encode", "HeartbeatRequest", "0", "-", stdin=result.stdout)
    assert again.stdout.strip() == hex_body


def test_message_decode_reports_bad_input() -> None:
    result = kprotocol("message", "decode", "HeartbeatRequest", "0", "0003617070")
    assert result.returncode == 1
    assert "HeartbeatRequest.generation_id" in result.stderr


def test_demo_decodes_the_sample_session() -> None:
    result = kprotocol("demo")
    assert result.returncode == 0, result.stderr
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    frames = [d for d in docs if d.get("direction") in ("request", "response")]
    records = [d for d in docs if "key" in d]
    assert records and docs[-2]["groups"]  # the __consumer_offsets segment, then the rebuilt state
    assert docs[-1]["connections"] == 42  # and the summary of the sample capture
    assert len(frames) == 14 and not [d for d in frames if "error" in d]
    join = next(d for d in frames if d["api"] == "JoinGroupRequest")
    protocol = join["body"]["protocols"][0]
    assert protocol["name"] == "stream"
    # The Streams SubscriptionInfo inside the consumer-protocol metadata is decoded in place.
    assert protocol["decodedMetadata"]["data"]["streamsUserData"]["version"] == 11
    sync = next(d for d in frames if d["api"] == "SyncGroupResponse")
    assert sync["body"]["decodedAssignment"]["data"]["streamsUserData"]["activeTasks"] == ["0_0", "0_1", "1_2"]

"""The command line, run as users run it (`python -m kprotocol ...`)."""

from __future__ import annotations

import json
from pathlib import Path
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
    exchanges = [d for d in docs if "apiKey" in d]
    records = [d for d in docs if "key" in d]
    assert records and docs[-2]["groups"]  # the __consumer_offsets segment, then the rebuilt state
    assert docs[-1]["connections"] == 42  # and the summary of the sample capture
    assert len(exchanges) == 7 and all(e.get("response") for e in exchanges)
    join = next(d for d in exchanges if d["apiName"] == "JoinGroup")
    protocol = join["request"]["protocols"][0]
    assert protocol["name"] == "stream"
    # The Streams SubscriptionInfo inside the consumer-protocol metadata is decoded in place.
    assert protocol["decodedMetadata"]["data"]["streamsUserData"]["version"] == 11
    sync = next(d for d in exchanges if d["apiName"] == "SyncGroup")
    assert sync["response"]["decodedAssignment"]["data"]["streamsUserData"]["activeTasks"] == ["0_0", "0_1", "1_2"]


def test_frames_decode_resynchronises_after_garbage(tmp_path) -> None:
    session = Path(__file__).resolve().parents[1] / "fixtures" / "frames" / "streams-session"
    client = Path(f"{session}.client.bin").read_bytes()
    first = int.from_bytes(client[:4], "big") + 4
    (tmp_path / "c.bin").write_bytes(client[:first] + b"\xff\xff\x00\x07garbage" + client[first:])
    result = kprotocol("frames", "decode", str(tmp_path / "c.bin"), f"{session}.server.bin")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    exchanges = [d for d in docs if "apiKey" in d]
    assert len(exchanges) == 7 and sum(bool(d.get("requestAfterResync")) for d in exchanges) == 1
    assert [d for d in docs if "error" in d and "skipped to resynchronise" in d["error"]]

"""The command line, run as users run it (`python -m kprotocol ...`)."""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys
import time

from conftest import ROOT
from kprotocol.registry import message_class


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


CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"


def test_every_command_writes_compact_json_lines_and_pretty_indents() -> None:
    outputs = {
        "message decode": kprotocol("message", "decode", "HeartbeatRequest", "0", "0003617070000000010001" + "6d"),
        "message list": kprotocol("message", "list"),
        "streams-userdata": kprotocol("streams-userdata", "decode", "0000000c0000000c"),
        "capture summary": kprotocol("capture", "summary", str(CAPTURES / "data.pcap"), "--ports", "36897",
                                     "--format", "json"),
        "assign": kprotocol("assign", "fixtures/assignor/scale_out_rack_aware.json"),
        "offsets state": kprotocol("offsets", "state", "fixtures/offsets"),
    }
    for name, result in outputs.items():
        assert result.returncode == 0, (name, result.stderr)
        for line in result.stdout.splitlines():
            doc = json.loads(line)
            assert line == json.dumps(doc, ensure_ascii=False, separators=(",", ":")), name
    pretty = kprotocol("capture", "summary", str(CAPTURES / "data.pcap"), "--ports", "36897", "--format", "json",
                       "--pretty")
    assert pretty.stdout.startswith('{\n  "file": ') and json.loads(pretty.stdout)["connections"] == 5


def test_capture_on_the_wrong_port_says_where_kafka_is() -> None:
    for action in ("decode", "summary"):
        result = kprotocol("capture", action, str(CAPTURES / "data.pcap"))  # the default port, 9092
        assert result.returncode == 0 and "Traceback" not in result.stderr
        assert result.stderr.splitlines()[-1].endswith(
            "no Kafka connection on port 9092; Kafka requests go to port 36897: try --ports 36897"), result.stderr
    result = kprotocol("capture", "decode", str(CAPTURES / "gateway.pcap"), "-j", "2", "--ports", "1,2")
    assert "Kafka requests go to ports 43853, 48664, 58191: try --ports 43853,48664,58191" in result.stderr
    found = kprotocol("capture", "decode", str(CAPTURES / "data.pcap"), "--ports", "36897")
    assert found.stdout and "no Kafka connection" not in found.stderr
    not_a_capture = kprotocol("capture", "decode", str(CAPTURES / "README.md"))  # its one problem, no hint
    assert not_a_capture.returncode == 1 and "not a pcap or pcapng file" in not_a_capture.stderr
    assert "no Kafka connection" not in not_a_capture.stderr


def test_capture_summary_names_error_codes() -> None:
    table = kprotocol("capture", "summary", str(CAPTURES / "clients.pcap"), "--ports", "60127")
    assert "COORDINATOR_LOAD_IN_PROGRESS(14)x1" in table.stdout
    doc = json.loads(kprotocol("capture", "summary", str(CAPTURES / "clients.pcap"), "--ports", "60127",
                               "--format", "json").stdout)
    rows = [row for row in doc["rows"] if row["errorCodes"]]
    assert rows and all(row["errorNames"].keys() == row["errorCodes"].keys() for row in rows)
    assert {"14": "COORDINATOR_LOAD_IN_PROGRESS"}.items() <= {k: v for r in rows for k, v in r["errorNames"].items()}.items()


def test_garbage_userdata_names_the_version_it_read() -> None:
    result = kprotocol("streams-userdata", "decode", "2ae21e53aabbccdd")
    assert result.returncode == 1 and result.stderr == (
        "kprotocol: not Kafka Streams userdata: the version read (719461971) is not a known SubscriptionInfo or "
        "AssignmentInfo version (1..11)\n")


def test_assign_of_a_binary_file_is_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "scenario.bin"
    binary.write_bytes(bytes(range(256)))
    result = kprotocol("assign", str(binary))
    assert result.returncode == 2 and result.stderr.startswith(f"kprotocol: error: {binary}: not JSON: ")
    assert result.stderr.count("\n") == 1


def test_streams_groups_describe_of_a_missing_group_exits_1_in_both_formats(kafka_broker) -> None:
    base = ["streams-groups", "describe", "--bootstrap-server", kafka_broker.bootstrap, "--group", "nosuch-group"]
    with kafka_broker.connect() as conn:  # as clients do first: a new cluster creates __consumer_offsets then
        conn.send(message_class("FindCoordinatorRequest")(key_type=0, coordinator_keys=["nosuch-group"]))
    deadline = time.monotonic() + 60
    while "COORDINATOR" in (table := kprotocol(*base)).stderr and time.monotonic() < deadline:
        time.sleep(1)  # the group coordinator is still loading
    as_json = kprotocol(*base, "--format", "json")
    for result in (table, as_json):
        assert result.returncode == 1, result.stderr
        assert result.stderr == "kprotocol: group nosuch-group: GROUP_ID_NOT_FOUND (69): Group nosuch-group not found.\n"
    doc = json.loads(as_json.stdout)  # the answer itself is still printed, one compact line
    assert as_json.stdout.count("\n") == 1 and doc["groups"][0]["errorCode"] == 69

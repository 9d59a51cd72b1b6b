"""The fixture segment decodes completely and replays into the expected group state; the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from kprotocol.cli import main
from kprotocol.coordinator_topics import decode_record
from kprotocol.coordinator_topics.state import GroupStateBuilder, replay
from kprotocol.records import RecordBatch, read_segment

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "offsets"
SEGMENT = FIXTURES / "00000000000000000000.log"
STREAMS_RECORD_TYPES = set(range(17, 25))


def _batches(path: Path = SEGMENT) -> list[RecordBatch]:
    return [e for e in read_segment(path) if isinstance(e, RecordBatch)]


def test_fixture_decodes_completely():
    types, versions = set(), set()
    for batch in _batches():
        if batch.is_control:
            continue
        for record in batch.records:
            decoded = decode_record(record.key, record.value)
            assert "data" in decoded["key"], decoded
            assert decoded["value"] is None or "data" in decoded["value"], decoded
            types.add(decoded["key"]["type"])
            if decoded["key"]["type"] in (0, 1) and decoded["value"]:
                versions.add(decoded["value"]["version"])
    assert STREAMS_RECORD_TYPES <= types and {0, 1, 2, 3, 5, 7, 8, 16} <= types
    assert versions == {0, 1, 2, 3, 4}


def test_state_of_the_fixture():
    state = replay(_batches())
    groups = state["groups"]
    assert state["problems"] == [] and state["pendingTransactionalOffsets"] == []

    # offsets: tombstone removed clicks-2; the aborted transactional commit never landed
    assert set(groups["legacy-app"]["offsets"]["clicks"]) == {"0", "1"}
    assert groups["eos-app"]["offsets"]["payments"]["0"]["offset"] == 500
    assert groups["orders-consumers"]["offsets"]["orders"]["3"]["offset"] == 42003

    classic = groups["wordcount-app"]
    assert classic["type"] == "classic"
    meta = classic["classic"]["metadata"]
    assert meta["generation"] == 7 and meta["leader"] == meta["members"][0]["memberId"]
    for member in meta["members"]:
        sub = member["decodedSubscription"]["data"]
        assign = member["decodedAssignment"]["data"]
        assert sub["topics"] == ["wordcount-input"] and sub["streamsUserData"]["version"] == 11
        assert assign["streamsUserData"]["version"] == 11
    assert meta["members"][0]["decodedSubscription"]["data"]["streamsUserData"]["userEndPoint"] == "localhost:8080"

    consumer = groups["orders-consumers"]
    assert consumer["type"] == "consumer"
    assert consumer["consumer"]["metadata"]["epoch"] == 3
    assert set(consumer["consumer"]["members"]) == {"orders-consumer-a"}  # b left: tombstones
    assert set(consumer["consumer"]["targetAssignment"]) == {"orders-consumer-a"}
    assert consumer["consumer"]["currentAssignment"]["orders-consumer-a"]["memberEpoch"] == 3

    streams = groups["fraud-detector"]["streams"]
    assert groups["fraud-detector"]["type"] == "streams"
    assert set(streams) == {"metadata", "partitionMetadata", "members", "targetAssignment", "targetAssignmentMetadata",
                            "targetAssignmentResolvedTopicIds", "currentAssignment", "topology"}
    assert streams["topology"]["subtopologies"][0]["sourceTopics"] == ["transactions"]
    assert streams["currentAssignment"]["fraud-1"]["activeTasks"] == [{"subtopologyId": "0", "partitions": [0, 1]}]


def test_group_tombstone_removes_the_group():
    builder = GroupStateBuilder()
    for batch in _batches():
        builder.apply_batch(batch)
    key = b"\x00\x02" + b"\x00\x0dwordcount-app"
    builder.apply(decode_record(key, None))
    groups = builder.to_dict()["groups"]
    assert "classic" not in groups["wordcount-app"]
    assert groups["wordcount-app"]["type"] == "offsets-only"


def test_open_transaction_is_pending():
    batches = _batches()
    open_txn = [b for b in batches if b.is_transactional and not b.is_control][:1]
    state = replay(open_txn)
    assert state["groups"] == {}
    assert [p["partition"] for p in state["pendingTransactionalOffsets"]] == [0, 1]


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_decode(capsys):
    code, out, err = _run(["offsets", "decode", str(SEGMENT)], capsys)
    assert code == 0 and err == ""
    lines = [json.loads(line) for line in out.splitlines()]
    assert sum(len(b.records) for b in _batches()) == len(lines)
    assert {"type": "COMMIT", "version": 0, "coordinatorEpoch": 12} in [line.get("control") for line in lines]


def test_cli_decode_group_filter(capsys):
    code, out, _ = _run(["offsets", "decode", "--group", "fraud-detector", str(SEGMENT)], capsys)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {line["key"]["type"] for line in lines} == STREAMS_RECORD_TYPES


def test_cli_decode_damaged_summarizes_problems(capsys):
    paths = [str(FIXTURES / n) for n in ("damaged-crc.log", "damaged-truncated.log", "damaged-garbage.log")]
    code, out, err = _run(["offsets", "decode", *paths], capsys)
    assert code == 1
    assert "3 segment problem(s), 2 record problem(s)" in err
    assert "CRC32C mismatch" in err and "truncated" in err and "record at offset 900" in err
    assert any(json.loads(line)["offset"] == 901 for line in out.splitlines())


def test_cli_state(capsys):
    code, out, _ = _run(["offsets", "state", str(FIXTURES), "--group", "wordcount-app"], capsys)
    state = json.loads(out)
    assert code == 0 and list(state["groups"]) == ["wordcount-app"] and state["segmentProblems"] == []


def test_cli_progress_bar_goes_to_stderr(capsys):
    code, out, err = _run(["offsets", "decode", "--progress", str(SEGMENT)], capsys)
    assert code == 0 and "100%" in err
    assert all(json.loads(line) for line in out.splitlines())  # stdout stays pure JSON lines


def test_cli_decode_transaction_state_topic(tmp_path, capsys):
    from kprotocol.records import Record, write_batch
    from kprotocol.registry import message_class

    key = b"\x00\x00" + message_class("TransactionLogKey").from_json({"transactionalId": "txn-1"}, 0).encode(0)
    doc = {"producerId": 7, "producerEpoch": 1, "transactionTimeoutMs": 60000, "transactionStatus": 0,
           "transactionPartitions": None, "transactionLastUpdateTimestampMs": 5, "transactionStartTimestampMs": 5}
    value = b"\x00\x00" + message_class("TransactionLogValue").from_json(doc, 0).encode(0)
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(write_batch([Record(0, 1, key, value), Record(1, 2, key, None)]))
    code, out, _ = _run(["offsets", "decode", "--topic", "__transaction_state", str(tmp_path)], capsys)
    first, tombstone = (json.loads(line) for line in out.splitlines())
    assert code == 0
    assert first["key"] == {"type": 0, "data": {"transactionalId": "txn-1"}}
    assert first["value"] == {"version": 0, "data": doc} and tombstone["value"] is None


def test_the_former_package_name_still_imports_the_same_modules() -> None:
    """`kprotocol.coordinator` was renamed `kprotocol.coordinator_topics`; old imports get the very same modules."""
    import kprotocol.coordinator as old
    import kprotocol.coordinator.lines as old_lines
    import kprotocol.coordinator_topics as new
    import kprotocol.coordinator_topics.lines as new_lines
    from kprotocol.coordinator.state import replay  # noqa: F401 - importable by its old path

    assert old is new and old_lines is new_lines and old.decode_record is new.decode_record

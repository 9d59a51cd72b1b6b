"""Kafka Streams userdata (SubscriptionInfo / AssignmentInfo v1-11) on the compiled path of `kprotocol offsets
decode` (_offsets.c) against the reference path (kprotocol.streams through kprotocol.group_payloads.attach):
the same `decoded<Field>` JSON byte for byte on every golden vector and edge record, in every
consumer-protocol version, under hypothesis (valid userdata and corrupted userdata: the same JSON, or the
compiled path hands the payload to Python), and the same JSON lines on the Kafka-made segments."""

from __future__ import annotations

import argparse
import io
import json
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kprotocol.coordinator_topics import CONSUMER_OFFSETS, lines, record_types
from kprotocol.records import Record, read_segment, write_batch
from kprotocol.records.cli import run_decode
from kprotocol.registry import message_class
from kprotocol.streams import AssignmentInfo, SubscriptionInfo, TaskId, TaskOffsetSum, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
USERDATA = ROOT.parent / "shared" / "streams-userdata"
KAFKA_MADE = [ROOT / "kprotocol" / "samples" / "consumer-offsets.log",
              *sorted((ROOT / "fixtures" / "kafka" / "data").glob(f"{CONSUMER_OFFSETS}-*/*.log"))]
SUBSCRIPTION, ASSIGNMENT = 1, 2
CLASSES = {SUBSCRIPTION: message_class("ConsumerProtocolSubscription"),
           ASSIGNMENT: message_class("ConsumerProtocolAssignment")}
WHICH = {"SubscriptionInfo": SUBSCRIPTION, "AssignmentInfo": ASSIGNMENT}

pytestmark = pytest.mark.skipif(not lines.ENABLED, reason="the compiled path is not built")


@pytest.fixture(scope="module")
def decoder():
    return lines.decoder(lambda *record: pytest.fail(f"no record expected here: {record}"))


def payload(which: int, user_data: bytes | None, version: int = 3) -> bytes:
    """A consumer-protocol subscription or assignment at `version` (4: a newer one, read as 3) with `user_data`."""
    cls, at = CLASSES[which], min(version, 3)
    if which == SUBSCRIPTION:
        message = cls(topics=("input",), user_data=user_data, owned_partitions=(), generation_id=4, rack_id="r")
    else:
        message = cls(assigned_partitions=(), user_data=user_data)
    return struct.pack(">h", version) + message.encode(at)


def compiled_and_reference(decoder, which: int, data: bytes, protocol: str = "stream") -> tuple[bytes | None, bytes]:
    return decoder.payload(which, protocol, data), lines._nested(which, protocol, data)


def _vectors(name: str, edges: bool) -> list[dict]:
    path = USERDATA / f"{name}{'.edges' if edges else ''}.jsonl"
    return [v for v in map(json.loads, path.open(encoding="utf-8")) if v.get("hex") is not None]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("name", sorted(WHICH))
def test_every_vector_in_every_consumer_protocol_version(decoder, name: str, version: int) -> None:
    vectors = _vectors(name, edges=False)
    assert len(vectors) > 200
    for vector in vectors:
        compiled, reference = compiled_and_reference(decoder, WHICH[name], payload(WHICH[name], bytes.fromhex(vector["hex"]), version))
        assert compiled == reference, vector["name"]
        streams = json.loads(compiled)["data"]["streamsUserData"]
        assert streams == vector["fields"], vector["name"]  # and Kafka's own getters agree


@pytest.mark.parametrize("name", sorted(WHICH))
def test_every_edge_record(decoder, name: str) -> None:
    """Probing, bad versions, trailing bytes and raw encodings are decoded in C; what the compiled path
    leaves to Python (a truncated collection: its error names the construct path) is the same line."""
    taken = {}
    for vector in _vectors(name, edges=True):
        data = payload(WHICH[name], bytes.fromhex(vector["hex"]))
        compiled, reference = compiled_and_reference(decoder, WHICH[name], data)
        assert compiled is None or compiled == reference, vector["name"]
        taken.setdefault(vector["kind"], []).append(compiled is not None)
        doc = json.loads(reference)["data"]
        assert ("streamsUserDataError" in doc) == (vector["outcome"] == "error" and vector["stage"] != "encode"), vector
    for kind in ("probe", "bad-version", "trailing"):
        if kind in taken:
            assert all(taken[kind]), kind
    assert sum(map(sum, taken.values())) > len(taken) * 2


# (userdata, whether the compiled path writes the error itself): a truncated field's error names its
# construct path, which only the Python decoder knows.
ERRORS = [(None, True), (b"", True), (b"\x00\x00", True), (b"\x00\x00\x00\x0c", True),
          (b"\x00\x00\x00\x0c\x00\x00\x00\x0b", True), (b"\x00\x00\x00\x0d\x00\x00\x00\x0e", True),
          (b"\x00\x00\x00\x0c\xff\xff\xff\xff", True), (b"\x00\x00\x00\x03\x00\x00\x00\x02" + bytes(28), True),
          (b"\x00\x00\x00\x00" + bytes(24), True), (b"\x00\x00\x00\x00\x00\x00", False)]


@pytest.mark.parametrize(("user_data", "in_c"), ERRORS)
def test_subscription_errors_are_the_reference_ones(decoder, user_data: bytes | None, in_c: bool) -> None:
    compiled, reference = compiled_and_reference(decoder, SUBSCRIPTION, payload(SUBSCRIPTION, user_data))
    assert compiled == (reference if in_c else None)
    assert b"streamsUserDataError" in reference or user_data[3] == 0x0D


@pytest.mark.parametrize("user_data", [None, b"", b"\x00\x00", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff",
                                       b"\x00\x00\x00\x0c\x00\x00\x00\x0b"])
def test_assignment_errors_are_the_reference_ones(decoder, user_data: bytes | None) -> None:
    compiled, reference = compiled_and_reference(decoder, ASSIGNMENT, payload(ASSIGNMENT, user_data))
    assert compiled == reference
    assert b"streamsUserDataError" in reference


def test_a_repeated_client_tag_is_kafkas_getter_error(decoder) -> None:
    info = SubscriptionInfo(11, 11, client_tags=[("az", "a"), ("rack", "r"), ("az", "b"), ("rack", "s")])
    compiled, reference = compiled_and_reference(decoder, SUBSCRIPTION, payload(SUBSCRIPTION, info.encode()))
    assert compiled == reference
    error = json.loads(compiled)["data"]["streamsUserDataError"]
    assert error == ("SubscriptionInfo: DuplicateClientTagError: Duplicate key az (attempted merging values a and b) "
                     "(at client_tags[2].key)")


@pytest.mark.parametrize("protocol", ["range", "", "streams", "stream"])
def test_only_the_stream_protocol_carries_streams_userdata(decoder, protocol: str) -> None:
    data = payload(ASSIGNMENT, AssignmentInfo(11, 11, active_tasks=[TaskId(0, 1)]).encode())
    compiled, reference = compiled_and_reference(decoder, ASSIGNMENT, data, protocol)
    assert compiled == reference
    assert (b"streamsUserData" in compiled) == (protocol == "stream")


# ---- hypothesis: valid userdata of every version, and corrupted userdata -----------------------------

TEXT = st.one_of(st.sampled_from(["", "input", "changelog", "repartition", "a__b", "h\x00st", "t\u00e9", "\U0001f600"]),
                 st.text(st.characters(blacklist_categories=("Cs",)), max_size=6))
INT32, INT64 = st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 63), (1 << 63) - 1)
SMALL = st.integers(-2, 40)


def _task(version: int) -> st.SearchStrategy[TaskId]:
    name = st.one_of(st.none(), TEXT) if version >= 10 else st.none()
    return st.builds(TaskId, st.one_of(SMALL, INT32), st.one_of(SMALL, INT32), name)


@st.composite
def subscription_info(draw) -> bytes:
    version = draw(st.integers(1, 11))
    latest = draw(st.integers(version, 11)) if version >= 3 else -1
    offsets = st.one_of(st.sampled_from([-2, -3, 0]), INT64) if version >= 7 else st.sampled_from([-2, -3])
    sums = draw(st.lists(st.builds(TaskOffsetSum, _task(version), offsets), max_size=12))
    return SubscriptionInfo(
        version, latest, draw(st.uuids()), sums, draw(TEXT) if version >= 2 else None,
        draw(st.integers(-128, 127)) if version >= 8 else 0, draw(INT32) if version >= 9 else 0,
        draw(st.lists(st.tuples(TEXT, TEXT), max_size=4)) if version >= 11 else ()).encode()


@st.composite
def assignment_info(draw) -> bytes:
    version = draw(st.integers(1, 11))
    tps = st.lists(st.builds(TopicPartition, TEXT, SMALL), max_size=5)
    hosts = st.lists(st.tuples(st.tuples(st.sampled_from(["h1", "h2", "", "h\u00e9"]), st.sampled_from([0, 80, 8080])), tps),
                     max_size=4)
    return AssignmentInfo(
        version, draw(INT32) if version >= 3 else -1, draw(st.lists(_task(version), max_size=8)),
        draw(st.lists(st.tuples(_task(version), tps), max_size=5)), draw(hosts) if version >= 2 else (),
        draw(hosts) if version >= 6 else (), draw(INT32) if version >= 4 else 0,
        draw(INT64) if version >= 7 else (1 << 63) - 1).encode()


@st.composite
def corrupted(draw, valid: st.SearchStrategy[bytes]) -> bytes:
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["flip", "cut", "insert", "count"]))
        at = draw(st.integers(0, len(data)))
        if how == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "cut":
            del data[at:]
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
        elif at + 4 <= len(data):  # an int32 (a count, a length, a version) replaced
            data[at:at + 4] = struct.pack(">i", draw(st.sampled_from([-1, 0, 1, 2, 11, 12, 0x7FFFFFFF])))
    return bytes(data)


HYPOTHESIS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@HYPOTHESIS
@given(st.data())
def test_valid_userdata_is_decoded_in_c_alike(decoder, data) -> None:
    which = data.draw(st.sampled_from([SUBSCRIPTION, ASSIGNMENT]))
    user_data = data.draw(subscription_info() if which == SUBSCRIPTION else assignment_info())
    compiled, reference = compiled_and_reference(decoder, which, payload(which, user_data, data.draw(st.integers(0, 4))))
    assert compiled is None or compiled == reference
    # Kafka's own encodings of text the compiled path reads as plain UTF-8 are never left to Python (characters
    # beyond the BMP, surrogate pairs in Java's encodings, are: four-byte UTF-8 in the output)
    if "streamsUserDataError" not in reference.decode() and b"\xed" not in user_data \
            and not any(b >= 0xF0 for b in reference):
        assert compiled == reference


@HYPOTHESIS
@given(st.data())
def test_corrupted_userdata_gives_the_same_json_or_goes_to_python(decoder, data) -> None:
    which = data.draw(st.sampled_from([SUBSCRIPTION, ASSIGNMENT]))
    user_data = data.draw(corrupted(subscription_info() if which == SUBSCRIPTION else assignment_info()))
    compiled, reference = compiled_and_reference(decoder, which, payload(which, user_data))
    assert compiled is None or compiled == reference


# ---- whole segments ------------------------------------------------------------------------------

def _decode(paths: list[Path], compiled: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, bytes, str]:
    monkeypatch.setattr(lines, "ENABLED", compiled)
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    args = argparse.Namespace(paths=paths, topic=CONSUMER_OFFSETS, type=None, max_records=None, pretty=False,
                              group=None, progress=False)
    code = run_decode(args, out, err)
    out.flush()
    return code, out.buffer.getvalue(), err.getvalue()


def _same_without_python(paths: list[Path], monkeypatch: pytest.MonkeyPatch) -> bytes:
    """The compiled lines equal the reference lines, and no record or payload went to Python for them."""
    def refuse(*args):
        raise AssertionError(f"handed to Python: {args!r}"[:300])

    with monkeypatch.context() as patch:
        patch.setattr(lines, "_nested", refuse)
        patch.setattr(lines.Lines, "tail", refuse)
        compiled = _decode(paths, True, patch)
    reference = _decode(paths, False, monkeypatch)
    assert compiled == reference
    return compiled[1]


def test_kafka_made_segments_need_no_python(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _same_without_python(KAFKA_MADE, monkeypatch)
    docs = [json.loads(line) for line in out.splitlines()]
    assert any("streamsUserData" in m["decodedSubscription"]["data"] and "streamsUserData" in m["decodedAssignment"]["data"]
               for d in docs if d.get("recordType") == "GroupMetadata" and d["value"] for m in d["value"]["data"]["members"])
    assert any(d["value"] and d["value"].get("layout") == "StreamsGroupMetadataValueBefore44" for d in docs)
    assert {d.get("recordType") for d in docs} >= {"StreamsGroupMetadata", "StreamsGroupTopology",
                                              "StreamsGroupCurrentMemberAssignment", "GroupMetadata"}


def test_group_metadata_of_every_vector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A classic Streams group whose members carry every golden SubscriptionInfo and AssignmentInfo."""
    sample = next(r for b in read_segment(KAFKA_MADE[0]) if not b.is_control for r in b.records if r.key[1] == 2)
    value_cls = record_types(CONSUMER_OFFSETS)[2].value
    version = struct.unpack_from(">h", sample.value)[0]
    group = value_cls.decode(sample.value[2:], version)
    member = group.members[0]
    subscriptions, assignments = _vectors("SubscriptionInfo", False), _vectors("AssignmentInfo", False)
    members = [member.replace(member_id=f"m-{i}",
                              subscription=payload(SUBSCRIPTION, bytes.fromhex(s["hex"]), i % 5),
                              assignment=payload(ASSIGNMENT, bytes.fromhex(a["hex"]), i % 4))
               for i, (s, a) in enumerate(zip(subscriptions * 2, assignments))]
    records = [Record(i, 1_700_000_000_000, sample.key,
                      sample.value[:2] + group.replace(members=tuple(members[i::20])).encode(version)) for i in range(20)]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(write_batch(records[:10]) + write_batch(records[10:], compression="zstd"))
    out = _same_without_python([path], monkeypatch)
    assert out.count(b'"streamsUserData":') == 2 * len(members)


# ---- the capture decoder's JoinGroup/SyncGroup payloads ----------------------------------------------

@pytest.mark.parametrize("name", sorted(WHICH))
def test_capture_payloads_take_the_compiled_path(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    from kprotocol import group_payloads
    from kprotocol.capture import payloads
    from kprotocol.streams.nested import decode_member_assignment, decode_member_metadata

    which, field = WHICH[name], "metadata" if WHICH[name] == SUBSCRIPTION else "assignment"
    decoder = decode_member_metadata if which == SUBSCRIPTION else decode_member_assignment
    reference_attach = group_payloads.attach
    for vector in _vectors(name, edges=False):
        data = payload(which, bytes.fromhex(vector["hex"]))
        for protocol in (("consumer", "stream"), ("consumer", "range"), ("connect", "stream"), ("consumer", None)):
            compiled, reference = {}, {}
            reference_attach(reference, field, data, decoder, protocol)
            with monkeypatch.context() as patch:
                if protocol == ("consumer", "stream"):  # the compiled path takes every vector alone
                    patch.setattr(group_payloads, "attach", lambda *args: pytest.fail("went to Python"))
                payloads.attach(compiled, field, data, decoder, protocol)
            assert compiled == reference, (vector["name"], protocol)
            assert json.dumps(compiled) == json.dumps(reference)


def test_capture_decode_is_unchanged(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    capture = ROOT / "fixtures" / "captures" / "clients.pcap"
    command = [sys.executable, "-m", "kprotocol", "capture", "decode", str(capture), "--ports", "60127"]
    outputs = []
    for pure in (False, True):
        env = {**os.environ, **({"KPROTOCOL_PURE_PYTHON": "1"} if pure else {})}
        outputs.append(subprocess.run(command, env=env, capture_output=True, check=True).stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0].count(b'"streamsUserData":') >= 3

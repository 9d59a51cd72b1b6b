"""Frames and headers: header versions chosen as Kafka does, round trips, and a sans-IO conversation."""

from __future__ import annotations

import pytest

import kprotocol
from kprotocol.conversation import Conversation, FrameError, FrameReader, RequestEvent, ResponseEvent
from kprotocol.errors import DecodeError, TrailingBytesError, TruncatedError
from kprotocol.framing import request_header_version, response_header_version
from kprotocol.registry import api_classes
from conftest import ROOT

M = kprotocol.message_class
API_KEYS = sorted({M(n).api_key for n in kprotocol.spec_names() if M(n).spec_type == "request"})


def test_header_versions_follow_kafka() -> None:
    assert request_header_version(7, 0) == 0  # ControlledShutdown v0: no client id
    assert request_header_version(7, 1) == 1
    assert request_header_version(11, 5) == 1 and request_header_version(11, 6) == 2
    assert response_header_version(18, 3) == 0  # ApiVersionsResponse always v0
    assert response_header_version(11, 5) == 0 and response_header_version(11, 6) == 1


@pytest.mark.parametrize("api_key", API_KEYS)
def test_request_and_response_frames_round_trip(api_key: int) -> None:
    request_cls, response_cls = api_classes(api_key)
    for version in range(request_cls.valid_versions[0], request_cls.valid_versions[1] + 1):
        header = M("RequestHeader")(request_api_key=api_key, request_api_version=version, correlation_id=version + 1,
                                    client_id="" if request_header_version(api_key, version) == 0 else "cli")
        frame = kprotocol.encode_request(header, request_cls())
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        got_header, got = kprotocol.decode_request(frame)
        assert (got_header, got) == (header, request_cls())
        response_header = M("ResponseHeader")(correlation_id=version + 1)
        frame = kprotocol.encode_response(response_header, response_cls(), version)
        assert kprotocol.decode_response(frame, api_key, version) == (response_header, response_cls())


def test_kafka_python_reads_our_request_frames() -> None:
    """A real client library parses our framing and header (kafka-python's own parser)."""
    from kafka.protocol.metadata import MetadataRequest as KafkaMetadataRequest

    header = M("RequestHeader")(request_api_key=3, request_api_version=12, correlation_id=42, client_id="cli")
    msg = M("MetadataRequest")(topics=None, allow_auto_topic_creation=False)
    frame = kprotocol.encode_request(header, msg)
    theirs = KafkaMetadataRequest.decode(frame[4:], version=12, header=True)
    assert theirs.header.correlation_id == 42 and theirs.header.client_id == "cli"
    assert theirs.topics is None and theirs.allow_auto_topic_creation is False


def test_bad_frames() -> None:
    with pytest.raises(TruncatedError):
        kprotocol.decode_request(b"\0\0\0\x10\0\x03")
    header = M("RequestHeader")(request_api_key=12, request_api_version=0, correlation_id=1, client_id="c")
    frame = kprotocol.encode_request(header, M("HeartbeatRequest")(group_id="g", member_id="m"))
    with pytest.raises(TrailingBytesError):
        kprotocol.decode_request(frame + b"\0")
    with pytest.raises(DecodeError) as info:
        kprotocol.decode_request(frame[:4] + b"\x7f\x7f" + frame[6:])
    assert "api key" in str(info.value)


def test_frame_reader_handles_any_split() -> None:
    data = (ROOT / "fixtures/frames/streams-session.client.bin").read_bytes()
    whole = FrameReader().feed(data)
    for step in (1, 3, 7, 100):
        reader = FrameReader()
        frames = [f for i in range(0, len(data), step) for f in reader.feed(data[i:i + step])]
        assert frames == whole and reader.pending == 0


def test_conversation_pairs_responses_and_reports_bad_frames() -> None:
    client = (ROOT / "fixtures/frames/streams-session.client.bin").read_bytes()
    server = (ROOT / "fixtures/frames/streams-session.server.bin").read_bytes()
    conv = Conversation()
    requests = conv.client_bytes(client)
    assert all(isinstance(e, RequestEvent) for e in requests)
    assert [type(e.message).__name__ for e in requests][:4] == [
        "ApiVersionsRequest", "MetadataRequest", "FindCoordinatorRequest", "JoinGroupRequest"]
    # Damage one response body: it is reported, the rest still decode.
    frames = FrameReader().feed(server)
    offset, frame = frames[3]
    damaged = server[:offset + 8] + b"\xff" * 4 + server[offset + 12:]
    responses = conv.server_bytes(damaged)
    assert len(responses) == len(requests)
    assert isinstance(responses[3], FrameError)
    ok = [e for e in responses if isinstance(e, ResponseEvent)]
    assert len(ok) == len(requests) - 1
    assert ok[0].message.api_keys[0].api_key == 0


def test_sync_group_payloads_decode_with_the_protocol_learned_from_join_group() -> None:
    """SyncGroup v0-v4 do not name the protocol: the conversation remembers it from JoinGroup."""
    client = (ROOT / "fixtures/frames/streams-session.client.bin").read_bytes()
    server = (ROOT / "fixtures/frames/streams-session.server.bin").read_bytes()
    conv = Conversation()
    requests = conv.client_bytes(client)
    conv.server_bytes(server)
    assert conv.groups["app"] == ("consumer", "stream")
    assignment = next(e for e in requests if e.api_key == 14).message.assignments[0]
    old = M("SyncGroupRequest")(group_id="app", generation_id=8, member_id=assignment.member_id,
                                assignments=(assignment,))
    header = M("RequestHeader")(request_api_key=14, request_api_version=3, correlation_id=99, client_id="c")
    (event,) = conv.client_bytes(kprotocol.encode_request(header, old))
    decoded = event.to_json()["body"]["assignments"][0]["decodedAssignment"]
    assert decoded["version"] == 3 and decoded["data"]["streamsUserData"]["version"] == 11
    (response,) = conv.server_bytes(kprotocol.encode_response(
        M("ResponseHeader")(correlation_id=99), M("SyncGroupResponse")(assignment=b"\0\3garbage"), 3))
    assert "error" in response.to_json()["body"]["decodedAssignment"]


@pytest.mark.parametrize("pure", ["0", "1"])
def test_decode_prefix_accepts_bytearray_and_memoryview_on_both_paths(pure: str) -> None:
    import subprocess
    import sys

    script = (
        "import kprotocol\n"
        "cls = kprotocol.message_class('HeartbeatRequest')\n"
        "raw = cls(group_id='g', generation_id=1, member_id='m').encode(0)\n"
        "for data in (bytearray(raw), memoryview(raw), raw):\n"
        "    assert cls.decode_prefix(data, 0, 0) == (cls.decode(raw, 0), len(raw))\n"
    )
    env = {**__import__("os").environ, "KPROTOCOL_PURE_PYTHON": pure} if pure == "1" else None
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr

"""Streams userdata decoded inside ConsumerProtocolSubscription / ConsumerProtocolAssignment."""

from __future__ import annotations

import base64
import struct

import pytest

import kprotocol
from kprotocol.errors import DecodeError
from kprotocol.streams import AssignmentInfo, SubscriptionInfo, TaskId, TaskOffsetSum, TopicPartition
from kprotocol.streams.nested import decode_member_assignment, decode_member_metadata

SUBSCRIPTION = SubscriptionInfo(11, 11, task_offset_sums=[TaskOffsetSum(TaskId(0, 1), -2)], user_end_point="h:1")
ASSIGNMENT = AssignmentInfo(
    11, 11, active_tasks=[TaskId(0, 1)], standby_tasks=[(TaskId(1, 1), [TopicPartition("t", 1)])]
)


def metadata(version: int, user_data: bytes | None, written_version: int | None = None) -> bytes:
    cls = kprotocol.message_class("ConsumerProtocolSubscription")
    msg = cls(topics=("input",), user_data=user_data, owned_partitions=(), generation_id=4, rack_id=None)
    return struct.pack(">h", version if written_version is None else written_version) + msg.encode(version)


def assignment(version: int, user_data: bytes | None) -> bytes:
    cls = kprotocol.message_class("ConsumerProtocolAssignment")
    return struct.pack(">h", version) + cls(assigned_partitions=(), user_data=user_data).encode(version)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_member_metadata_carries_subscription_info(version: int) -> None:
    userdata = SUBSCRIPTION.encode()
    nested = decode_member_metadata("consumer", "stream", metadata(version, userdata))
    assert nested is not None and nested.error is None
    assert nested.version == version and nested.message.topics == ("input",)
    assert nested.streams_userdata == SubscriptionInfo.decode(userdata)
    doc = nested.to_json()
    assert doc["userData"] == base64.b64encode(userdata).decode()
    assert doc["streamsUserData"] == SUBSCRIPTION.to_fields()
    assert "streamsUserDataError" not in doc


def test_sync_group_assignment_carries_assignment_info() -> None:
    userdata = ASSIGNMENT.encode()
    nested = decode_member_assignment("consumer", "stream", assignment(3, userdata))
    assert nested is not None and nested.error is None
    assert nested.to_json()["streamsUserData"] == ASSIGNMENT.to_fields()
    assert nested.to_json()["userData"] == base64.b64encode(userdata).decode()


def test_newer_consumer_protocol_version_is_read_at_the_latest_known() -> None:
    nested = decode_member_metadata("consumer", "stream", metadata(3, SUBSCRIPTION.encode(), written_version=9))
    assert nested is not None and nested.version == 9
    assert nested.to_json()["streamsUserData"]["userEndPoint"] == "h:1"


def test_bad_userdata_is_reported_not_raised() -> None:
    nested = decode_member_metadata("consumer", "stream", metadata(1, b"\x00\x00\x00\x0c"))
    assert nested is not None and nested.streams_userdata is None
    doc = nested.to_json()
    assert "streamsUserData" not in doc and "SubscriptionInfo" in doc["streamsUserDataError"]
    assert doc["userData"] == base64.b64encode(b"\x00\x00\x00\x0c").decode()
    missing = decode_member_assignment("consumer", "stream", assignment(0, None))
    assert missing is not None and missing.error == "no userData"


def test_getter_failure_keeps_the_decoded_userdata() -> None:
    tags = SubscriptionInfo(11, 11, client_tags=[("k", "v1"), ("k", "v2")]).encode()
    nested = decode_member_metadata("consumer", "stream", metadata(1, tags))
    assert nested is not None and nested.streams_userdata is not None
    assert "Duplicate key k" in nested.to_json()["streamsUserDataError"]


def test_other_protocols() -> None:
    plain = decode_member_metadata("consumer", "range", metadata(1, b"opaque"))
    assert plain is not None and plain.streams_userdata is None and plain.error is None
    assert "streamsUserData" not in plain.to_json() and plain.to_json()["userData"] == "b3BhcXVl"
    assert decode_member_metadata("connect", "stream", b"\x00\x00") is None


def test_undecodable_consumer_protocol_bytes_raise() -> None:
    with pytest.raises(DecodeError):
        decode_member_metadata("consumer", "stream", b"\x00")
    with pytest.raises(DecodeError):
        decode_member_metadata("consumer", "stream", b"\xff\xff\x00\x00\x00\x00")
    with pytest.raises(DecodeError):
        decode_member_assignment("consumer", "stream", b"\x00\x00\x00\x00\x00\x05")

"""Every coordinator record vector decodes through `decode_record` with its type/version prefix."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

from kprotocol.coordinator_topics.decode import EARLIER_LAYOUTS
from hypothesis import given, settings
from hypothesis import strategies as st

from kprotocol.coordinator_topics import decode_record, decode_share_state_record, decode_transaction_record, record_types

SHARED = Path(__file__).resolve().parents[2] / "shared"
VECTOR_DIR = SHARED / "vectors"


def _vectors(kinds: tuple[str, ...], names: tuple[str, ...] | None = None) -> list[dict]:
    out = []
    for path in sorted(VECTOR_DIR.glob("*Key.jsonl")) + sorted(VECTOR_DIR.glob("*Value.jsonl")):
        if names is not None and path.stem not in names:
            continue
        for line in path.open():
            vector = json.loads(line)
            if vector["type"] in kinds or names is not None:
                out.append(vector)
    return out


COORDINATOR = _vectors(("coordinator-key", "coordinator-value"))
TRANSACTION = _vectors((), ("TransactionLogKey", "TransactionLogValue"))
SHARE = _vectors((), ("ShareSnapshotKey", "ShareSnapshotValue", "ShareUpdateKey", "ShareUpdateValue"))


def _without_decoded(doc):
    """Drop the `decoded*` keys added next to consumer-protocol bytes: the rest is Kafka's JSON."""
    if isinstance(doc, dict):
        return {k: _without_decoded(v) for k, v in doc.items() if not k.startswith("decoded")}
    if isinstance(doc, list):
        return [_without_decoded(v) for v in doc]
    return doc


def test_every_record_type_has_vectors():
    assert len(COORDINATOR) >= 600
    assert {v["apiKey"] for v in COORDINATOR} == set(record_types())


@pytest.mark.parametrize("vector", COORDINATOR, ids=lambda v: f"{v['name']}-v{v['version']}")
def test_consumer_offsets_vector(vector):
    body = bytes.fromhex(vector["hex"])
    prefix = struct.pack(">h", vector["apiKey"])
    if vector["type"] == "coordinator-key":
        decoded = decode_record(prefix + body, None)
        assert decoded == {"key": {"type": vector["apiKey"], "data": vector["json"]}, "value": None}
    else:
        some_key = prefix + record_types()[vector["apiKey"]].key().encode(0)
        decoded = decode_record(some_key, struct.pack(">h", vector["version"]) + body)
        assert decoded["value"]["version"] == vector["version"]
        assert _without_decoded(decoded["value"]["data"]) == vector["json"]


@pytest.mark.parametrize("vector", TRANSACTION + SHARE, ids=lambda v: f"{v['name']}-v{v['version']}")
def test_transaction_and_share_state_vectors(vector):
    decode = decode_transaction_record if vector["name"].startswith("Transaction") else decode_share_state_record
    body = bytes.fromhex(vector["hex"])
    if vector["name"].endswith("Key"):
        type_id = 1 if vector["name"] == "ShareUpdateKey" else 0
        assert decode(struct.pack(">h", type_id) + body, None)["key"] == {"type": type_id, "data": vector["json"]}
    else:
        type_id = 1 if vector["name"] == "ShareUpdateValue" else 0
        record_type = record_types("__share_group_state" if "Share" in vector["name"] else "__transaction_state")[type_id]
        key = struct.pack(">h", type_id) + record_type.key().encode(record_type.key_version)
        value = decode(key, struct.pack(">h", vector["version"]) + body)["value"]
        # Vectors of a layout the release changed in place decode with the earlier layout, marked so.
        layout = {"layout": EARLIER_LAYOUTS[vector["name"]]} if vector["name"] in EARLIER_LAYOUTS else {}
        assert value == {"version": vector["version"], "data": vector["json"], **layout}


def test_unknown_types_and_versions_keep_their_bytes():
    unknown_type = decode_record(b"\x00\x63abc", b"\x00\x01xyz")
    assert unknown_type == {"key": {"type": 99, "unknown": True, "hex": b"abc".hex()},
                            "value": {"version": 1, "unknown": True, "hex": b"xyz".hex()}}
    key = b"\x00\x01" + record_types()[1].key(group="g", topic="t", partition=0).encode(0)
    unknown_version = decode_record(key, b"\x00\x09\x01\x02")
    assert unknown_version["value"] == {"version": 9, "unknown": True, "hex": "0102"}
    broken = decode_record(b"\x00\x01\x00\x05ab", None)
    assert broken["key"]["type"] == 1 and "error" in broken["key"] and broken["key"]["hex"] == "00056162"


def test_tombstone_has_null_value():
    key = b"\x00\x02" + record_types()[2].key(group="app").encode(0)
    assert decode_record(key, None) == {"key": {"type": 2, "data": {"group": "app"}}, "value": None}


def test_streams_userdata_decoded_in_place():
    lines = (SHARED / "streams-userdata" / "SubscriptionInfo.jsonl").open()
    subscription_hex = next(json.loads(line)["hex"] for line in lines if json.loads(line)["version"] == 11)
    from kprotocol.registry import message_class

    sub = struct.pack(">h", 0) + message_class("ConsumerProtocolSubscription").from_json(
        {"topics": ["in"], "userData": base64.b64encode(bytes.fromhex(subscription_hex)).decode()}, 0).encode(0)
    member = {"memberId": "m", "groupInstanceId": None, "clientId": "c", "clientHost": "/h", "rebalanceTimeout": 1,
              "sessionTimeout": 1, "subscription": base64.b64encode(sub).decode(), "assignment": ""}
    value_cls = record_types()[2].value
    doc = {"protocolType": "consumer", "generation": 1, "protocol": "stream", "leader": "m",
           "currentStateTimestamp": -1, "members": [member]}
    value = struct.pack(">h", 3) + value_cls.from_json(doc, 3).encode(3)
    decoded = decode_record(b"\x00\x02" + record_types()[2].key(group="app").encode(0), value)
    (out,) = decoded["value"]["data"]["members"]
    assert out["subscription"] == member["subscription"]
    assert out["decodedSubscription"]["data"]["streamsUserData"]["version"] == 11
    assert "decodedAssignment" not in out


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.none() | st.binary(max_size=80))
def test_arbitrary_bytes_are_reported_never_raised(key, value):
    decoded = decode_record(key, value)
    assert set(decoded) == {"key", "value"}
    assert "data" in decoded["key"] or "hex" in decoded["key"]
    assert (value is None) == (decoded["value"] is None)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 24), st.integers(0, 4), st.binary(max_size=60))
def test_known_types_with_garbage_bodies_keep_their_hex(type_id, version, garbage):
    decoded = decode_record(struct.pack(">h", type_id) + garbage, struct.pack(">h", version) + garbage)
    for part in (decoded["key"], decoded["value"]):
        assert "data" in part or part["hex"] == garbage.hex()

"""Malformed input: a typed DecodeError with offset and path, quickly, without big allocations."""

from __future__ import annotations

import time
import tracemalloc

import pytest

import kprotocol
from kprotocol.errors import (
    DecodeError,
    InvalidLengthError,
    InvalidValueError,
    TrailingBytesError,
    TruncatedError,
    UnsupportedVersionError,
)
from conftest import SHARED, read_jsonl
from spec_changes import vector_target

SAMPLES = [
    vec
    for path in sorted((SHARED / "vectors").glob("*.jsonl"))
    if path.stem != "RecordBatches"
    for vec in read_jsonl(path)[:2]
]


def test_every_truncation_fails_with_offset_and_path() -> None:
    for vec in SAMPLES:
        cls, version = vector_target(vec)
        raw = bytes.fromhex(vec["hex"])
        for cut in range(0, len(raw), max(1, len(raw) // 64)):
            with pytest.raises(DecodeError) as info:
                cls.decode(raw[:cut], version)
            err = info.value
            assert isinstance(err, ValueError)
            assert err.offset is not None and 0 <= err.offset <= cut
            assert err.path.startswith(cls.__name__)


def test_trailing_bytes() -> None:
    cls = kprotocol.message_class("HeartbeatRequest")
    raw = cls(group_id="g", generation_id=1, member_id="m").encode(0)
    with pytest.raises(TrailingBytesError) as info:
        cls.decode(raw + b"\0", 0)
    assert info.value.offset == len(raw)


def _timed_alloc(fn) -> tuple[float, int]:
    tracemalloc.start()
    start = time.perf_counter()
    try:
        fn()
    finally:
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return elapsed, peak


@pytest.mark.parametrize(
    "name,version,data,path",
    [
        ("MetadataResponse", 0, b"\x7f\xff\xff\xff", "MetadataResponse.brokers"),
        ("MetadataResponse", 9, b"\0\0\0\0" + b"\xff\xff\xff\xff\x0f", "MetadataResponse.brokers"),
        ("JoinGroupResponse", 0, b"\0\0\0\0\0\0\x7f\xff" + b"x" * 10, "JoinGroupResponse.protocol_name"),
        ("ProduceRequest", 3, b"\xff\xff\0\x01\0\0\0\x01\x7f\xff\xff\xff", "ProduceRequest.topic_data"),
        ("SaslAuthenticateRequest", 0, b"\x7f\xff\xff\xff" + b"a" * 100, "SaslAuthenticateRequest.auth_bytes"),
    ],
)
def test_hostile_lengths_fail_fast_without_allocating(name, version, data, path) -> None:
    cls = kprotocol.message_class(name)
    box = {}

    def run():
        with pytest.raises(DecodeError) as info:
            cls.decode(data, version)
        box["err"] = info.value

    elapsed, peak = _timed_alloc(run)
    assert isinstance(box["err"], (InvalidLengthError, TruncatedError))
    assert box["err"].path.startswith(path)
    assert elapsed < 0.5
    assert peak < 64 * 1024


def test_invalid_utf8() -> None:
    with pytest.raises(InvalidValueError) as info:
        kprotocol.message_class("FindCoordinatorRequest").decode(b"\0\x02\xff\xfe", 0)
    assert info.value.path == "FindCoordinatorRequest.key"
    assert info.value.offset == 2


@pytest.mark.parametrize("varint", [b"\x80\x80\x80\x80\x80\x01", b"\x81\x00", b"\xff\xff\xff\xff\x7f"])
def test_bad_varints(varint: bytes) -> None:
    # FindCoordinatorRequest v3 is flexible: its key is a compact string with a varint length.
    with pytest.raises(InvalidValueError):
        kprotocol.message_class("FindCoordinatorRequest").decode(varint + b"a" * 40, 3)


def test_non_canonical_bool_and_null_are_refused() -> None:
    cls = kprotocol.message_class("MetadataRequest")
    ok = cls(topics=(), allow_auto_topic_creation=True).encode(4)
    assert ok[-1] == 1
    with pytest.raises(InvalidValueError):
        cls.decode(ok[:-1] + b"\x02", 4)
    with pytest.raises(InvalidValueError) as info:
        kprotocol.message_class("HeartbeatRequest").decode(b"\xff\xff" + b"\0" * 8, 0)
    assert info.value.path == "HeartbeatRequest.group_id"


def test_unknown_version() -> None:
    with pytest.raises(UnsupportedVersionError):
        kprotocol.message_class("JoinGroupRequest").decode(b"", 99)
    with pytest.raises(ValueError):
        kprotocol.message_class("JoinGroupRequest")().encode(99)


def test_unknown_tagged_fields_survive_a_round_trip() -> None:
    cls = kprotocol.message_class("HeartbeatResponse")
    raw = bytes.fromhex("00000000" "0000" "02" "05" "02" "abcd" "2a" "00")
    msg = cls.decode(raw, 4)
    assert msg.unknown_tagged_fields == ((5, b"\xab\xcd"), (42, b""))
    assert msg.encode(4) == raw


def test_tags_out_of_order_are_refused() -> None:
    raw = bytes.fromhex("00000000" "0000" "02" "2a" "00" "05" "00")
    with pytest.raises(InvalidValueError):
        kprotocol.message_class("HeartbeatResponse").decode(raw, 4)


def test_hostile_objects_cannot_crash_the_compiled_encoder() -> None:
    """A list element whose __index__ empties the list while the compiled encoder walks it: the
    encoder iterates its own copy, so no element is read after it is freed (run apart: a crash
    must fail this test, not the test run)."""
    import subprocess
    import sys

    script = """
import gc
import kprotocol
from kprotocol.runtime import accel
assert accel.ENABLED
cls = kprotocol.message_class("MetadataResponse")
Broker = cls.MetadataResponseBroker
brokers = []

class Evil:
    def __index__(self):
        brokers.clear()
        gc.collect()
        junk.extend(("y" * 64, (i, i)) for i in range(20000))  # reuse the freed memory
        return 9092

junk = []

brokers.extend([Broker(node_id=0, host="h" * 64, port=Evil())] +
               [Broker(node_id=i, host=("x" * 64) + str(i), port=1) for i in range(1, 200)])
# Constructors store tuples; a hostile caller can still build the tuple-backed message around a list.
slots = list(cls(brokers=[], topics=[]))
slots[[f.name for f in cls._spec].index("brokers")] = brokers
message = tuple.__new__(cls, slots)
del Broker
data = message.encode(12)
assert len(cls.decode(data, 12).brokers) == 200  # the brokers as they were when encoding started
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])

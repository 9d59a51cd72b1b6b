"""The compiled decode plans (kprotocol/_speedups.c): tagged fields without the Python fallback,
the same values and errors as the Python decoders on every shape of tagged section, and decoded
structs of plain values left out of the cyclic collector."""

from __future__ import annotations

import gc
import sys
import uuid

import pytest

import kprotocol
from kprotocol.errors import DecodeError
from kprotocol.runtime import accel, pure

pytestmark = pytest.mark.skipif(not accel.ENABLED, reason="the compiled path is not built")
M = kprotocol.message_class


def _api_versions() -> kprotocol.runtime.struct.Message:
    cls = M("ApiVersionsResponse")
    keys, supported, finalized = (next(f.struct for f in cls._spec if f.name == n)
                                  for n in ("api_keys", "supported_features", "finalized_features"))
    return cls(error_code=0, throttle_time_ms=3,
               api_keys=tuple(keys(api_key=k, min_version=0, max_version=k % 9) for k in range(60)),
               supported_features=(supported(name="metadata.version", min_version=1, max_version=27),),
               finalized_features_epoch=77,
               finalized_features=(finalized(name="metadata.version", max_version_level=27, min_version_level=27),),
               zk_migration_ready=True)


def _python_decoders_run(cls: type, raw: bytes, version: int) -> list[str]:
    """The generated Python decoders that ran while `cls.decode` decoded `raw`."""
    calls: list[str] = []

    def profile(frame, event, arg) -> None:  # noqa: ANN001
        if event == "call" and frame.f_code.co_name.startswith("_d_"):
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        cls.decode(raw, version)
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("version", [3, 4])
def test_tagged_fields_are_read_by_the_compiled_plan(version: int) -> None:
    message = _api_versions()
    raw = message.encode(version)
    assert type(message).decode(raw, version) == message == pure.decode(type(message), raw, version)
    assert _python_decoders_run(type(message), raw, version) == []  # was the whole message in Python


def _tagged_section(raw: bytes, tags: list[tuple[int, bytes]]) -> bytes:
    """`raw` (an ApiVersionsResponse v3 whose tagged section is its last byte, empty) with `tags` instead."""
    def uvarint(n: int) -> bytes:
        out = bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))
    assert raw[-1] == 0
    return raw[:-1] + uvarint(len(tags)) + b"".join(uvarint(t) + uvarint(len(d)) + d for t, d in tags)


EPOCH = (1, (123).to_bytes(8, "big"))
DEFAULT_EPOCH = (1, (-1).to_bytes(8, "big", signed=True))
READY = (3, b"\x01")
UNKNOWN = [(2, b"\x01"), (9, b"xyz"), (200, b"")]


@pytest.mark.parametrize("tags", [
    [EPOCH], [READY], [EPOCH, READY], [EPOCH, (2, b"\x00"), READY, (9, b"xyz")], [(9, b"xyz"), (200, b"")],
    [EPOCH, (9, b"xyz"), READY],           # out of order
    [DEFAULT_EPOCH],                       # a known tag holding its default: kept as unknown bytes
    [READY, EPOCH],                        # out of order
    [(1, b"\x00" * 7)], [(1, b"\x00" * 9)],  # a value shorter or longer than its tag says
    [(3, b"\x02")],                        # not a boolean
    [(0, b"\x02\x05abcd\x00\x01\x00\x02\x00")],  # supported features: one feature
    [(0, b"\x02\x05abcd\x00\x01\x00\x02")],      # ... cut short inside its tag
    [EPOCH, EPOCH],                        # repeated
], ids=lambda tags: "-".join(f"{t}:{d.hex()}" for t, d in tags) or "none")
def test_every_tagged_section_decodes_as_the_python_decoder_does(tags: list[tuple[int, bytes]]) -> None:
    cls = M("ApiVersionsResponse")
    base = cls(api_keys=(next(f.struct for f in cls._spec if f.name == "api_keys")(api_key=18, max_version=4),))
    raw = _tagged_section(base.encode(3), tags)
    try:
        expected = pure.decode(cls, raw, 3)
    except DecodeError as exc:
        with pytest.raises(DecodeError) as info:
            cls.decode(raw, 3)
        assert (type(info.value), info.value.offset) == (type(exc), exc.offset)
        assert str(info.value).replace("at ApiVersionsResponse.", "at ") == str(exc)  # the message API names its class
        return
    decoded = cls.decode(raw, 3)
    assert decoded == expected and decoded.encode(3) == raw


def test_unknown_tags_come_back_as_their_bytes() -> None:
    cls = M("ApiVersionsResponse")
    raw = _tagged_section(cls().encode(3), [EPOCH, *UNKNOWN[1:]])
    decoded = cls.decode(raw, 3)
    assert decoded.finalized_features_epoch == 123
    assert decoded.unknown_tagged_fields == ((9, b"xyz"), (200, b""))
    assert _python_decoders_run(cls, raw, 3) == []


def test_decoded_structs_are_left_out_of_the_collector() -> None:
    """Decoded values are immutable trees (nothing in them can refer back): the collector never
    traverses them, which made a message of many small structs cost a collection per 700 of them."""
    cls = M("MetadataResponse")
    topic = cls._spec[4].struct
    partition = topic._spec[4].struct
    message = cls(topics=(topic(name="t", topic_id=uuid.UUID(int=5), partitions=tuple(
        partition(partition_index=i, replica_nodes=(1, 2), isr_nodes=(1,)) for i in range(3))),))
    decoded = cls.decode(message.encode(12), 12)
    assert decoded == message
    first = decoded.topics[0].partitions[0]
    assert not any(map(gc.is_tracked, (decoded, decoded.topics, decoded.topics[0], decoded.topics[0].partitions,
                                       first, first.replica_nodes)))
    gc.collect()
    assert decoded == message and sys.getrefcount(first) >= 2


@pytest.mark.parametrize("value", [0, 1, 0x1234 << 100, (1 << 128) - 1, 0x0F3C_9A21_77E4_4B1D_8C5A_D2E6_1B90_4F37])
def test_uuids_built_without_their_init_are_the_same_uuids(value: int) -> None:
    cls = M("MetadataResponse")
    topic = cls._spec[4].struct
    expected = uuid.UUID(int=value)
    decoded = cls.decode(cls(topics=(topic(name="t", topic_id=expected),)).encode(12), 12).topics[0].topic_id
    assert type(decoded) is uuid.UUID and decoded == expected and decoded.is_safe is uuid.SafeUUID.unknown
    assert (str(decoded), repr(decoded), hash(decoded), decoded.bytes) == (
        str(expected), repr(expected), hash(expected), expected.bytes)
    if not value:
        from kprotocol.runtime.primitives import ZERO_UUID
        assert decoded is ZERO_UUID

"""Hypothesis round trips for every spec and every version."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import kprotocol
from kprotocol.errors import DecodeError
from kprotocol.fuzz.strategies import messages
from kprotocol.runtime import pure

SPEC_VERSIONS = [
    (name, version)
    for name in kprotocol.spec_names()
    for version in range(kprotocol.message_class(name).valid_versions[0],
                         kprotocol.message_class(name).valid_versions[1] + 1)
]


@pytest.mark.parametrize("name,version", SPEC_VERSIONS, ids=[f"{n}-v{v}" for n, v in SPEC_VERSIONS])
def test_round_trip(name: str, version: int) -> None:
    cls = kprotocol.message_class(name)

    @given(messages(cls, version))
    @settings(max_examples=max(5, settings().max_examples // 3))
    def check(msg) -> None:
        data = msg.encode(version)
        assert pure.encode(msg, version) == data
        assert cls.decode(data, version) == msg
        assert pure.decode(cls, data, version) == msg
        doc = msg.to_json(version)  # JSON cannot carry unknown tagged fields; everything else survives
        assert cls.from_json(doc, version).to_json(version) == doc

    check()


@pytest.mark.parametrize("name", kprotocol.spec_names())
def test_bytes_that_decode_reencode_exactly(name: str) -> None:
    """Valid encodings with random damage: whatever still decodes must re-encode to the same bytes."""
    cls = kprotocol.message_class(name)
    lo, hi = cls.valid_versions

    @given(st.integers(lo, hi).flatmap(lambda v: st.tuples(st.just(v), messages(cls, v))), st.data())
    def check(case, data) -> None:
        version, msg = case
        raw = bytearray(msg.encode(version))
        for _ in range(data.draw(st.integers(0, 3))):
            if raw:
                raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        raw += data.draw(st.binary(max_size=2))
        raw = bytes(raw)
        try:
            expected = pure.decode(cls, raw, version)
        except DecodeError as exc:
            with pytest.raises(DecodeError) as info:
                cls.decode(raw, version)
            assert (type(info.value), info.value.offset) == (type(exc), exc.offset)
            return
        decoded = cls.decode(raw, version)
        assert decoded == expected
        assert decoded.encode(version) == raw

    check()

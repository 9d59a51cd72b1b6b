"""Wire primitives: varints (unsigned and zig-zag), their limits and their canonical form."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from kprotocol.errors import InvalidValueError, TruncatedError
from kprotocol.runtime.primitives import (
    read_uvarint,
    read_uvarlong,
    read_varint,
    read_varlong,
    uvarint,
    varint,
    varlong,
)


@pytest.mark.parametrize(
    "value,encoded",
    [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (64, "8001"), (2**31 - 1, "feffffff0f"),
     (-(2**31), "ffffffff0f")],
)
def test_zigzag_varint_matches_kafka(value: int, encoded: str) -> None:
    assert varint(value).hex() == encoded
    assert read_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_varlong_extremes() -> None:
    for value in (2**63 - 1, -(2**63)):
        data = varlong(value)
        assert len(data) == 10
        assert read_varlong(data, 0) == (value, 10)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    assert read_varint(varint(value), 0) == (value, len(varint(value)))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    assert read_varlong(varlong(value), 0)[0] == value


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trip(value: int) -> None:
    assert read_uvarint(uvarint(value), 0) == (value, len(uvarint(value)))


@pytest.mark.parametrize("data", ["80", "ffffffff"])
def test_truncated_varints(data: str) -> None:
    with pytest.raises(TruncatedError):
        read_uvarint(bytes.fromhex(data), 0)


@pytest.mark.parametrize("data", ["8000", "ffffffffff01", "ffffffff1f"])
def test_invalid_varints(data: str) -> None:
    with pytest.raises(InvalidValueError):
        read_uvarint(bytes.fromhex(data), 0)


def test_varlong_longer_than_ten_bytes() -> None:
    with pytest.raises(InvalidValueError):
        read_uvarlong(b"\xff" * 10 + b"\x01", 0)

"""Malformed SubscriptionInfo/AssignmentInfo bytes: typed errors with offset and field, fast, bounded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kprotocol.errors import DecodeError, InvalidLengthError, InvalidValueError, TruncatedError
from kprotocol.streams import AssignmentInfo, SubscriptionInfo

DATA = Path(__file__).resolve().parents[2] / "shared" / "streams-userdata"
CLASSES = {"SubscriptionInfo": SubscriptionInfo, "AssignmentInfo": AssignmentInfo}


def _largest_per_version(limit: int = 600) -> list:
    """For each format and version, the longest vector under `limit` bytes: every prefix is truncated input."""
    cases = []
    for kind, cls in CLASSES.items():
        best: dict[int, dict] = {}
        for line in (DATA / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if len(best.get(row["version"], {"hex": ""})["hex"]) < len(row["hex"]) <= 2 * limit:
                best[row["version"]] = row
        cases += [pytest.param(cls, bytes.fromhex(r["hex"]), id=f"{kind}-v{v}") for v, r in sorted(best.items())]
    return cases


@pytest.mark.parametrize(("cls", "data"), _largest_per_version())
def test_truncation_at_every_offset_is_a_decode_error(cls: type, data: bytes) -> None:
    start = time.perf_counter()
    for end in range(len(data)):
        with pytest.raises(DecodeError) as caught:
            cls.decode(data[:end])
        assert caught.value.offset is not None and 0 <= caught.value.offset <= end
        assert caught.value.path
    assert (time.perf_counter() - start) / len(data) < 0.01


@pytest.mark.parametrize(
    ("cls", "hex_data", "error", "offset", "path"),
    [
        (SubscriptionInfo, "00000001" + "00" * 16 + "7fffffff", InvalidLengthError, 20, "prev_tasks"),
        (SubscriptionInfo, "00000001" + "00" * 16 + "ffffffff", InvalidLengthError, 20, "prev_tasks"),
        (SubscriptionInfo, "0000000b0000000b" + "00" * 16 + "ffffffff", InvalidLengthError, 24, "user_end_point"),
        (SubscriptionInfo, "0000000b0000000b" + "00" * 16 + "7fffffff", TruncatedError, 28, "user_end_point"),
        (
            SubscriptionInfo,
            "0000000b0000000b" + "00" * 16 + "00000000" + "00000001" + "00" * 16 + "0005",
            TruncatedError,
            50,
            "task_offset_sums[0].named_topology",
        ),
        (
            SubscriptionInfo,
            "0000000700000007" + "00" * 16 + "00000000" + "40000000",
            InvalidLengthError,
            28,
            "task_offset_sums",
        ),
        (AssignmentInfo, "0000000b0000000b7fffffff", InvalidLengthError, 8, "active_tasks"),
        (AssignmentInfo, "0000000b0000000bffffffff", InvalidLengthError, 8, "active_tasks"),
        (
            AssignmentInfo,
            "0000000b0000000b00000001000000000000000000000fff",
            TruncatedError,
            24,
            "active_tasks[0].named_topology",
        ),
        (
            AssignmentInfo,
            "0000000200000000000000010000000000000000000000010004f09f98800000000000000000",
            InvalidValueError,
            26,
            "standby_tasks[0].partitions[0].topic",
        ),
        (
            AssignmentInfo,
            "0000000300000003" + "00" * 8 + "00000001ffff" + "00" * 8,
            TruncatedError,
            22,
            "partitions_by_host[0].host",
        ),
    ],
)
def test_malformed_input_names_offset_and_field(
    cls: type, hex_data: str, error: type, offset: int, path: str
) -> None:
    with pytest.raises(error) as caught:
        cls.decode(bytes.fromhex(hex_data))
    assert (caught.value.offset, caught.value.path) == (offset, path)


def test_hostile_counts_allocate_nothing_and_fail_fast() -> None:
    """Nested maximal counts: each is refused against the remaining bytes before any element is read."""
    data = bytes.fromhex("0000000b0000000b" + "00000000" + "7fffffff" + "00" * 64)
    start = time.perf_counter()
    for _ in range(200):
        with pytest.raises(InvalidLengthError):
            AssignmentInfo.decode(data)
    assert time.perf_counter() - start < 1.0


def test_version_errors_name_the_header_field() -> None:
    with pytest.raises(DecodeError) as caught:
        AssignmentInfo.decode(bytes.fromhex("0000000c0000000b"))
    assert (caught.value.offset, caught.value.path) == (0, "version")
    with pytest.raises(DecodeError) as caught:
        SubscriptionInfo.decode(bytes.fromhex("0000000c0000000b"))
    assert (caught.value.offset, caught.value.path) == (4, "latest_supported_version")
    with pytest.raises(TruncatedError):
        SubscriptionInfo.decode(b"\0\0\0")

"""Hypothesis round trips of SubscriptionInfo/AssignmentInfo for every version, lossy rules included."""

from __future__ import annotations

import dataclasses
import uuid

from hypothesis import given
from hypothesis import strategies as st

from kprotocol.errors import DecodeError
from kprotocol.streams import AssignmentInfo, HostInfo, SubscriptionInfo, TaskId, TaskOffsetSum, TopicPartition
from kprotocol.streams.layouts import ASSIGNMENT, SUBSCRIPTION
from kprotocol.streams.primitives import Input

INT8 = st.integers(-(2**7), 2**7 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
OFFSETS = st.one_of(st.sampled_from([-3, -2, -1, 0]), INT64)
TEXT = st.text(max_size=12)


def tasks(named: bool) -> st.SearchStrategy[TaskId]:
    names = st.one_of(st.none(), st.text(min_size=1, max_size=8)) if named else st.none()
    return st.builds(TaskId, INT32, INT32, names)


def subscription_versions(version: int) -> st.SearchStrategy[SubscriptionInfo]:
    latest = st.integers(version, 2**31 - 1)
    return st.builds(
        SubscriptionInfo,
        st.just(version),
        latest,
        st.integers(0, 2**128 - 1).map(lambda n: uuid.UUID(int=n)),
        st.lists(st.builds(TaskOffsetSum, tasks(version >= 10), OFFSETS), max_size=8).map(tuple),
        st.one_of(st.none(), TEXT),
        INT8,
        INT32,
        st.lists(st.tuples(TEXT, TEXT), max_size=3).map(tuple),
    )


def expected_subscription(info: SubscriptionInfo) -> SubscriptionInfo:
    """What survives encoding at `info.version` (LAYOUT.md's lossy rules)."""
    v = info.version
    sums = info.task_offset_sums
    if v <= 6:  # tasks only: -2 into prevTasks, the rest into standbyTasks (offset lost)
        sums = tuple(s for s in sums if s.offset_sum == -2) + tuple(
            TaskOffsetSum(s.task, -3) for s in sums if s.offset_sum != -2
        )
    return SubscriptionInfo(
        version=v,
        latest_supported_version=info.latest_supported_version if v >= 3 else -1,
        process_id=info.process_id,
        task_offset_sums=sums,
        user_end_point=(info.user_end_point or None) if v >= 2 else None,
        unique_field=info.unique_field if v >= 8 else 0,
        error_code=info.error_code if v >= 9 else 0,
        client_tags=info.client_tags if v >= 11 else (),
    )


TPS = st.lists(st.builds(TopicPartition, TEXT, INT32), max_size=4).map(tuple)
HOST_MAP = st.lists(st.tuples(st.builds(HostInfo, TEXT, INT32), TPS), max_size=4).map(tuple)


def assignment_versions(version: int) -> st.SearchStrategy[AssignmentInfo]:
    task = tasks(version >= 10)
    return st.builds(
        AssignmentInfo,
        st.just(version),
        INT32,
        st.lists(task, max_size=6).map(tuple),
        st.lists(st.tuples(task, TPS), max_size=4).map(tuple),
        HOST_MAP,
        HOST_MAP,
        INT32,
        INT64,
    )


def expected_assignment(info: AssignmentInfo) -> AssignmentInfo:
    v = info.version
    return dataclasses.replace(
        info,
        commonly_supported_version=info.commonly_supported_version if v >= 3 else -1,
        partitions_by_host=info.partitions_by_host if v >= 2 else (),
        standby_partitions_by_host=info.standby_partitions_by_host if v >= 6 else (),
        err_code=info.err_code if v >= 4 else 0,
        next_rebalance_ms=info.next_rebalance_ms if v >= 7 else 2**63 - 1,
    )


def _check_layouts_agree(layout, data: bytes) -> None:
    """The compiled layout and the interpreted declaration read and write the same."""
    compiled = layout.compiled.parse_stream(Input(data))
    assert compiled == layout.declaration.parse_stream(Input(data))
    assert layout.compiled.build(compiled) == layout.declaration.build(compiled) == data


def _subscription_round_trip(info: SubscriptionInfo) -> None:
    data = info.encode()
    decoded = SubscriptionInfo.decode(data)
    assert decoded == expected_subscription(info)
    assert decoded.encode() == data
    _check_layouts_agree(SUBSCRIPTION[info.version], data)


def _assignment_round_trip(info: AssignmentInfo) -> None:
    data = info.encode()
    decoded = AssignmentInfo.decode(data)
    assert dataclasses.replace(decoded, topic_dictionary=None) == expected_assignment(info)
    assert decoded.encode() == data
    _check_layouts_agree(ASSIGNMENT[info.version], data)


@given(st.integers(1, 11).flatmap(subscription_versions))
def test_subscription_round_trip(info: SubscriptionInfo) -> None:
    _subscription_round_trip(info)


@given(st.integers(1, 11).flatmap(assignment_versions))
def test_assignment_round_trip(info: AssignmentInfo) -> None:
    _assignment_round_trip(info)


def test_every_version_round_trips() -> None:
    """Each version at least once, with every field set (the strategies above pick versions at random)."""
    sums = (TaskOffsetSum(TaskId(0, 1), -2), TaskOffsetSum(TaskId(2, 3), 77), TaskOffsetSum(TaskId(0, 2), -3))
    for version in range(1, 12):
        _subscription_round_trip(
            SubscriptionInfo(version, 11, uuid.UUID(int=5), sums, "h:1", -4, 9, (("az", "é\0😀"),))
        )
        tps = (TopicPartition("t\0😀", 1), TopicPartition("u", -1))
        hosts = ((HostInfo("h😀", 1), tps), (HostInfo("", -1), ()))
        named = TaskId(1, 2, "topo🚀") if version >= 10 else TaskId(1, 2)
        _assignment_round_trip(
            AssignmentInfo(version, 11, (named, TaskId(0, 0), named), ((named, tps),), hosts, hosts[:1], 3, 42)
        )


def test_v7_to_9_group_consecutive_subtopologies_in_given_order() -> None:
    sums = [TaskOffsetSum(TaskId(1, 0), 5), TaskOffsetSum(TaskId(0, 0), -2), TaskOffsetSum(TaskId(1, 1), 6)]
    data = SubscriptionInfo(7, 11, task_offset_sums=sums).encode()
    groups = SUBSCRIPTION[7].declaration.parse_stream(Input(data))["task_offset_sums"]
    assert groups == [(1, [(0, 5)]), (0, [(0, -2)]), (1, [(1, 6)])]
    assert SubscriptionInfo.decode(data).task_offset_sums == tuple(sums)


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    for cls in (SubscriptionInfo, AssignmentInfo):
        try:
            info = cls.decode(data)
        except DecodeError:
            continue
        info.to_fields()

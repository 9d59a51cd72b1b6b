"""Kafka's own SubscriptionInfo/AssignmentInfo bytes: decode, re-encode, and encode from wire order."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from kprotocol.errors import DecodeError, EncodeError
from kprotocol.streams import AssignmentInfo, HostInfo, SubscriptionInfo, TaskId, TaskOffsetSum, TopicPartition
from kprotocol.streams.errors import InvalidVersionError, NamedTopologyError, StringTooLongError
from kprotocol.streams.subscription import DuplicateClientTagError

DATA = Path(__file__).resolve().parents[2] / "shared" / "streams-userdata"
CLASSES = {"SubscriptionInfo": SubscriptionInfo, "AssignmentInfo": AssignmentInfo}


def _rows(name: str) -> list[dict]:
    with (DATA / name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _cases(suffix: str) -> list:
    return [
        pytest.param(CLASSES[kind], row, id=f"{kind}-v{row.get('version')}-{row['name']}")
        for kind in CLASSES
        for row in _rows(f"{kind}{suffix}")
    ]


def subscription_from_wire(row: dict) -> SubscriptionInfo:
    """A SubscriptionInfo built from plain values in the vector's `wire` order."""
    fields, wire, version = row["fields"], row["wire"], row["version"]
    if version <= 6:
        sums = [TaskOffsetSum(TaskId(s, p), -2) for s, p in wire["prevTasks"]]
        sums += [TaskOffsetSum(TaskId(s, p), -3) for s, p in wire["standbyTasks"]]
    elif version <= 9:
        sums = [TaskOffsetSum(TaskId(g, p), o) for g, parts in wire["taskOffsetSums"] for p, o in parts]
    else:
        sums = [TaskOffsetSum(TaskId(g, p, name), o) for g, p, o, name in wire["taskOffsetSums"]]
    return SubscriptionInfo(
        version=version,
        latest_supported_version=row["constructorLatestSupportedVersion"],
        process_id=uuid.UUID(fields["processId"]),
        task_offset_sums=sums,
        user_end_point=fields["userEndPoint"],
        unique_field=fields["uniqueField"],
        error_code=fields["errorCode"],
        client_tags=[tuple(tag) for tag in wire.get("clientTags", [])],
    )


def assignment_from_wire(row: dict) -> AssignmentInfo:
    """An AssignmentInfo built from plain values in the vector's `wire` order."""
    fields, wire, version = row["fields"], row["wire"], row["version"]
    topics = dict(wire.get("topicDictionary", []))

    def host_map(key: str) -> list:
        if version >= 5:  # partitions refer to dictionary indexes
            return [(HostInfo(h, p), [(topics.get(i), q) for i, q in refs]) for h, p, refs in wire.get(key, [])]
        return [(HostInfo(h, p), tps) for h, p, tps in wire.get(key, [])]

    return AssignmentInfo(
        version=version,
        commonly_supported_version=row["constructorCommonlySupportedVersion"],
        active_tasks=[TaskId.parse(t) for t in wire["activeTasks"]],
        standby_tasks=[(TaskId.parse(t), [TopicPartition(*tp) for tp in tps]) for t, tps in wire["standbyTasks"]],
        partitions_by_host=host_map("partitionsByHost"),
        standby_partitions_by_host=host_map("standbyPartitionsByHost"),
        err_code=fields["errCode"],
        next_rebalance_ms=fields["nextRebalanceMs"],
        topic_dictionary=[tuple(e) for e in wire["topicDictionary"]] if "topicDictionary" in wire else None,
    )


@pytest.mark.parametrize(("cls", "row"), _cases(".jsonl"))
def test_vector_decodes_and_reencodes(cls: type, row: dict) -> None:
    data = bytes.fromhex(row["hex"])
    info = cls.decode(data)
    assert info.to_fields() == row["fields"]
    assert info.version == row["version"]
    latest = info.latest_supported_version if cls is SubscriptionInfo else info.commonly_supported_version
    assert latest == row["latestSupportedVersion"]
    assert info.encode() == data
    assert cls.decode(info.encode()) == info


@pytest.mark.parametrize(("cls", "row"), _cases(".jsonl"))
def test_vector_encodes_from_wire_order(cls: type, row: dict) -> None:
    build = subscription_from_wire if cls is SubscriptionInfo else assignment_from_wire
    assert build(row).encode().hex() == row["hex"]


def _encode_error_case(cls: type, row: dict) -> None:
    """Rebuild a hexless encode-error record from its name (the inputs are not in the file)."""
    name, version = row["name"], row["version"]
    named = TaskId(0, 0, "topo")
    if cls is SubscriptionInfo:
        latest = row.get("constructorLatestSupportedVersion", 11)
        if "named topology" in name:
            with pytest.raises(NamedTopologyError):
                SubscriptionInfo(version, latest, task_offset_sums=[TaskOffsetSum(named, -2)])
        elif row["stage"] == "encode":
            info = SubscriptionInfo(version, latest)
            with pytest.raises(InvalidVersionError):
                info.encode()
        else:
            with pytest.raises(InvalidVersionError):
                SubscriptionInfo(version, latest)
    elif "named topology" in name:
        info = AssignmentInfo(version, active_tasks=[named])  # Kafka refuses it when encoding
        with pytest.raises(NamedTopologyError):
            info.encode()
    elif "longer than 65535" in name:
        info = AssignmentInfo(version, standby_tasks=[(TaskId(0, 0), [TopicPartition("x" * 70000, 0)])])
        with pytest.raises(StringTooLongError):
            info.encode()
    else:
        with pytest.raises(InvalidVersionError):
            AssignmentInfo(version)


@pytest.mark.parametrize(("cls", "row"), _cases(".edges.jsonl"))
def test_edge_record_outcome(cls: type, row: dict) -> None:
    if "hex" not in row:
        _encode_error_case(cls, row)
        return
    data = bytes.fromhex(row["hex"])
    if row["outcome"] == "error" and row["stage"] == "decode":
        with pytest.raises(DecodeError) as caught:
            cls.decode(data)
        assert caught.value.offset is not None
        assert caught.value.path
        return
    info = cls.decode(data)
    assert info.version == row["version"]
    if row["outcome"] == "error":  # the getter stage: a duplicate client tag key
        assert row["stage"] == "getter"
        with pytest.raises(DuplicateClientTagError):
            info.to_fields()
        return
    if "fields" in row:
        assert info.to_fields() == row["fields"]
    latest = info.latest_supported_version if cls is SubscriptionInfo else info.commonly_supported_version
    assert latest == row["latestSupportedVersion"]


def test_encode_errors_are_typed() -> None:
    for error in (InvalidVersionError, NamedTopologyError, StringTooLongError):
        assert issubclass(error, EncodeError)


@pytest.mark.parametrize(
    "row",
    [pytest.param(r, id=f"{r['format']}-{r['decoderRelease'].split()[0]}-v{r['encodedVersion']}-{i}")
     for i, r in enumerate(_rows("VersionProbing.jsonl"))],
)
def test_version_probing(row: dict) -> None:
    cls = CLASSES[row["format"]]
    data = bytes.fromhex(row["hex"])
    supported = row["decoderLatestSupportedVersion"]
    if row["outcome"] == "error":
        with pytest.raises(DecodeError):
            cls.decode(data, supported_version=supported)
        return
    info = cls.decode(data, supported_version=supported)
    assert info.version == row["decodedVersion"]
    assert info.latest_supported_version == row["decodedLatestSupportedVersion"]
    if row.get("otherFieldsEmpty"):
        assert info == SubscriptionInfo(info.version, info.latest_supported_version)


def test_plain_values_build_the_same_bytes() -> None:
    """Bare tuples/lists in place of the value types encode exactly like the value types."""
    typed = AssignmentInfo(
        10,
        active_tasks=(TaskId(0, 1), TaskId(2, 3, "x")),
        standby_tasks=((TaskId(1, 1), (TopicPartition("t", 1),)),),
        partitions_by_host=((HostInfo("h", 1), (TopicPartition("t", 0),)),),
    )
    plain = AssignmentInfo(
        10,
        active_tasks=((0, 1), (2, 3, "x")),
        standby_tasks=(((1, 1), (("t", 1),)),),
        partitions_by_host=[(("h", 1), [("t", 0)])],
    )
    assert plain == typed and plain.encode() == typed.encode()
    sums = SubscriptionInfo(10, task_offset_sums=(((0, 1, "n"), 5),))
    assert sums.task_offset_sums == (TaskOffsetSum(TaskId(0, 1, "n"), 5),)
    assert SubscriptionInfo.decode(sums.encode()) == sums

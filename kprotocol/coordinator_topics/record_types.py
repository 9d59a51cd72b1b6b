"""Which spec decodes each record type of the three coordinator topics.

`__consumer_offsets` types come from the coordinator-key/-value specs' api keys. The
`__transaction_state` and `__share_group_state` specs are older "data" specs whose key
prefix is a version; it plays the role of the record type there, so they get small tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from kprotocol.registry import coordinator_classes, message_class
from kprotocol.runtime.struct import Message

CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
SHARE_GROUP_STATE = "__share_group_state"
TOPICS = (CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE)


@dataclass(frozen=True, slots=True)
class RecordType:
    type_id: int
    key: type[Message]
    value: type[Message]
    key_version: int


# Records of the other coordinator topics: their record types overlap __consumer_offsets' numbers.
OTHER_TOPICS = frozenset({"TransactionLogKey", "TransactionLogValue", "ShareSnapshotKey", "ShareSnapshotValue",
                          "ShareUpdateKey", "ShareUpdateValue"})


@cache
def record_types(topic: str = CONSUMER_OFFSETS) -> dict[int, RecordType]:
    """Record type id -> key and value classes of `topic`."""
    if topic == CONSUMER_OFFSETS:
        keys, values = coordinator_classes("coordinator-key", OTHER_TOPICS), \
            coordinator_classes("coordinator-value", OTHER_TOPICS)
        return {t: RecordType(t, keys[t], values[t], keys[t].valid_versions[0]) for t in sorted(keys) if t in values}
    if topic == TRANSACTION_STATE:
        return {0: RecordType(0, message_class("TransactionLogKey"), message_class("TransactionLogValue"), 0)}
    if topic == SHARE_GROUP_STATE:
        return {
            0: RecordType(0, message_class("ShareSnapshotKey"), message_class("ShareSnapshotValue"), 0),
            1: RecordType(1, message_class("ShareUpdateKey"), message_class("ShareUpdateValue"),
                          message_class("ShareUpdateKey").valid_versions[0]),
        }
    raise ValueError(f"unknown coordinator topic {topic!r}; expected one of {', '.join(TOPICS)}")


@cache
def type_names(topic: str = CONSUMER_OFFSETS) -> dict[int, str]:
    """Record type id -> its name (`GroupMetadata`, `StreamsGroupTopology`...): the key spec without `Key`."""
    return {t: r.key.__name__.removesuffix("Key") for t, r in record_types(topic).items()}

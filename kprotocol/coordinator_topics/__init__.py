"""Coordinator records of `__consumer_offsets`, `__transaction_state` and `__share_group_state`,
and the group state they add up to.

    from kprotocol.coordinator_topics import decode_record
    decode_record(key, value)  # {"key": {"type": 1, "data": {...}}, "value": {"version": 3, "data": {...}}}
"""

from __future__ import annotations

from kprotocol.coordinator_topics.decode import decode_record, decode_share_state_record, decode_transaction_record
from kprotocol.coordinator_topics.record_types import (
    CONSUMER_OFFSETS,
    SHARE_GROUP_STATE,
    TRANSACTION_STATE,
    record_types,
    type_names,
)

__all__ = [
    "CONSUMER_OFFSETS",
    "SHARE_GROUP_STATE",
    "TRANSACTION_STATE",
    "decode_record",
    "decode_share_state_record",
    "decode_transaction_record",
    "record_types",
    "type_names",
]

"""Kafka Streams' legacy rebalance userdata: SubscriptionInfo and AssignmentInfo, versions 1-11.

    from kprotocol.streams import SubscriptionInfo, AssignmentInfo
    info = SubscriptionInfo.decode(data)
    info.encode(), info.to_fields()
"""

from __future__ import annotations

from kprotocol.streams.assignment import AssignmentInfo
from kprotocol.streams.model import LATEST_SUPPORTED_VERSION, HostInfo, TaskId, TaskOffsetSum, TopicPartition
from kprotocol.streams.subscription import SubscriptionInfo

__all__ = [
    "LATEST_SUPPORTED_VERSION",
    "AssignmentInfo",
    "HostInfo",
    "SubscriptionInfo",
    "TaskId",
    "TaskOffsetSum",
    "TopicPartition",
]

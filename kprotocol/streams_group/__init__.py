"""The streams-group coordinator (KIP-1071), sans-IO: typed requests and time in, responses and
`__consumer_offsets` records out.

    from kprotocol.streams_group import StreamsGroupCoordinator
    coordinator = StreamsGroupCoordinator(topics={"input": 4})
    response, records = coordinator.handle(header, request, now_ms)
    records, next_deadline = coordinator.poll(now_ms)
"""

from __future__ import annotations

from kprotocol.streams_group.assignment import AssignmentSettings
from kprotocol.streams_group.coordinator import GroupConfig, StreamsGroupCoordinator
from kprotocol.streams_group.group import StreamsGroup
from kprotocol.streams_group.member import Member
from kprotocol.streams_group.records import CoordinatorRecord
from kprotocol.streams_group.tasks import TaskSets
from kprotocol.streams_group.topology import InternalTopic

__all__ = ["AssignmentSettings", "CoordinatorRecord", "GroupConfig", "InternalTopic", "Member", "StreamsGroup",
           "StreamsGroupCoordinator", "TaskSets"]

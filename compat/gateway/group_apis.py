"""Which groups a request names, and the broker's answers to the group APIs the gateway does not coordinate.

Every request naming a managed group is answered by the gateway: forwarded, the broker would see the
group as empty (its members are the gateway's) and delete its offsets, or create a consumer group under
its id. Each answer below is the one Apache Kafka's broker gives for a classic or streams group with
those members (checked against a real broker in tests/test_gateway_hostile.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kprotocol.registry import api_classes
from kprotocol.runtime.struct import Message

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, TXN_OFFSET_COMMIT, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 28, 42, 47
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE = 68, 69, 76, 77
STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE = 88, 89
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92
STREAMS_GROUP_TOPOLOGY_UPDATE = 93

UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_NOT_AVAILABLE, UNSUPPORTED_VERSION = 3, 15, 35
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC = 68, 69, 86

# APIs whose request names several groups: the answer lists them in the request's order.
MANY = {OFFSET_FETCH: "groups", DESCRIBE_GROUPS: "groups", DELETE_GROUPS: "groups_names",
        CONSUMER_GROUP_DESCRIBE: "group_ids", SHARE_GROUP_DESCRIBE: "group_ids", STREAMS_GROUP_DESCRIBE: "group_ids",
        DESCRIBE_SHARE_GROUP_OFFSETS: "groups"}
# APIs answered with the broker's own error for a group of another kind (online upgrade disabled).
NOT_THIS_KIND = {CONSUMER_GROUP_HEARTBEAT: "consumer", SHARE_GROUP_HEARTBEAT: "share",
                 ALTER_SHARE_GROUP_OFFSETS: "share", DELETE_SHARE_GROUP_OFFSETS: "share"}
ANSWERED = {*MANY, OFFSET_COMMIT, TXN_OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, OFFSET_DELETE,
            CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT, STREAMS_GROUP_HEARTBEAT, ALTER_SHARE_GROUP_OFFSETS,
            DELETE_SHARE_GROUP_OFFSETS, STREAMS_GROUP_TOPOLOGY_UPDATE}
API_KEYS = frozenset({*ANSWERED, FIND_COORDINATOR, LIST_GROUPS})  # every request the gateway reads


def named_groups(api_key: int, version: int, request: Message) -> list[str]:
    """The group ids a request names (none for APIs that name no group)."""
    if api_key == OFFSET_FETCH and version < 8:
        return [request.group_id]
    if api_key in MANY:
        items = getattr(request, MANY[api_key]) or ()
        return [g if isinstance(g, str) else g.group_id for g in items]
    if api_key in ANSWERED:
        return [request.group_id]
    return []


def with_groups(api_key: int, request: Message, keep: Iterable[str]) -> Message:
    """The same request naming only the groups in `keep`."""
    keep = set(keep)
    field = MANY[api_key]
    items = getattr(request, field) or ()
    return request.replace(**{field: [g for g in items if (g if isinstance(g, str) else g.group_id) in keep]})


def response_items(api_key: int, response: Message) -> list[Any]:
    """The per-group entries of a MANY response."""
    return list(response.results if api_key == DELETE_GROUPS else response.groups)


def merged(api_key: int, cls: type[Message], order: list[str], parts: Iterable[Message]) -> Message:
    """One response to a MANY request from the responses to its parts, in the request's order."""
    by_group: dict[str, Any] = {}
    for part in parts:
        for item in response_items(api_key, part):
            by_group.setdefault(item.group_id, item)
    items = [by_group[g] for g in dict.fromkeys(order) if g in by_group]
    return cls(results=items) if api_key == DELETE_GROUPS else cls(groups=items)


def error_answer(api_key: int, version: int, request: Message, code: int, message: str | None = None) -> Message:
    """The answer a broker gives to the whole request when its coordinator cannot serve it (e.g.
    COORDINATOR_NOT_AVAILABLE), at any version: every group, topic and partition gets `code`."""
    _, cls = api_classes(api_key)
    if api_key in (OFFSET_COMMIT, TXN_OFFSET_COMMIT):
        transactional = api_key == TXN_OFFSET_COMMIT
        part = cls.TxnOffsetCommitResponsePartition if transactional else cls.OffsetCommitResponsePartition
        topic = cls.TxnOffsetCommitResponseTopic if transactional else cls.OffsetCommitResponseTopic
        return cls(topics=[topic(name=t.name, partitions=[part(partition_index=p.partition_index, error_code=code)
                                                           for p in t.partitions]) for t in request.topics])
    if api_key == OFFSET_FETCH:
        if version >= 8:
            return cls(groups=[cls.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                               for g in request.groups])
        return cls(error_code=code, topics=[])
    if api_key == DESCRIBE_GROUPS:
        return cls(groups=[cls.DescribedGroup(error_code=code, group_id=g, group_state="", protocol_type="",
                                              protocol_data="", members=[]) for g in request.groups])
    if api_key == DELETE_GROUPS:
        return cls(results=[cls.DeletableGroupResult(group_id=g, error_code=code) for g in request.groups_names])
    if api_key in (CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE, STREAMS_GROUP_DESCRIBE):
        return cls(groups=[cls.DescribedGroup(error_code=code, error_message=message, group_id=g)
                           for g in request.group_ids])
    if api_key == DESCRIBE_SHARE_GROUP_OFFSETS:
        return cls(groups=[cls.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, error_code=code,
                                                                      error_message=message, topics=[])
                           for g in request.groups])
    if api_key == OFFSET_DELETE:
        return cls(error_code=code, topics=[])
    if api_key == JOIN_GROUP:
        return join_refusal_shape(version, cls(error_code=code, member_id=request.member_id, generation_id=-1))
    fields: dict[str, Any] = {"error_code": code}
    if message is not None and "error_message" in _field_names(cls):
        fields["error_message"] = message
    return cls(**fields)


def join_refusal_shape(version: int, response: Message) -> Message:
    """A JoinGroup refusal as the broker sends it: no protocol name (null from v7, where it may be)."""
    if response.error_code and version >= 7 and response.protocol_name == "":
        return response.replace(protocol_name=None)
    return response


def not_this_kind(api_key: int, version: int, request: Message) -> Message:
    """ConsumerGroupHeartbeat, ShareGroupHeartbeat, Alter/DeleteShareGroupOffsets on a managed group:
    GROUP_ID_NOT_FOUND, as the broker answers for a group of another kind."""
    kind = NOT_THIS_KIND[api_key]
    return error_answer(api_key, version, request, GROUP_ID_NOT_FOUND,
                        f"Group {request.group_id} is not a {kind} group.")


def describe_other_kind(api_key: int, version: int, request: Message, exists: set[str]) -> Message:
    """ConsumerGroupDescribe or ShareGroupDescribe of managed groups (classic or streams groups)."""
    _, cls = api_classes(api_key)
    kind = "consumer" if api_key == CONSUMER_GROUP_DESCRIBE else "share"
    return cls(groups=[cls.DescribedGroup(
        error_code=GROUP_ID_NOT_FOUND, group_id=g,
        error_message=f"Group {g} is not a {kind} group." if g in exists else f"Group {g} not found.")
        for g in request.group_ids])


def describe_share_offsets(version: int, request: Message) -> Message:
    """DescribeShareGroupOffsets of managed groups: no share-group offsets, no error (as the broker)."""
    _, cls = api_classes(DESCRIBE_SHARE_GROUP_OFFSETS)
    return cls(groups=[cls.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[])
                       for g in request.groups])


def topology_update_unsupported(request: Message) -> Message:
    _, cls = api_classes(STREAMS_GROUP_TOPOLOGY_UPDATE)
    return cls(error_code=UNSUPPORTED_VERSION,
               error_message="The broker has no streams group topology description plugin configured.")


def _field_names(cls: type[Message]) -> set[str]:
    return set(cls._fields)

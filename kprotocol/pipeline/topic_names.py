"""Topic names for the topic ids in consumer-protocol records, from a KRaft cluster's metadata log.

KIP-848 groups' records name partitions by topic id. A KRaft broker's data directory holds
`__cluster_metadata-0`, whose TopicRecords (metadata record type 2: the name, then the id) pair
each id with its name. Record values are framed as Kafka's metadata serde writes them: frame
version, record type and version as unsigned varints, then the flexible-version message.
"""

from __future__ import annotations

import base64

from kprotocol.errors import DecodeError
from kprotocol.pipeline.files import list_inputs, read_all
from kprotocol.records.segment import SegmentProblem, read_segment_bytes
from kprotocol.runtime.primitives import read_uvarint

METADATA_TOPIC = "__cluster_metadata"
TOPIC_RECORD = 2


def topic_id_text(raw: bytes) -> str:
    """A topic id as Kafka prints it (and kprotocol's JSON holds it): URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def topic_record(value: bytes | None) -> tuple[str, str] | None:
    """(topic id, name) of a TopicRecord value, or None for any other record (or a damaged one)."""
    if not value:
        return None
    try:
        _, pos = read_uvarint(value, 0)  # frame version
        record_type, pos = read_uvarint(value, pos)
        if record_type != TOPIC_RECORD:
            return None
        _, pos = read_uvarint(value, pos)  # record version
        length, pos = read_uvarint(value, pos)  # compact string: length + 1
        name = value[pos:pos + length - 1].decode()
        raw = value[pos + length - 1:pos + length + 15]
    except (DecodeError, IndexError, UnicodeDecodeError):
        return None
    return (topic_id_text(raw), name) if length > 1 and len(raw) == 16 else None


def topic_names(paths: list[str]) -> dict[str, str]:
    """topic id -> name from every `__cluster_metadata-N` partition under `paths` (topics since deleted
    keep their names: old group records still refer to them)."""
    names: dict[str, str] = {}
    for file in list_inputs(paths, (".log",)):
        if file.topic != METADATA_TOPIC:
            continue
        for entry in read_segment_bytes(read_all(file.uri) or b"", file.uri):
            if isinstance(entry, SegmentProblem) or entry.is_control:
                continue
            for record in entry.records:
                found = topic_record(record.value)
                if found:
                    names[found[0]] = found[1]
    return names

"""Topic names for the topic ids in consumer-protocol records, from a KRaft cluster's metadata log.

KIP-848 groups' records name partitions by topic id. A KRaft broker's data directory holds
`__cluster_metadata-0`, whose TopicRecords (metadata record type 2: the name, then the id) pair
each id with its name, in its log segments and in its snapshots (`.checkpoint`, record batches too,
holding what older segments had). Record values are framed as Kafka's metadata serde writes them:
frame version, record type and version as unsigned varints, then the flexible-version message.
Files are read a batch at a time: a metadata log segment may be a gigabyte.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator

from kprotocol.errors import DecodeError
from kprotocol.pipeline.files import InputFile, filesystem, list_inputs
from kprotocol.records.model import RecordBatch
from kprotocol.records.reader import LOG_OVERHEAD, read_batch
from kprotocol.runtime.primitives import read_uvarint

METADATA_TOPIC = "__cluster_metadata"
TOPIC_RECORD = 2
HEADER = struct.Struct(">qi")  # base offset, batch length


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
    files = [f for f in list_inputs(paths, (".checkpoint", ".log")) if f.topic == METADATA_TOPIC]
    for file in sorted(files, key=lambda f: not f.uri.endswith(".checkpoint")):  # snapshots, then the log
        for batch in _batches(file):
            if batch.is_control:
                continue
            for record in batch.records:
                found = topic_record(record.value)
                if found:
                    names[found[0]] = found[1]
    return names


def _batches(file: InputFile) -> Iterator[RecordBatch]:
    """The file's batches, one read each, up to the end or the first one that does not read (a name
    map is best effort: damage ends it rather than the job)."""
    fsys, path = filesystem(file.uri)
    with fsys.open_input_file(path) as handle:
        pos = 0
        while pos + LOG_OVERHEAD <= file.size:
            _, length = HEADER.unpack(handle.read_at(LOG_OVERHEAD, pos))
            if length <= 0 or pos + LOG_OVERHEAD + length > file.size:
                return
            try:
                batch = read_batch(handle.read_at(LOG_OVERHEAD + length, pos), 0)
            except DecodeError:
                return
            yield batch
            pos += LOG_OVERHEAD + length

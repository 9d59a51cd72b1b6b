"""Cutting log segments into splits at batch boundaries, so one large file is several Spark tasks.

Boundaries come from the segment's offset index (`.index`: 8-byte entries, relative offset and
batch position) when it is there; otherwise from a walk over the batch headers (offset, length),
read in chunks. A walk that meets a length it cannot trust stops: the rest of the file becomes
one split, where the reader's own validated resynchronisation takes over.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kprotocol.pipeline.files import InputFile, filesystem, read_all
from kprotocol.records.reader import LOG_OVERHEAD

INDEX_ENTRY = struct.Struct(">ii")
HEADER = struct.Struct(">qi")
WALK_CHUNK = 8 << 20
MIN_BATCH_LENGTH = 14  # the smallest magic-0 message after its length field
DEFAULT_SPLIT_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class SegmentSplit:
    """Bytes [start, end) of one segment; start and end are batch boundaries (or the file's ends)."""

    uri: str
    topic: str | None
    partition: int | None
    start: int
    end: int


def index_positions(index: bytes, size: int) -> list[int]:
    """Batch start positions listed by an offset index, strictly increasing and inside the segment.
    An active segment's index is preallocated with zeros: those entries end the list."""
    positions: list[int] = []
    last = -1
    for relative_offset, position in INDEX_ENTRY.iter_unpack(index[: len(index) - len(index) % 8]):
        if position <= last or position >= size or (relative_offset == 0 and position == 0 and positions):
            break
        positions.append(position)
        last = position
    return positions


def walk_positions(uri: str, size: int, every: int) -> list[int]:
    """Batch start positions about `every` bytes apart, found by following the length fields."""
    fsys, path = filesystem(uri)
    positions: list[int] = []
    next_cut = every
    pos = 0
    with fsys.open_input_file(path) as handle:
        buf, buf_start = b"", 0
        while pos + LOG_OVERHEAD <= size:
            if pos + LOG_OVERHEAD > buf_start + len(buf):
                buf_start, buf = pos, handle.read_at(min(WALK_CHUNK, size - pos), pos)
            _, length = HEADER.unpack_from(buf, pos - buf_start)
            if length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > size:
                break
            if pos >= next_cut:
                positions.append(pos)
                next_cut = pos + every
            pos += LOG_OVERHEAD + length
    return positions


def _plausible_batch(uri: str, position: int, size: int) -> bool:
    """Whether a batch header with a sane length and a known magic byte starts at `position`."""
    fsys, path = filesystem(uri)
    with fsys.open_input_file(path) as handle:
        header = handle.read_at(LOG_OVERHEAD + 5, position)
    if len(header) < LOG_OVERHEAD + 5:
        return False
    _, length = HEADER.unpack_from(header)
    return MIN_BATCH_LENGTH <= length <= size - position - LOG_OVERHEAD and header[LOG_OVERHEAD + 4] in (0, 1, 2)


def plan_segment(file: InputFile, split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[SegmentSplit]:
    """The splits of one `.log` file, each about `split_bytes` long."""
    if file.size <= split_bytes:
        return [SegmentSplit(file.uri, file.topic, file.partition, 0, file.size)]
    index = read_all(file.uri[: -len(".log")] + ".index") if file.uri.endswith(".log") else None
    if index:
        cuts, next_cut = [], split_bytes
        for position in index_positions(index, file.size):
            if position >= next_cut and _plausible_batch(file.uri, position, file.size):
                cuts.append(position)
                next_cut = position + split_bytes
    else:
        cuts = walk_positions(file.uri, file.size, split_bytes)
    bounds = [0, *cuts, file.size]
    return [SegmentSplit(file.uri, file.topic, file.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]

"""Read Kafka log segments (`NNNNNNNNNNNNNNNNNNNN.log`) as a stream of batches and problems.

A batch that fails to decode is reported and skipped: reading resumes at the next position
where a complete batch with a valid CRC starts, so nothing valid is lost. A partial batch at
the end is reported as a truncated tail; an all-zero tail (a preallocated segment) is ignored.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kprotocol.errors import DecodeError, TruncatedError
from kprotocol.records.compression import DEFAULT_MAX_DECOMPRESSED
from kprotocol.records.model import RecordBatch
from kprotocol.records.reader import DEFAULT_MAX_RECORDS, LOG_OVERHEAD, MAGIC_OFFSET, MIN_SIZE, read_batch


@dataclass(frozen=True, slots=True)
class SegmentProblem:
    """Bytes that could not be read: `kind` is "corrupt" (skipped) or "truncated" (the tail)."""

    source: str
    position: int
    length: int
    kind: str
    message: str

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "position": self.position, "length": self.length,
                "kind": self.kind, "message": self.message}


LogEntry = RecordBatch | SegmentProblem


def read_segment_bytes(data: bytes | mmap.mmap, source: str = "<bytes>", *,
                       max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
                       max_records: int = DEFAULT_MAX_RECORDS, start: int = 0) -> Iterator[LogEntry]:
    """Batches and problems of one segment's contents from byte `start`, in file order. A batch over
    `max_records` records or `max_decompressed` bytes is a problem, reported before anything is inflated."""
    pos = start
    end = len(data)
    while pos < end:
        try:
            batch = read_batch(data, pos, max_decompressed=max_decompressed, max_records=max_records)
        except DecodeError as exc:
            if not any(data[pos:pos + LOG_OVERHEAD]) and not any(data[pos:end]):
                if pos == 0:  # nothing but zeros: not a segment (a preallocated one's zero tail is not told)
                    yield SegmentProblem(source, pos, end - pos, "corrupt", f"no record batch: {end} bytes of zeros")
                return
            resume = _next_valid_batch(data, pos + 1, max_decompressed, max_records)
            if resume is None:
                kind = "truncated" if isinstance(exc, TruncatedError) else "corrupt"
                yield SegmentProblem(source, pos, end - pos, kind, str(exc))
                return
            yield SegmentProblem(source, pos, resume - pos, "corrupt", str(exc))
            pos = resume
            continue
        yield batch
        pos += batch.size


def _next_valid_batch(data: bytes | mmap.mmap, start: int, max_decompressed: int, max_records: int) -> int | None:
    end = len(data)
    for pos in range(start, end - LOG_OVERHEAD - 1):
        magic = data[pos + MAGIC_OFFSET] if pos + MAGIC_OFFSET < end else -1
        if magic not in MIN_SIZE or data[pos] & 0x80:  # offsets are never negative
            continue
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if length < MIN_SIZE[magic] or pos + LOG_OVERHEAD + length > end:
            continue
        try:
            read_batch(data, pos, max_decompressed=max_decompressed, max_records=max_records)
        except DecodeError:
            continue
        return pos
    return None


def segment_files(path: Path, topic: str | None = None) -> list[Path]:
    """`path` itself; a partition directory's `.log` segments in base-offset order; or, for a Kafka
    data directory, the segments of its `TOPIC-N` partition directories (every topic when `topic`
    is None), partition by partition."""
    if not path.is_dir():
        if not path.exists():
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return [path]
    logs = [p for p in path.iterdir() if p.suffix == ".log" and p.stem.isdigit()]
    if logs:
        return sorted(logs, key=lambda p: int(p.stem))
    partitions = []
    for child in path.iterdir():
        name, _, number = child.name.rpartition("-")
        if child.is_dir() and number.isdigit() and (topic is None or name == topic):
            partitions.append((name, int(number), child))
    return [log for _, _, child in sorted(partitions) for log in segment_files(child)]


def read_segment(path: Path | str, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
                 max_records: int = DEFAULT_MAX_RECORDS) -> Iterator[LogEntry]:
    """Batches and problems of one segment file."""
    path = Path(path)
    with path.open("rb") as handle:
        if path.stat().st_size == 0:
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield from read_segment_bytes(data, str(path), max_decompressed=max_decompressed,
                                          max_records=max_records)


def read_logs(paths: Iterable[Path | str], topic: str | None = None, **options: int) -> Iterator[tuple[Path, LogEntry]]:
    """(segment file, entry) for every segment file, partition directory or data directory given."""
    for given in paths:
        for file in segment_files(Path(given), topic):
            for entry in read_segment(file, **options):
                yield file, entry

"""Inputs on any filesystem pyarrow reaches: local paths, file://, hdfs://, s3:// (and Hadoop's
s3a:// and s3n:// names for it), gs://, abfs://.

Spark's driver lists and plans with these helpers; its tasks read byte ranges with them, so a
task never needs more than its own share of a file in memory. What each filesystem needs on the
driver and every executor: hdfs:// libhdfs (a Hadoop install: HADOOP_HOME, JAVA_HOME, and
CLASSPATH=`hadoop classpath --glob`); s3:// credentials as the AWS SDK finds them (AWS_ACCESS_KEY_ID
and AWS_SECRET_ACCESS_KEY, ~/.aws, an instance role), AWS_DEFAULT_REGION or AWS_ENDPOINT_URL for
other stores; gs:// Google's application default credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyarrow import fs as pafs

PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
HADOOP_S3 = ("s3a://", "s3n://")  # Hadoop's connectors' names for what pyarrow calls s3://


def pyarrow_uri(path: str) -> str:
    """The URI pyarrow knows for `path` (Hadoop's s3a:// and s3n:// are its s3://)."""
    return "s3://" + path[len("s3a://"):] if path.startswith(HADOOP_S3) else path


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path within it) for a plain local path or a URI."""
    path = pyarrow_uri(path)
    if "://" in path:
        return pafs.FileSystem.from_uri(path)
    return pafs.LocalFileSystem(), path


KAFKA_SEGMENT = re.compile(r"^\d{20}\.log$")  # Kafka names a segment by its base offset, 20 digits


def partition_of(path: str) -> tuple[str, int] | None:
    """(topic, partition) of a Kafka partition directory, or of a Kafka-named segment directly inside one."""
    parts = path.rstrip("/").split("/")
    name = parts[-2] if KAFKA_SEGMENT.match(parts[-1]) and len(parts) > 1 else parts[-1]
    match = PARTITION_DIR.match(name)
    return (match["topic"], int(match["partition"])) if match else None


@dataclass(frozen=True, slots=True)
class InputFile:
    uri: str  # a local path or a URI, as `filesystem` takes it
    size: int
    topic: str | None
    partition: int | None


def _described(uri: str, path: str, size: int) -> InputFile:
    parts = path.rstrip("/").split("/")
    match = PARTITION_DIR.match(parts[-2]) if len(parts) >= 2 else None
    return InputFile(uri, size, match["topic"] if match else None, int(match["partition"]) if match else None)


def list_inputs(paths: list[str], suffixes: tuple[str, ...]) -> list[InputFile]:
    """Files ending in one of `suffixes` under each path (a file, or a directory searched recursively),
    sorted by directory and then by name (segments in base-offset order)."""
    found: list[InputFile] = []
    for given in paths:
        fsys, path = filesystem(given)
        scheme = given[: len(given) - len(path)] if "://" in given and given.endswith(path) else ""
        info = fsys.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(2, "No such file or directory", given)
        if info.type == pafs.FileType.File:
            found.append(_described(given, path, info.size))
            continue
        for entry in fsys.get_file_info(pafs.FileSelector(path, recursive=True)):
            if entry.type == pafs.FileType.File and entry.base_name.endswith(suffixes):
                found.append(_described(scheme + entry.path, entry.path, entry.size))
    found.sort(key=lambda f: f.uri.rsplit("/", 1))
    return found


def read_range(uri: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file."""
    fsys, path = filesystem(uri)
    with fsys.open_input_file(path) as handle:
        return handle.read_at(end - start, start)


def read_all(uri: str) -> bytes | None:
    """A whole (small) file, or None when it does not exist."""
    fsys, path = filesystem(uri)
    if fsys.get_file_info(path).type != pafs.FileType.File:
        return None
    with fsys.open_input_file(path) as handle:
        return handle.read()

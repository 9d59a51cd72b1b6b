"""Inputs on any filesystem pyarrow reaches (local paths, file://, hdfs://, s3://, gs://...).

Spark's driver lists and plans with these helpers; its tasks read byte ranges with them, so a
task never needs more than its own share of a file in memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyarrow import fs as pafs

PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path within it) for a plain local path or a URI."""
    if "://" in path:
        return pafs.FileSystem.from_uri(path)
    return pafs.LocalFileSystem(), path


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
            raise FileNotFoundError(given)
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

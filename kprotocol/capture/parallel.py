"""One capture decoded by several processes at once, its JSON lines in the order one process writes.

Every process reads the whole file (reading packets is the cheap part; the compiled walk drops the
other processes' segments) and decodes its share of the connections (`CaptureDecode(share=(k, n))`,
which every process works out alike). Each writes, to a file of its own, per connection it decodes:
a start mark with the connection's first packet, its lines in length-prefixed blocks, an empty
block. The parent follows those files as they grow and, once every process has marked its next
connection (or ended), hands out the blocks of the one that started first, as `Span`s of the file
that a writer copies with `sendfile` (no copy through the parent): the output equals a single
process's, no process ever waits for the parent, and memory stays that of one decoder per process.
Needs fork (Linux, macOS); the orphans and problems come back at the end.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from kprotocol.capture.decode import CaptureDecode, PacketProblem
from kprotocol.capture.exchanges import Exchange, Orphan, StreamProblem

BLOCK = 1 << 18  # a process writes its lines in blocks of about this size, each after its 4-byte length;
# an empty block ends a connection
CHUNK = 1 << 20
SIZE = struct.Struct(">I")
START = 0xFFFFFFFF  # in place of a block length: a connection starts, its first packet follows
MARK = struct.Struct(">IQ")


@dataclass(frozen=True, slots=True)
class Span:
    """`length` bytes at `offset` of an open file: a block of whole JSON lines."""

    fd: int
    offset: int
    length: int

    def read(self) -> bytes:
        return _pread(self.fd, self.length, self.offset)

    def send(self, out: int) -> None:
        """Write the block to file descriptor `out` (in the kernel where the system allows)."""
        offset, end = self.offset, self.offset + self.length
        try:
            while offset < end:
                offset += os.sendfile(out, self.fd, offset, end - offset)
        except OSError:  # sendfile cannot write there (e.g. not Linux): copy what is left
            data = _pread(self.fd, end - offset, offset)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]


def _pread(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        part = os.pread(fd, min(size, CHUNK << 4), offset)
        if not part:
            raise RuntimeError("a decoding process's file is shorter than its blocks")
        parts.append(part)
        offset, size = offset + len(part), size - len(part)
    return b"".join(parts)


@dataclass
class Outcome:
    """What `CaptureDecode` reports besides exchanges, gathered from every process."""

    packets: int = 0
    connections: int = 0
    orphans: list[Orphan] = field(default_factory=list)
    problems: list[PacketProblem | StreamProblem] = field(default_factory=list)


def decode_blocks(path: str | os.PathLike[str], ports: tuple[int, ...], jobs: int,
                  line: Callable[[Exchange], bytes | None], outcome: Outcome) -> Iterator[Span]:
    """The lines `line(exchange)` gives for every exchange of the capture (None: left out), decoded
    by `jobs` processes, in spans of whole lines, each readable until the next is taken; `outcome` is
    filled in once they are exhausted."""
    directory = Path(tempfile.mkdtemp(prefix="kprotocol-capture-"))
    children: list[_Child] = []
    try:
        for k in range(jobs):
            children.append(_Child.start(path, ports, (k, jobs), line, directory / str(k)))
        idle = 0.0005
        while True:
            marks = [(child.next_first(), child) for child in children if not child.done]
            marks = [(first, child) for first, child in marks if not child.done]  # next_first may find it done
            if not marks:
                break
            if any(first is None for first, _ in marks):  # a process has not marked its next connection yet
                time.sleep(idle)
                idle = min(idle * 2, 0.02)
                continue
            yield from min(marks, key=lambda mark: mark[0])[1].connection()  # type: ignore[arg-type,return-value]
            idle = 0.0005
        for child in children:
            part: Outcome = pickle.loads(child.result.read_bytes()[1:])
            outcome.packets = max(outcome.packets, part.packets)
            outcome.connections += part.connections
            outcome.orphans += part.orphans
            outcome.problems += part.problems
        outcome.problems.sort(key=lambda p: isinstance(p, StreamProblem))  # packet problems first
    finally:
        for child in children:
            child.stop()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class _Child:
    """One decoding process and the file of blocks it writes."""

    pid: int
    output: Path
    result: Path
    fd: int | None = None
    at: int = 0  # the offset of the next block's length
    size: int = 0  # of the file, when last looked at
    started: int | None = None  # the first packet of the connection whose start mark was read last
    done: bool = False  # exited, and every byte of its file taken
    exited: bool = False

    @classmethod
    def start(cls, path: str | os.PathLike[str], ports: tuple[int, ...], share: tuple[int, int],
              line: Callable[[Exchange], bytes | None], base: Path) -> _Child:
        output, result = base.with_suffix(".jsonl"), base.with_suffix(".result")
        output.touch()
        pid = os.fork()
        if pid == 0:
            _run(path, ports, share, line, output, result)  # never returns
        return cls(pid, output, result)

    def next_first(self) -> int | None:
        """The first packet of the connection this process gives next, once its start mark is written
        (without waiting); None before that, and once the process has written everything."""
        if self.started is None and self._has(MARK.size, wait=False):
            mark, first = MARK.unpack(_pread(self.fd, MARK.size, self.at))  # type: ignore[arg-type]
            if mark != START:
                raise RuntimeError("a decoding process wrote a block outside a connection")
            self.started, self.at = first, self.at + MARK.size
        return self.started

    def connection(self) -> Iterator[Span]:
        """The blocks of the connection whose start mark `next_first` read, up to its empty block."""
        while True:
            if not self._has(SIZE.size):
                raise RuntimeError("a decoding process ended inside a connection")
            (length,) = SIZE.unpack(_pread(self.fd, SIZE.size, self.at))  # type: ignore[arg-type]
            if not length:
                break
            if not self._has(SIZE.size + length):
                raise RuntimeError("a decoding process ended inside a block")
            yield Span(self.fd, self.at + SIZE.size, length)  # type: ignore[arg-type]
            self.at += SIZE.size + length
        self.at += SIZE.size
        self.started = None

    def _has(self, n: int, wait: bool = True) -> bool:
        """Whether the file holds n bytes past `at`, waiting for them unless `wait` is False; False once
        the process has ended without them (`done` if nothing at all is left)."""
        if self.fd is None:
            self.fd = os.open(self.output, os.O_RDONLY)
        idle = 0.0005
        while self.size - self.at < n:
            size = os.fstat(self.fd).st_size
            if size > self.size:
                self.size, idle = size, 0.0005
            elif self.exited:
                self._check_result()
                self.done = self.size == self.at
                return False
            elif self._ended():
                continue  # look once more: the file may have grown before the process exited
            elif not wait:
                return False
            else:
                time.sleep(idle)
                idle = min(idle * 2, 0.02)  # a process writes a block every few milliseconds at most
        return True

    def _ended(self) -> bool:
        """Whether the process has exited (reaped here)."""
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.exited = True
            if os.waitstatus_to_exitcode(status) != 0 and not self.result.exists():
                raise RuntimeError(f"a decoding process ended with status {os.waitstatus_to_exitcode(status)}")
        return self.exited

    def _check_result(self) -> None:
        if not self.result.exists():
            raise RuntimeError("a decoding process ended without its result")
        failure = self.result.read_bytes()
        if failure.startswith(b"!"):
            raise RuntimeError(f"a decoding process failed: {failure[1:].decode(errors='replace')}")

    def stop(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        if not self.exited:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.exited = True


def _run(path: str | os.PathLike[str], ports: tuple[int, ...], share: tuple[int, int],
         line: Callable[[Exchange], bytes | None], output: Path, result: Path) -> None:
    code = 0
    try:
        with output.open("wb", buffering=CHUNK) as out:
            capture = CaptureDecode(Path(path), ports, share=share)
            lines: list[bytes] = []
            size, current = 0, -1
            for exchange in capture.marked():
                if capture.releasing != current:  # the first of a connection's exchanges, or its end
                    current = capture.releasing
                    out.write(MARK.pack(START, current))
                if exchange is not None:
                    if (text := line(exchange)) is None:
                        continue
                    lines.append(text)
                    size += len(text)
                    if size < BLOCK:
                        continue
                if lines:
                    block = b"".join(lines)
                    out.write(SIZE.pack(len(block)) + block)
                    lines.clear()
                    size = 0
                if exchange is None:
                    out.write(SIZE.pack(0))
        data = b"." + pickle.dumps(Outcome(capture.packets, capture.connections, capture.orphans, capture.problems),
                                   pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:  # noqa: BLE001 - the parent raises it
        data, code = b"!" + f"{type(exc).__name__}: {exc}".encode(), 1
    finally:
        temporary = result.with_suffix(".partial")
        temporary.write_bytes(data)
        temporary.rename(result)
        os._exit(code)


__all__ = ["Outcome", "Span", "decode_blocks"]

"""One capture decoded by several processes at once, its JSON lines in the order one process writes.

Every process reads the whole file (reading packets is the cheap part) and decodes its share of the
connections (`CaptureDecode(share=(k, n))`, connection i going to process `owner(i, n)`). Each writes
its lines in length-prefixed blocks, an empty block after each of its connections, to a file of its
own that the parent reads as it grows, taking connection i's blocks from that process: the output
equals a single process's, no process ever waits for the parent, and memory stays that of one
decoder per process. Needs fork (Linux, macOS);
the orphans and problems come back at the end.
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

from kprotocol.capture.decode import CaptureDecode, PacketProblem, owner
from kprotocol.capture.exchanges import Exchange, Orphan, StreamProblem

BLOCK = 1 << 18  # a process writes its lines in blocks of about this size, each after its 4-byte length;
# an empty block ends a connection
CHUNK = 1 << 20
SIZE = struct.Struct(">I")


@dataclass
class Outcome:
    """What `CaptureDecode` reports besides exchanges, gathered from every process."""

    packets: int = 0
    connections: int = 0
    orphans: list[Orphan] = field(default_factory=list)
    problems: list[PacketProblem | StreamProblem] = field(default_factory=list)


def decode_blocks(path: str | os.PathLike[str], ports: tuple[int, ...], jobs: int,
                  line: Callable[[Exchange], bytes | None], outcome: Outcome) -> Iterator[bytes]:
    """The lines `line(exchange)` gives for every exchange of the capture (None: left out), decoded
    by `jobs` processes, in blocks of whole lines; `outcome` is filled in once they are exhausted."""
    directory = Path(tempfile.mkdtemp(prefix="kprotocol-capture-"))
    children: list[_Child] = []
    try:
        for k in range(jobs):
            children.append(_Child.start(path, ports, (k, jobs), line, directory / str(k)))
        index = 0
        while True:
            child = children[owner(index, jobs)]
            yield from child.connection()
            if child.done:  # connection `index` does not exist: neither does any later one
                break
            index += 1
        for child in children:
            while not child.done:
                for _ in child.connection():
                    raise RuntimeError("a decoding process has more connections than the capture")
            part: Outcome = pickle.loads(child.result.read_bytes()[1:])
            outcome.packets = max(outcome.packets, part.packets)
            outcome.connections = max(outcome.connections, part.connections)
            outcome.orphans += part.orphans
            outcome.problems += part.problems
        outcome.problems.sort(key=lambda p: isinstance(p, StreamProblem))  # packet problems first
    finally:
        for child in children:
            child.stop()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class _Child:
    """One decoding process and the file of lines it writes."""

    pid: int
    output: Path
    result: Path
    stream: BinaryIO | None = None
    buffer: bytes = b""  # read from the file; taken up to `at`
    at: int = 0
    done: bool = False
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

    def connection(self) -> Iterator[bytes]:
        """The blocks of the next connection (none once the process has written everything)."""
        while (size := self._take(SIZE.size)) is not None and (length := SIZE.unpack(size)[0]):
            block = self._take(length)
            if block is None:
                raise RuntimeError("a decoding process ended inside a block")
            yield block

    def _take(self, n: int) -> bytes | None:
        """The next n bytes of the file, waiting for the process to write them; None at its end."""
        if self.stream is None:
            self.stream = self.output.open("rb")
        while len(self.buffer) - self.at < n:
            chunk = self.stream.read(max(CHUNK, n - len(self.buffer) + self.at))
            if chunk:
                self.buffer, self.at = self.buffer[self.at:] + chunk, 0  # copied once per chunk, not per take
            elif self.exited:
                self._check_result()
                self.done = True
                return None
            else:
                self._poll()
        self.at += n
        return self.buffer[self.at - n:self.at]

    def _poll(self) -> None:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.exited = True
            if os.waitstatus_to_exitcode(status) != 0 and not self.result.exists():
                raise RuntimeError(f"a decoding process ended with status {os.waitstatus_to_exitcode(status)}")
        else:
            time.sleep(0.0005)

    def _check_result(self) -> None:
        if not self.result.exists():
            raise RuntimeError("a decoding process ended without its result")
        failure = self.result.read_bytes()
        if failure.startswith(b"!"):
            raise RuntimeError(f"a decoding process failed: {failure[1:].decode(errors='replace')}")

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.close()
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
            size = 0
            for exchange in capture.marked():
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


__all__ = ["Outcome", "decode_blocks"]

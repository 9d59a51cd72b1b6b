"""Real packet captures of test traffic: `tcpdump` on the loopback interface, stopped by its PID.

    with Tcpdump.start(path, ports=(9092,)):
        ...  # run clients
    # path is a complete pcap file here

`to_pcapng` converts a capture with Wireshark's `editcap`, the tool SREs would use.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from kprotocol.toolchain.processes import die_with_parent


class ToolMissing(RuntimeError):
    """A capture tool (tcpdump, editcap, tshark) is not installed."""


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolMissing(f"{name} is not installed (Debian: apt-get install tcpdump tshark)")
    return path


class Tcpdump:
    def __init__(self, process: subprocess.Popen[bytes], path: Path) -> None:
        self.process = process
        self.path = path

    @classmethod
    def start(cls, path: str | os.PathLike[str], ports: tuple[int, ...], interface: str = "lo",
              timeout: float = 10.0) -> Tcpdump:
        """Capture TCP traffic on `ports` into the pcap file `path`; returns once tcpdump listens."""
        path = Path(path)
        expression = " or ".join(f"tcp port {port}" for port in ports)
        process = subprocess.Popen(
            [tool("tcpdump"), "-i", interface, "-U", "--immediate-mode", "-B", "65536", "-s", "0", "-w", str(path), "-Z", "root", expression],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        assert process.stderr is not None
        line = process.stderr.readline()  # "listening on lo, link-type ..." once the filter is installed
        if b"listening on" not in line or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"tcpdump did not start: {line.decode(errors='replace')}")
        return cls(process, path)

    def stop(self, timeout: float = 10.0) -> Path:
        """SIGINT tcpdump by its PID so it flushes and closes the file; the capture's path."""
        if self.process.poll() is None:
            time.sleep(0.5)  # let the last packets reach the capture file
            os.kill(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        return self.path

    def __enter__(self) -> Tcpdump:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def to_pcapng(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """The same packets in pcapng, written by Wireshark's editcap."""
    subprocess.run([tool("editcap"), "-F", "pcapng", str(source), str(target)], check=True,
                   capture_output=True, timeout=300)
    return Path(target)

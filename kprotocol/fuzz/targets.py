"""Fuzz targets, one per input family: bytes in, every decoder of the family exercised.

A target may raise `kprotocol.DecodeError` (bad input, reported cleanly); anything else is a bug.
Where a decode succeeds, the targets also check what must hold for any valid input (re-encoding a
decoded message gives a message that decodes to the same value).

    from kprotocol.fuzz.targets import FAMILIES
    target, seeds = FAMILIES["records"]
    for seed in seeds(): target(seed)

Seeds come from the golden vectors in `../shared` (when present beside a checkout) and from the
repository's fixtures: real traffic, segments, captures.
"""

from __future__ import annotations

import io
import json
import os
import logging
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any
from pathlib import Path

from kprotocol.errors import DecodeError

ROOT = Path(os.environ.get("KPROTOCOL_FUZZ_ROOT") or Path(__file__).resolve().parents[2])  # the checkout
FIXTURES = ROOT / "fixtures"
SHARED = ROOT.parent / "shared"
MAX_SEED = 64 << 10  # longer seeds are cut: the fuzzer mutates them anyway


@cache
def _message_classes() -> list[type]:
    from kprotocol.registry import message_class, spec_names

    return [message_class(name) for name in spec_names()]


def _files(directory: Path, pattern: str) -> list[Path]:
    return sorted(directory.glob(pattern)) if directory.is_dir() else []


# ------------------------------------------------------------------ messages at every version

def messages(data: bytes) -> None:
    """Bytes 0-1 choose the message class, byte 2 the version; the rest is its body."""
    if len(data) < 3:
        return
    classes = _message_classes()
    cls = classes[int.from_bytes(data[:2], "big") % len(classes)]
    low, high = cls.valid_versions
    version = low + data[2] % (high - low + 1)
    message = cls.decode(data[3:], version)
    again = type(message).decode(message.encode(version), version)
    if again != message:
        raise AssertionError(f"{cls.__name__} v{version} does not survive re-encoding")
    message.to_json(version)


def message_seeds() -> Iterator[bytes]:
    index = {cls.__name__: i for i, cls in enumerate(_message_classes())}
    for path in _files(SHARED / "vectors", "*.jsonl"):
        for line in path.read_text(encoding="utf-8").split("\n")[:20]:
            if not line:
                continue
            vector = json.loads(line)
            position = index.get(vector.get("name"))
            if position is None or "hex" not in vector:
                continue
            cls = _message_classes()[position]
            low, _ = cls.valid_versions
            yield position.to_bytes(2, "big") + bytes([(vector["version"] - low) % 256]) + bytes.fromhex(vector["hex"])


# ------------------------------------------------------------------ frames of one connection

def frames(data: bytes) -> None:
    """Byte 0 splits the rest into a client stream and a server stream, fed to `frames decode` in chunks."""
    from kprotocol.tools.frames import decode_streams

    if not data:
        return
    cut = 1 + data[0] * (len(data) - 1) // 255
    client = [data[start:min(cut, start + 4096)] for start in range(1, cut, 4096)]
    for _ in decode_streams(client, [data[cut:]]):
        pass


def frame_seeds() -> Iterator[bytes]:
    for client in _files(FIXTURES / "traffic", "*.client.bin"):
        server = client.with_name(client.name.replace(".client.", ".server.")).read_bytes()
        client_bytes = client.read_bytes()[:MAX_SEED // 2]
        yield bytes([min(255, 255 * len(client_bytes) // max(1, len(client_bytes) + len(server[:MAX_SEED // 2])))]) \
            + client_bytes + server[:MAX_SEED // 2]


# ------------------------------------------------------------------ Kafka Streams userdata

def userdata(data: bytes) -> None:
    from kprotocol.streams import LATEST_SUPPORTED_VERSION, AssignmentInfo, SubscriptionInfo

    for cls in (SubscriptionInfo, AssignmentInfo):
        try:
            info = cls.decode(data)
        except DecodeError:
            continue
        info.to_fields()
        if info.version > LATEST_SUPPORTED_VERSION:
            continue  # a probing member's future version: decoded for its header, never re-encoded
        if cls.decode(info.encode()) != info:
            raise AssertionError(f"{cls.__name__} v{info.version} does not survive re-encoding")


def userdata_seeds() -> Iterator[bytes]:
    for path in _files(SHARED / "streams-userdata", "*.jsonl"):
        for line in path.read_text(encoding="utf-8").split("\n"):
            vector = json.loads(line) if line else {}
            if "hex" in vector:
                yield bytes.fromhex(vector["hex"])


# ------------------------------------------------------------------ record batches and segments

def records(data: bytes) -> None:
    from kprotocol.records.segment import SegmentProblem, read_segment_bytes
    from kprotocol.records.summary import records_summary

    for entry in read_segment_bytes(data, "fuzz"):
        if not isinstance(entry, SegmentProblem):
            entry.to_dict()
    records_summary(data)


def record_seeds() -> Iterator[bytes]:
    for path in [*_files(FIXTURES / "offsets", "*.log"), *_files(FIXTURES / "kafka" / "data", "*/*.log")]:
        yield path.read_bytes()[:MAX_SEED]


# ------------------------------------------------------------------ coordinator records

def coordinator(data: bytes) -> None:
    """Byte 0 picks the topic, bytes 1-2 the key length; the rest is key then value."""
    from kprotocol.coordinator_topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE, decode_record

    if len(data) < 3:
        return
    topic = (CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE)[data[0] % 3]
    length = int.from_bytes(data[1:3], "big")
    key, value = data[3:3 + length], data[3 + length:]
    json.dumps(decode_record(key, value or None, topic=topic))


def coordinator_seeds() -> Iterator[bytes]:
    from kprotocol.records.segment import SegmentProblem, read_segment

    for path in [*_files(FIXTURES / "offsets", "0*.log"), *_files(FIXTURES / "kafka" / "data", "*/*.log")]:
        topic = 1 if "__transaction_state" in str(path) else 0
        for batch in read_segment(path):
            if isinstance(batch, SegmentProblem) or batch.is_control:
                continue
            for record in batch.records[:5]:
                key = record.key or b""
                yield bytes([topic]) + len(key).to_bytes(2, "big") + key + (record.value or b"")


# ------------------------------------------------------------------ packet captures

def captures(data: bytes) -> None:
    from kprotocol.capture import decode_capture

    assert _segments(data, compiled=True) == _segments(data, compiled=False), "the compiled walk differs"
    capture = decode_capture(io.BytesIO(data), ports=(9092, 60127, 36897), detect=True)
    for exchange in capture:
        exchange.to_json()
    for orphan in capture.orphans:
        orphan.to_json()


def _segments(data: bytes, compiled: bool) -> tuple[list[Any], list[str]]:
    """The TCP segments and problems of a capture, by `Walk` or by the Python readers alone."""
    from kprotocol.capture import CaptureError, read_packets, tcp_segments
    from kprotocol.capture.walk import Walk

    problems: list[CaptureError] = []
    items: list[Any] = []
    try:
        stream = io.BytesIO(data)
        items += Walk(stream, problems) if compiled else tcp_segments(read_packets(stream, problems))
    except CaptureError as exc:
        problems.append(exc)
    return items, [str(p) for p in problems]


def capture_seeds() -> Iterator[bytes]:
    for path in _files(FIXTURES / "captures", "*.pcap*"):
        yield path.read_bytes()[:MAX_SEED]


# ------------------------------------------------------------------ the gateway's request handling

def gateway(data: bytes) -> None:
    """Byte 0 chooses: a client frame as the gateway reads it, or an upstream response it rewrites."""
    from compat.gateway.wire import expects_response, request_prefix
    from kprotocol.framing import decode_request

    if len(data) < 5:
        return
    frame = len(data[1:]).to_bytes(4, "big") + data[1:] if data[0] & 1 else data[1:]
    if data[0] & 2:
        api_key, api_version = data[1] % 80, data[2] % 20
        _drive(_gateway().rewrite(api_key, api_version, frame))
        return
    try:
        request_prefix(frame)
        expects_response(frame)
    except Exception as exc:  # the gateway's own framing error closes that one connection
        if type(exc).__name__ != "FrameError" and not isinstance(exc, DecodeError):
            raise
        return
    decode_request(frame)


@cache
def _gateway() -> object:
    from compat.gateway.proxy import Gateway

    logging.getLogger("kprotocol.gateway").setLevel(logging.ERROR)  # unreadable responses pass through, quietly

    class Offline(Gateway):  # listeners are sockets: give each broker a fixed local address instead
        async def _ensure_listener(self, node_id: int, host: str, port: int) -> tuple[str, int]:
            return "127.0.0.1", 19000 + node_id % 1000

    return Offline(("127.0.0.1", 9092))


def _drive(coroutine: object) -> object:
    """Run a coroutine that never waits on I/O to completion, without an event loop."""
    try:
        while True:
            coroutine.send(None)  # type: ignore[attr-defined]
    except StopIteration as done:
        return done.value


def gateway_seeds() -> Iterator[bytes]:
    from kprotocol.conversation import FrameReader

    for path in _files(FIXTURES / "traffic", "*.bin"):
        for _, frame in FrameReader().feed(path.read_bytes())[:20]:
            yield (b"\x00" if path.name.endswith(".client.bin") else b"\x02") + frame


from kprotocol.fuzz.managed import managed, managed_seeds  # noqa: E402  (it reads FIXTURES from here)

Target = Callable[[bytes], None]
FAMILIES: dict[str, tuple[Target, Callable[[], Iterator[bytes]]]] = {
    "messages": (messages, message_seeds),
    "frames": (frames, frame_seeds),
    "userdata": (userdata, userdata_seeds),
    "records": (records, record_seeds),
    "coordinator": (coordinator, coordinator_seeds),
    "captures": (captures, capture_seeds),
    "gateway": (gateway, gateway_seeds),
    "managed": (managed, managed_seeds),  # the gateway's managed-group requests, mutated field by field
}

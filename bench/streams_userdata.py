"""Kafka Streams userdata codec throughput: decodes/s and encodes/s.

    .venv/bin/python bench/streams_userdata.py [--seconds 1.0]

Payloads: a v11 SubscriptionInfo with 200 task offset sums, and a v11 AssignmentInfo with 100 active
tasks, 100 standby tasks and 50 hosts. Besides the public API (compiled construct layouts), it times the
interpreted construct declaration and a hand-written `struct` decoder of the same two layouts, which
produces the same objects, to show what construct costs.
"""

from __future__ import annotations

import argparse
import struct
import time
import uuid
from collections.abc import Callable

from kprotocol.streams import AssignmentInfo, HostInfo, SubscriptionInfo, TaskId, TaskOffsetSum, TopicPartition
from kprotocol.streams.layouts import ASSIGNMENT, SUBSCRIPTION
from kprotocol.streams.primitives import Input
from kprotocol.streams.strings import decode_mutf8, decode_utf16

_SUM = struct.Struct(">iiqh")
_I32 = struct.Struct(">i")
_I32X2 = struct.Struct(">ii")
_I32X3 = struct.Struct(">iii")
_U16 = struct.Struct(">H")


def subscription() -> SubscriptionInfo:
    sums = [TaskOffsetSum(TaskId(i // 8, i % 8), -2 if i % 3 == 0 else 1000 * i) for i in range(200)]
    tags = (("az", "us-east-1a"), ("rack", "r1"))
    return SubscriptionInfo(11, 11, uuid.UUID(int=7), sums, "host-1.example.com:8080", 3, 0, tags)


def assignment() -> AssignmentInfo:
    active = [TaskId(i % 7, i) for i in range(100)]
    changelog = [f"app-store-{i}-changelog" for i in range(5)]
    standby = [(TaskId(i % 5, 100 + i), [TopicPartition(changelog[i % 5], 100 + i)]) for i in range(100)]
    hosts = [HostInfo(f"host-{h}.example.com", 8080) for h in range(50)]
    active_map = [
        (host, [TopicPartition(f"input-{(h + k) % 4}", h * 4 + k) for k in range(4)]) for h, host in enumerate(hosts)
    ]
    standby_map = [(host, [TopicPartition(changelog[h % 5], h)]) for h, host in enumerate(hosts)]
    return AssignmentInfo(11, 11, active, standby, active_map, standby_map, 0, 1_700_000_000_000)


# ---- hand-written struct decoders (v11 only, no error reporting): the baseline construct is measured against


def struct_subscription_v11(data: bytes) -> SubscriptionInfo:
    version, latest = _I32X2.unpack_from(data, 0)
    process_id = uuid.UUID(bytes=data[8:24])
    (n,) = _I32.unpack_from(data, 24)
    pos = 28 + n
    end_point = data[28:pos].decode("utf-8", "replace") or None
    (count,) = _I32.unpack_from(data, pos)
    pos += 4
    sums = []
    for _ in range(count):
        sub, part, offset, n = _SUM.unpack_from(data, pos)
        pos += 18
        name = None
        if n >= 0:
            name = data[pos : pos + n].decode("utf-8", "replace")
            pos += n
        sums.append(TaskOffsetSum(TaskId(sub, part, name), offset))
    unique, error = struct.unpack_from(">bi", data, pos)
    (count,) = _I32.unpack_from(data, pos + 5)
    pos += 9
    tags = []
    for _ in range(count):
        (n,) = _I32.unpack_from(data, pos)
        key = data[pos + 4 : pos + 4 + n].decode("utf-8", "replace")
        pos += 4 + n
        (n,) = _I32.unpack_from(data, pos)
        tags.append((key, data[pos + 4 : pos + 4 + n].decode("utf-8", "replace")))
        pos += 4 + n
    return SubscriptionInfo(version, latest, process_id, tuple(sums), end_point, unique, error, tuple(tags))


def _mutf(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = _U16.unpack_from(data, pos)
    return decode_mutf8(data[pos + 2 : pos + 2 + n]), pos + 2 + n


def _task10(data: bytes, pos: int) -> tuple[TaskId, int]:
    sub, part, n = _I32X3.unpack_from(data, pos)
    pos += 12
    if n <= 0:
        return TaskId(sub, part), pos
    return TaskId(sub, part, decode_utf16(data[pos : pos + 2 * n])), pos + 2 * n


def _tps(data: bytes, pos: int) -> tuple[tuple[TopicPartition, ...], int]:
    (count,) = _I32.unpack_from(data, pos)
    pos += 4
    tps = []
    for _ in range(count):
        topic, pos = _mutf(data, pos)
        tps.append(TopicPartition(topic, _I32.unpack_from(data, pos)[0]))
        pos += 4
    return tuple(tps), pos


def _host_map(data: bytes, pos: int, topics: dict[int, str]) -> tuple[tuple, int]:
    (count,) = _I32.unpack_from(data, pos)
    pos += 4
    hosts = []
    for _ in range(count):
        host, pos = _mutf(data, pos)
        port, n = _I32X2.unpack_from(data, pos)
        pos += 8
        refs = [TopicPartition(topics.get(i), p) for i, p in _I32X2.iter_unpack(data[pos : pos + 8 * n])]
        pos += 8 * n
        hosts.append((HostInfo(host, port), tuple(refs)))
    return tuple(hosts), pos


def struct_assignment(data: bytes) -> AssignmentInfo:
    """v11 only."""
    version, commonly, count = _I32X3.unpack_from(data, 0)
    pos = 12
    active = []
    for _ in range(count):
        task, pos = _task10(data, pos)
        active.append(task)
    (count,) = _I32.unpack_from(data, pos)
    pos += 4
    standby = []
    for _ in range(count):
        task, pos = _task10(data, pos)
        tps, pos = _tps(data, pos)
        standby.append((task, tps))
    (count,) = _I32.unpack_from(data, pos)
    pos += 4
    dictionary = []
    for _ in range(count):
        (index,) = _I32.unpack_from(data, pos)
        topic, pos = _mutf(data, pos + 4)
        dictionary.append((index, topic))
    topics = dict(dictionary)
    hosts, pos = _host_map(data, pos, topics)
    standby_hosts, pos = _host_map(data, pos, topics)
    err_code, next_rebalance = struct.unpack_from(">iq", data, pos)
    return AssignmentInfo(
        version, commonly, tuple(active), tuple(standby), hosts, standby_hosts, err_code, next_rebalance,
        tuple(dictionary),
    )


def rate(fn: Callable[[], object], seconds: float, rounds: int = 5) -> float:
    """Calls per second of `fn`: the best of `rounds` rounds lasting `seconds` in all (robust to noise)."""
    best = 0.0
    for _ in range(rounds):
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / rounds:
            for _ in range(10):
                fn()
            calls += 10
        best = max(best, calls / elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    seconds = parser.parse_args().seconds
    cases = [  # (title, object, layout, hand-written decoder)
        ("SubscriptionInfo v11, 200 task offset sums", subscription(), SUBSCRIPTION[11], struct_subscription_v11),
        ("AssignmentInfo v11, 100 active, 100 standby, 50 hosts", assignment(), ASSIGNMENT[11], struct_assignment),
    ]
    for title, info, layout, by_hand in cases:
        data, cls = info.encode(), type(info)
        assert cls.decode(data) == by_hand(data) and cls.decode(data).encode() == data == info.encode()
        decode = rate(lambda: cls.decode(data), seconds)
        encode = rate(info.encode, seconds)
        interpreted = rate(lambda: layout.declaration.parse_stream(Input(data)), seconds)
        handwritten = rate(lambda: by_hand(data), seconds)
        print(f"{title} ({len(data)} bytes)")
        print(f"  decode (compiled construct, public API) {decode:10.0f}/s")
        print(f"  encode (compiled construct, public API) {encode:10.0f}/s")
        print(f"  decode, interpreted construct layout    {interpreted:10.0f}/s")
        print(f"  decode, hand-written struct             {handwritten:10.0f}/s")
        print(f"  compiled construct costs {handwritten / decode:.2f}x the hand-written struct decode time")


if __name__ == "__main__":
    main()

"""Offline TCP reassembly: order, retransmissions, overlaps, holes and sequence wrap-around."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from kprotocol.capture.reassembly import Direction, StreamChunk, StreamGap
from kprotocol.capture.segments import FLAG_SYN, TcpSegment

DATA = bytes(random.Random(1).randrange(256) for _ in range(3000))


def _segment(seq: int, payload: bytes, number: int = 1, flags: int = 0x18) -> TcpSegment:
    return TcpSegment(number, float(number), "127.0.0.1", 50000, "127.0.0.1", 9092, seq % (1 << 32), 0, flags,
                      payload)


def _stream(events) -> tuple[bytes, list[StreamGap]]:
    data, gaps, at = bytearray(), [], 0
    for event in events:
        if isinstance(event, StreamGap):
            assert event.offset == at
            gaps.append(event)
            data += b"?" * event.length
            at += event.length
        else:
            assert isinstance(event, StreamChunk) and event.offset == at
            data += event.data
            at += len(event.data)
    return bytes(data), gaps


@given(st.integers(0, (1 << 32) - 1), st.randoms(use_true_random=False))
def test_any_order_with_duplicates_gives_the_stream(isn: int, rng: random.Random) -> None:
    cuts = sorted(rng.sample(range(1, len(DATA)), 20))
    pieces = [(a, DATA[a:b]) for a, b in zip([0, *cuts], [*cuts, len(DATA)])]
    sent = pieces + rng.sample(pieces, 5)  # retransmissions
    rng.shuffle(sent)
    direction = Direction()
    events = direction.segment(_segment(isn, b"", flags=FLAG_SYN))
    for number, (offset, payload) in enumerate(sent, 2):
        events += direction.segment(_segment(isn + 1 + offset, payload, number))
    events += direction.finish()
    data, gaps = _stream(events)
    assert data == DATA and gaps == []


def test_overlaps_keep_the_first_copy_and_holes_become_gaps() -> None:
    direction = Direction()
    events = direction.segment(_segment(100, DATA[:10]))
    events += direction.segment(_segment(105, b"XXXXXXXXXX"))         # overlaps 5 delivered bytes
    events += direction.segment(_segment(120, DATA[20:30]))           # leaves a hole at 15..20
    events += direction.finish()
    data, gaps = _stream(events)
    assert data == DATA[:10] + b"XXXXX" + b"?????" + DATA[20:30]
    assert gaps == [StreamGap(15, 5)]


def test_sequence_numbers_wrap_around() -> None:
    direction = Direction()
    start = (1 << 32) - 7
    events = direction.segment(_segment(start, DATA[:10]))
    events += direction.segment(_segment(start + 10, DATA[10:20]))  # past 2^32: seq 3
    assert _stream(events)[0] == DATA[:20]


def test_a_hole_is_given_up_once_too_much_waits_behind_it() -> None:
    direction = Direction(max_pending=100)
    events = direction.segment(_segment(0, DATA[:10]))
    for start in range(50, 300, 50):  # bytes 10..50 never come
        events += direction.segment(_segment(start, DATA[start:start + 50]))
    data, gaps = _stream(events)
    assert gaps == [StreamGap(10, 40)] and data[50:] == DATA[50:len(data)]

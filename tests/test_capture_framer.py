"""The capture framer: size-prefixed frames out of reassembled chunks and gaps, property-tested."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from kprotocol.capture.framer import EMPTY, INVALID, MORE, VALID, Frame, Framer, Lost
from kprotocol.capture.reassembly import StreamChunk, StreamGap

bodies = st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=12)


def _stream(frames: list[bytes]) -> tuple[bytes, list[int]]:
    starts, out = [], bytearray()
    for body in frames:
        starts.append(len(out))
        out += struct.pack(">i", len(body)) + body
    return bytes(out), starts


def _validator(stream: bytes, starts: list[int], framer_ref: list[Framer]):
    """A frame is valid exactly where one was written (the framer's buffer maps to stream offsets)."""
    def validate(buf: bytearray, pos: int) -> int:
        offset = framer_ref[0].start + pos
        if offset not in starts:
            return INVALID
        size = struct.unpack_from(">i", stream, offset)[0]
        return VALID if len(buf) - pos >= 4 + size else MORE
    return validate


def _framer(stream: bytes, starts: list[int], synced: bool = True) -> Framer:
    ref: list[Framer] = []
    framer = Framer(_validator(stream, starts, ref), synced=synced)
    ref.append(framer)
    return framer


@given(bodies, st.data())
def test_frames_come_back_whole_with_their_packets(frames: list[bytes], data: st.DataObject) -> None:
    stream, starts = _stream(frames)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=10))))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)]) if b > a]
    framer = _framer(stream, starts)
    got: list[Frame | Lost] = []
    offset = 0
    for number, piece in enumerate(pieces, 1):
        got += framer.chunk(StreamChunk(offset, piece, number, float(number)))
        offset += len(piece)
    got += framer.finish()
    empty = [Lost(x.offset, x.length, EMPTY, x.count, x.last_offset) for x in got if isinstance(x, Lost)]
    assert all(x.reason == EMPTY for x in got if isinstance(x, Lost))  # frames of size 0 are counted, not framed
    assert sorted(s for e in empty for s in range(e.offset, e.offset + e.length, 4)) == [
        s for s, body in zip(starts, frames) if not body]
    assert all(e.last_offset == e.offset + e.length - 4 and e.count * 4 == e.length for e in empty)
    got = [x for x in got if isinstance(x, Frame)]
    assert [f.data[4:] for f in got] == [body for body in frames if body]
    bounds = [0]
    for piece in pieces:
        bounds.append(bounds[-1] + len(piece))
    for frame, start in zip(got, [s for s, body in zip(starts, frames) if body]):
        assert isinstance(frame, Frame) and frame.offset == start
        end = start + len(frame.data)
        assert bounds[frame.first - 1] <= start < bounds[frame.first]
        assert bounds[frame.last - 1] < end <= bounds[frame.last] and frame.time == float(frame.last)


@settings(max_examples=300)
@given(bodies, st.data(), st.booleans())
def test_a_gap_costs_only_the_frames_it_touches(frames: list[bytes], data: st.DataObject, late: bool) -> None:
    stream, starts = _stream(frames)
    gap_start = data.draw(st.integers(0, len(stream) - 1))
    gap_end = data.draw(st.integers(gap_start + 1, len(stream)))
    framer = _framer(stream, starts, synced=not late)
    got: list[Frame | Lost] = []
    if gap_start:
        got += framer.chunk(StreamChunk(0, stream[:gap_start], 1, 1.0))
    got += framer.gap(StreamGap(gap_start, gap_end - gap_start))
    if gap_end < len(stream):
        got += framer.chunk(StreamChunk(gap_end, stream[gap_end:], 2, 2.0))
    got += framer.finish()
    whole = {f.offset: f.data[4:] for f in got if isinstance(f, Frame) and not f.gap and not f.truncated}
    whole.update((at, b"") for e in got if isinstance(e, Lost) and e.reason == EMPTY
                 for at in range(e.offset, e.offset + e.length, 4))
    for start, body in zip(starts, frames):
        end = start + 4 + len(body)
        if end <= gap_start and not late:
            assert whole[start] == body  # before the gap: untouched
        if start >= gap_end:
            assert whole[start] == body  # after the gap: found again
    gapped = [f for f in got if isinstance(f, Frame) and f.gap]
    for frame in gapped:
        assert frame.offset < gap_start < frame.offset + 4 + frame.size
    assert all(f.offset in starts for f in got if isinstance(f, Frame))

"""The keys of a capture's exchanges around lost packets: present only when they apply, the reason a
response is missing, and the packets of a frame cut by a gap."""

from __future__ import annotations

from kprotocol import encode_request, encode_response, message_class
from kprotocol.capture.decode import decode_segments
from kprotocol.capture.framer import VALID, Framer
from kprotocol.capture.reassembly import StreamChunk, StreamGap
from kprotocol.capture.segments import TcpSegment

CLIENT, SERVER = ("10.0.0.1", 50000), ("10.0.0.2", 9092)
SYN, SYN_ACK, PUSH = 0x02, 0x12, 0x18


def _request(correlation_id: int, topics: int = 1) -> bytes:
    header = message_class("RequestHeader")(request_api_key=3, request_api_version=12,
                                            correlation_id=correlation_id, client_id="c")
    topic = message_class("MetadataRequest")._spec[0].struct
    body = message_class("MetadataRequest")(topics=tuple(topic(name=f"topic-{i:03d}") for i in range(topics)))
    return encode_request(header, body)


def _response(correlation_id: int) -> bytes:
    header = message_class("ResponseHeader")(correlation_id=correlation_id)
    return encode_response(header, message_class("MetadataResponse")(cluster_id="k", controller_id=1), 12)


class _Conn:
    """Segments of one connection, numbered in capture order; `lose` leaves a packet out."""

    def __init__(self) -> None:
        self.items: list[TcpSegment] = []
        self.seq = {CLIENT: 1000, SERVER: 5000}
        self.add(CLIENT, b"", SYN)
        self.add(SERVER, b"", SYN_ACK)

    def add(self, side: tuple[str, int], payload: bytes, flags: int = PUSH, lose: bool = False) -> int:
        number = len(self.items) + 1
        other = SERVER if side == CLIENT else CLIENT
        segment = TcpSegment(number, float(number), *side, *other, self.seq[side], 0, flags, payload)
        self.seq[side] += len(payload) + (1 if flags & 0x02 else 0)
        self.items.append(segment if not lose else segment._replace(payload=b"LOST"))
        return number

    def decode(self) -> list[dict]:
        kept = [s for s in self.items if s.payload != b"LOST"]
        return [e.to_json() for e in decode_segments(kept, ports=(SERVER[1],))]


def test_a_request_without_a_captured_response_has_no_response_keys() -> None:
    conn = _Conn()
    conn.add(CLIENT, _request(1))
    conn.add(CLIENT, _request(2))
    conn.add(SERVER, _response(1))
    first, second = conn.decode()
    assert first["responseHeaderVersion"] == 1 and "response" in first and "noResponse" not in first
    assert second["noResponseReason"] == "not captured"  # the capture ended before its response
    assert {"responseHeaderVersion", "response", "responseFrames", "responseTime", "responseSize"}.isdisjoint(second)
    assert second["requestHeaderVersion"] == 2


def test_a_response_lost_in_a_gap_of_the_server_stream_says_so() -> None:
    conn = _Conn()
    conn.add(CLIENT, _request(1))
    conn.add(CLIENT, _request(2))
    conn.add(SERVER, _response(1), lose=True)  # the whole response is in the hole
    conn.add(SERVER, _response(2))
    first, second = conn.decode()
    assert first["noResponse"] is True and first["noResponseReason"] == "lost: gap in the server stream"
    assert "responseHeaderVersion" not in first
    assert second["response"] is not None and "noResponse" not in second


def test_a_frame_cut_by_a_gap_ends_at_the_last_packet_carrying_its_bytes() -> None:
    conn = _Conn()
    frame = _request(1, topics=30)
    third = len(frame) // 3
    first = conn.add(CLIENT, frame[:third])
    conn.add(CLIENT, frame[third:2 * third], lose=True)
    last = conn.add(CLIENT, frame[2 * third:])
    conn.add(CLIENT, _request(2))
    conn.add(SERVER, _response(1))
    conn.add(SERVER, _response(2))
    cut, whole = conn.decode()
    assert cut["requestGap"] is True and cut["requestFrames"] == [first, last] and cut["requestTime"] == last
    assert cut["response"] is not None and whole["response"] is not None and "requestGap" not in whole


def test_the_framer_keeps_a_cut_frame_until_its_end_has_passed() -> None:
    framer = Framer(lambda buf, pos: VALID)
    frame = b"\x00\x00\x00\x0c" + bytes(range(12))
    assert framer.chunk(StreamChunk(0, frame[:6], 1, 1.0)) == []
    assert framer.gap(StreamGap(6, 4)) == []
    assert framer.chunk(StreamChunk(10, frame[10:13], 3, 3.0)) == []
    (cut, after) = framer.chunk(StreamChunk(13, frame[13:] + frame, 4, 4.0))
    assert cut.gap and (cut.first, cut.last, cut.time, cut.data) == (1, 4, 4.0, frame[:6])
    assert not after.gap and after.data == frame and (after.first, after.last) == (4, 4)
    # a cut frame whose end is never captured comes out when the stream ends
    framer = Framer(lambda buf, pos: VALID)
    framer.chunk(StreamChunk(0, frame[:6], 1, 1.0))
    framer.gap(StreamGap(6, 2))
    framer.chunk(StreamChunk(8, frame[8:12], 2, 2.0))
    (cut,) = framer.finish()
    assert cut.gap and (cut.first, cut.last) == (1, 2)

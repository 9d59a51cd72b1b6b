"""Packet captures (pcap, pcapng) of Kafka traffic, decoded to paired request/response exchanges.

    from kprotocol.capture import decode_capture
    for exchange in decode_capture("x.pcapng", ports=(9092,)):
        exchange.to_json()
"""

from kprotocol.capture.decode import CaptureDecode, PacketProblem, decode_capture
from kprotocol.capture.exchanges import Exchange, Orphan, StreamProblem
from kprotocol.capture.files import CaptureError, Packet, read_packets
from kprotocol.capture.segments import SegmentProblem, TcpSegment, tcp_segments

__all__ = ["CaptureDecode", "CaptureError", "Exchange", "Orphan", "Packet", "PacketProblem", "SegmentProblem",
           "StreamProblem", "TcpSegment", "decode_capture", "read_packets", "tcp_segments"]

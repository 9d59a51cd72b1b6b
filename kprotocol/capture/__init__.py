"""Packet captures (pcap, pcapng) of Kafka traffic. So far: capture files to TCP segments."""

from kprotocol.capture.files import CaptureError, Packet, read_packets
from kprotocol.capture.segments import SegmentProblem, TcpSegment, tcp_segments

__all__ = ["CaptureError", "Packet", "SegmentProblem", "TcpSegment", "read_packets", "tcp_segments"]

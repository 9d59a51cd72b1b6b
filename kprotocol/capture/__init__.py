"""Packet captures (pcap, pcapng) of Kafka traffic. So far: reading the capture files."""

from kprotocol.capture.files import CaptureError, Packet, read_packets

__all__ = ["CaptureError", "Packet", "read_packets"]

"""Kafka's five codecs over `cramjam`, with the framings Kafka uses and a bound on output size.

- gzip and zstd: plain streams.
- snappy: Kafka writes xerial's framing (a 16-byte header, then length-prefixed raw blocks of
  at most 32 KiB input); plain raw snappy is accepted on read.
- lz4: the LZ4 frame format with independent 64 KiB blocks. For magic 0 Kafka computes the
  frame header checksum over the magic number too (an old bug kept for compatibility); both
  checksums are accepted on read, and the writer reproduces Kafka's choice for each magic.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from kprotocol.records.errors import CompressionError, DecompressionLimitError
from kprotocol.records.xxhash32 import xxh32

DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024
LZ4_MAGIC = 0x184D2204
LZ4_BLOCK = 64 * 1024
_LZ4_BLOCK_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: Compression | str | int) -> Compression:
        if isinstance(value, str):
            return cls[value.upper()]
        return cls(value)


def compress(codec: Compression, data: bytes, magic: int) -> bytes:
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Compression.SNAPPY:
        return _xerial_compress(data)
    if codec is Compression.LZ4:
        return _lz4_frame_compress(data, broken_header_checksum=magic == 0)
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec is Compression.NONE:
        return data
    raise ValueError(f"unknown compression {codec!r}")


def decompress(codec: int, data: bytes, limit: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress `data`, refusing to produce more than `limit` bytes."""
    try:
        if codec == Compression.GZIP:
            return _bounded(cramjam.gzip.decompress_into, data, limit)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data, limit)
        if codec == Compression.LZ4:
            return _lz4_frame_decompress(data, limit)
        if codec == Compression.ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, limit)
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"{Compression(codec).label} payload is corrupt: {exc}") from None
    raise CompressionError(f"unknown compression codec {codec}")


def _bounded(decompress_into, data: bytes, limit: int) -> bytes:
    """Decompress into a buffer that grows (x4) until the output fits or `limit` is reached."""
    size = min(limit, max(64 * 1024, 8 * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise
            if size >= limit:
                raise DecompressionLimitError(f"decompressed payload exceeds {limit} bytes") from None
            size = min(limit, size * 4)
            continue
        return bytes(out[:n])


def _check_budget(needed: int, limit: int) -> None:
    if needed > limit:
        raise DecompressionLimitError(f"decompressed payload exceeds {limit} bytes")


# ---------------------------------------------------------------- snappy

def _xerial_compress(data: bytes) -> bytes:
    parts = [XERIAL_HEADER]
    for start in range(0, len(data), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: bytes, limit: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(block)
    _check_budget(size, limit)
    out = bytearray(size)
    n = cramjam.snappy.decompress_raw_into(block, out)
    return bytes(out[:n])


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    if not data.startswith(XERIAL_HEADER[:8]):
        return _snappy_raw(data, limit)
    pos = len(XERIAL_HEADER)
    out: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("xerial snappy block length is truncated")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CompressionError(f"xerial snappy block length {length} runs past the payload")
        chunk = _snappy_raw(data[pos : pos + length], limit - total)
        total += len(chunk)
        out.append(chunk)
        pos += length
    return b"".join(out)


# ---------------------------------------------------------------- lz4 frames

def lz4_header_checksum(descriptor: bytes, broken: bool) -> int:
    """The frame header checksum byte; `broken` hashes the magic number too, as Kafka's magic 0 does."""
    covered = struct.pack("<I", LZ4_MAGIC) + descriptor if broken else descriptor
    return (xxh32(covered) >> 8) & 0xFF


def _lz4_frame_compress(data: bytes, broken_header_checksum: bool) -> bytes:
    descriptor = bytes((0x60, 0x40))  # version 1, independent blocks; 64 KiB max block
    parts = [struct.pack("<I", LZ4_MAGIC), descriptor,
             bytes((lz4_header_checksum(descriptor, broken_header_checksum),))]
    for start in range(0, len(data), LZ4_BLOCK):
        raw = data[start : start + LZ4_BLOCK]
        packed = bytes(cramjam.lz4.compress_block(raw, store_size=False))
        if len(packed) < len(raw):
            parts += [struct.pack("<I", len(packed)), packed]
        else:
            parts += [struct.pack("<I", len(raw) | 0x80000000), raw]
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def _lz4_frame_decompress(data: bytes, limit: int) -> bytes:
    if len(data) < 7 or struct.unpack_from("<I", data)[0] != LZ4_MAGIC:
        raise CompressionError("lz4 payload does not start with an LZ4 frame")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise CompressionError(f"unsupported lz4 frame version {flg >> 6}")
    block_max = _LZ4_BLOCK_SIZES.get((bd >> 4) & 7)
    if block_max is None:
        raise CompressionError(f"invalid lz4 block size code {(bd >> 4) & 7}")
    has_block_checksum, has_size, has_content_checksum = flg & 0x10, flg & 0x08, flg & 0x04
    pos = 6 + (8 if has_size else 0) + (4 if flg & 0x01 else 0)
    if pos >= len(data):
        raise CompressionError("lz4 frame header is truncated")
    descriptor = data[4:pos]
    if data[pos] not in (lz4_header_checksum(descriptor, False), lz4_header_checksum(descriptor, True)):
        raise CompressionError("lz4 frame header checksum mismatch")
    pos += 1
    out: list[bytes] = []
    total = 0
    buffer = bytearray(block_max)
    while True:
        if pos + 4 > len(data):
            raise CompressionError("lz4 frame ends without an end mark")
        (word,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        if size > block_max or pos + size > len(data):
            raise CompressionError(f"lz4 block of {size} bytes is invalid here")
        block = data[pos : pos + size]
        pos += size + (4 if has_block_checksum else 0)
        if word & 0x80000000:
            chunk = block
        else:
            chunk = bytes(buffer[: cramjam.lz4.decompress_block_into(block, buffer)])
        total += len(chunk)
        _check_budget(total, limit)
        out.append(chunk)
    if has_content_checksum:
        pos += 4
    if pos > len(data):
        raise CompressionError("lz4 frame content checksum is truncated")
    return b"".join(out)

"""The four codecs Kafka uses inside record batches, framed exactly as Kafka frames them.

- gzip: a plain gzip member.
- snappy: xerial's block stream (``SnappyOutputStream``): a 16-byte header, then
  ``int32 length + raw snappy block`` per 32 KiB of input. Plain raw snappy is accepted on read.
- lz4: an LZ4 frame with 64 KiB independent blocks and no checksums (Kafka's ``Lz4BlockOutputStream``).
  The reader ignores the header checksum, because Kafka wrote a wrong one for magic 0 messages.
- zstd: a zstd frame.

All codecs run in C through cramjam.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam


class Compression(IntEnum):
    """Codec ids, as stored in the low three bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        """The codec for a Kafka ``compression.type`` name (``none``, ``gzip``...; ``producer`` = none)."""
        lowered = name.strip().lower()
        if lowered in ("producer", "uncompressed"):
            return cls.NONE
        try:
            return cls[lowered.upper()]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r}") from None

    @property
    def kafka_name(self) -> str:
        """The lower-case name kafka-dump-log.sh prints (``none``, ``gzip``...)."""
        return self.name.lower()


class CompressionError(ValueError):
    """Compressed data that cannot be decoded."""


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024

_LZ4_MAGIC = struct.pack("<I", 0x184D2204)
_LZ4_BLOCK = 64 * 1024
# FLG: version 01, independent blocks, no block/content checksum, no content size. BD: 64 KiB max block.
_LZ4_FLG, _LZ4_BD = 0x60, 0x40


def compress(codec: Compression, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` in Kafka's framing."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return _snappy_xerial_compress(data)
    if codec == Compression.LZ4:
        return _lz4_frame_compress(data)
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec!r}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """``data`` decompressed; CompressionError when it is not valid for ``codec``."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == Compression.LZ4:
            return _lz4_frame_decompress(bytes(data))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError, or ValueError
        raise CompressionError(f"invalid {_codec_name(codec)} data: {exc}") from exc
    raise CompressionError(f"unknown compression codec id {codec}")


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).kafka_name
    except ValueError:
        return f"codec {codec}"


def _snappy_xerial_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = []
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("truncated xerial snappy block header")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CompressionError("truncated xerial snappy block")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(out)


def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of a short input (the 2-byte LZ4 frame descriptor needs nothing more)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF
    length = len(data)
    if length >= 16:  # never needed for frame descriptors; kept simple on purpose
        raise ValueError("_xxh32 handles inputs under 16 bytes")
    h = (seed + p5 + length) & mask
    pos = 0
    while pos + 4 <= length:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (h + word * p3) & mask
        h = (((h << 17) | (h >> 15)) & mask) * p4 & mask
        pos += 4
    while pos < length:
        h = (h + data[pos] * p5) & mask
        h = (((h << 11) | (h >> 21)) & mask) * p1 & mask
        pos += 1
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    h ^= h >> 16
    return h


_LZ4_HEADER = _LZ4_MAGIC + bytes([_LZ4_FLG, _LZ4_BD, (_xxh32(bytes([_LZ4_FLG, _LZ4_BD])) >> 8) & 0xFF])


def _lz4_frame_compress(data: bytes) -> bytes:
    parts = [_LZ4_HEADER]
    view = memoryview(data)
    for start in range(0, len(view), _LZ4_BLOCK):
        chunk = view[start : start + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):  # incompressible: store it, flagged by the high bit
            parts.append(struct.pack("<I", len(chunk) | 0x80000000))
            parts.append(bytes(chunk))
        else:
            parts.append(struct.pack("<I", len(block)))
            parts.append(block)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def _lz4_frame_decompress(data: bytes) -> bytes:
    if not data.startswith(_LZ4_MAGIC) or len(data) < 7:
        raise CompressionError("not an LZ4 frame")
    flg, bd = data[4], data[5]
    pos = 6
    if flg & 0x08:  # content size present
        pos += 8
    pos += 1  # header checksum: not checked (Kafka's magic-0 writer got it wrong)
    if flg & 0x01:
        raise CompressionError("LZ4 frames with a preset dictionary are not supported")
    block_checksum = bool(flg & 0x10)
    max_block = 1 << (8 + 2 * ((bd >> 4) & 0x7))
    out = []
    while True:
        if pos + 4 > len(data):
            raise CompressionError("truncated LZ4 frame")
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size == 0:
            break
        stored = bool(size & 0x80000000)
        size &= 0x7FFFFFFF
        if pos + size > len(data):
            raise CompressionError("truncated LZ4 block")
        block = data[pos : pos + size]
        pos += size + (4 if block_checksum else 0)
        if stored:
            out.append(block)
        else:
            scratch = bytearray(max_block)
            written = cramjam.lz4.decompress_block_into(block, scratch)
            out.append(bytes(scratch[:written]))
    return b"".join(out)

"""The four codecs Kafka uses inside record batches, framed exactly as Kafka frames them.

- gzip: a plain gzip member.
- snappy: xerial's block stream (``SnappyOutputStream``): a 16-byte header, then
  ``int32 length + raw snappy block`` per 32 KiB of input. Plain raw snappy is accepted on read.
- lz4: an LZ4 frame with 64 KiB independent blocks and no checksums (Kafka's ``Lz4BlockOutputStream``).
  The reader ignores the header checksum, because Kafka wrote a wrong one for magic 0 messages.
- zstd: a zstd frame.

All codecs run in C through cramjam. Decompression has a cap on its output (a small batch in a hostile
data dir may otherwise decompress to gigabytes): gzip and zstd decompress into a buffer of bounded
size and stop when it is full; lz4 and snappy are framed in blocks whose sizes are known before each
is decompressed (snappy's from the block's length varint), so they stop at the first block past it.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from types import ModuleType

import cramjam
import numpy as np


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


#: The most bytes :func:`decompress` produces unless told otherwise.
DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024
# gzip and zstd first decompress into a buffer of this many times the input (at least 1 MiB: cheap,
# as its untouched pages are never mapped), then, when that is too small, into one of the cap.
_FIRST_BUFFER_RATIO = 32
_FIRST_BUFFER_MIN = 1 << 20
_BUFFER_FULL = "failed to write whole buffer"  # cramjam's error when the output does not fit


def decompress(codec: int, data: bytes | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """``data`` decompressed; CompressionError when it is not valid for ``codec``, or when it would
    decompress to more than ``max_size`` bytes (never more than that is produced)."""
    try:
        if codec == Compression.NONE:
            if len(data) > max_size:
                raise CompressionError(_too_large(codec, max_size))
            return bytes(data)
        if codec == Compression.GZIP:
            return _bounded(codec, cramjam.gzip, data, max_size)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data), max_size)
        if codec == Compression.LZ4:
            return _lz4_frame_decompress(bytes(data), max_size)
        if codec == Compression.ZSTD:
            return _bounded(codec, cramjam.zstd, data, max_size)
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError, or ValueError
        raise CompressionError(f"invalid {_codec_name(codec)} data: {exc}") from exc
    raise CompressionError(f"unknown compression codec id {codec}")


def _bounded(codec: int, module: ModuleType, data: bytes | memoryview, max_size: int) -> bytes:
    """gzip or zstd ``data`` decompressed into a buffer of at most ``max_size`` bytes: cramjam stops
    writing (and decompressing) when the buffer is full."""
    first = min(max_size, max(_FIRST_BUFFER_MIN, _FIRST_BUFFER_RATIO * len(data)))
    for size in dict.fromkeys((first, max_size)):
        out = np.empty(size, np.uint8)
        try:
            written = module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _BUFFER_FULL not in str(exc):
                raise
            continue
        return out[:written].tobytes()
    raise CompressionError(_too_large(codec, max_size))


def _too_large(codec: int, max_size: int) -> str:
    return f"{_codec_name(codec)} data decompresses to more than {max_size} bytes (the cap)"


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


def _snappy_decompress(data: bytes, max_size: int) -> bytes:
    """Raw snappy or xerial's block stream; every raw block's length (its leading varint) is added
    up before the block is decompressed."""
    if not data.startswith(_XERIAL_MAGIC):
        blocks = [data]
    else:
        blocks = []
        pos = len(_XERIAL_HEADER)
        while pos < len(data):
            if pos + 4 > len(data):
                raise CompressionError("truncated xerial snappy block header")
            (length,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if length < 0 or pos + length > len(data):
                raise CompressionError("truncated xerial snappy block")
            blocks.append(data[pos : pos + length])
            pos += length
    total = 0
    for block in blocks:
        total += cramjam.snappy.decompress_raw_len(block)
        if total > max_size:
            raise CompressionError(_too_large(Compression.SNAPPY, max_size))
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in blocks)


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


def _lz4_frame_decompress(data: bytes, max_size: int) -> bytes:
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
    total = 0
    scratch = bytearray(max_block)
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
            # output_len: without it cramjam takes the block's first 4 bytes for a prepended size
            # whenever they read as one that fits (a record area's first bytes often do)
            written = cramjam.lz4.decompress_block_into(block, scratch, output_len=max_block)
            out.append(bytes(scratch[:written]))
        total += len(out[-1])
        if total > max_size:  # one block (at most 4 MiB) past the cap, then no more
            raise CompressionError(_too_large(Compression.LZ4, max_size))
    return b"".join(out)

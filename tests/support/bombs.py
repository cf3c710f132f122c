"""Decompression bombs for the cap's tests: ``size`` zeros compressed as Kafka frames each codec,
built in chunks (the zeros are never in memory at once), by implementations other than seglogfs'."""

from __future__ import annotations

import struct

import cramjam
import lz4.frame

from seglogfs.compression import Compression

_CHUNK = 16 * 1024 * 1024
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def bomb(codec: int, size: int) -> bytes:
    """``size`` zeros compressed with ``codec`` (a multiple of 16 MiB). Snappy cannot compress more
    than about 21:1, so its bomb is a xerial block whose length varint claims ``size`` bytes."""
    chunk = bytes(_CHUNK)
    if codec == Compression.ZSTD:  # one frame
        compressor = cramjam.zstd.Compressor()
        for _ in range(size // _CHUNK):
            compressor.compress(chunk)
        return bytes(compressor.finish())
    if codec == Compression.GZIP:  # gzip members one after the other read as one stream (quicker to build)
        return bytes(cramjam.gzip.compress(chunk)) * (size // _CHUNK)
    if codec == Compression.LZ4:  # Kafka's framing: 64 KiB independent blocks, no checksums
        compressor = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
        parts = [compressor.begin()]
        parts += [compressor.compress(chunk) for _ in range(size // _CHUNK)]
        return b"".join([*parts, compressor.flush()])
    if codec == Compression.SNAPPY:
        claim, length = bytearray(), size
        while True:  # the raw block's uncompressed length, 7 bits a byte
            claim.append((length & 0x7F) | (0x80 if length > 0x7F else 0))
            length >>= 7
            if not length:
                break
        block = bytes(claim) + b"\x00" * 64
        return _XERIAL_HEADER + struct.pack(">i", len(block)) + block
    raise ValueError(f"no bomb for codec {codec}")

"""seglogfs.compression against independent codec implementations (kafka-python's kafka.codec,
python-snappy, lz4.frame, zstandard, the stdlib gzip) and Kafka's framing rules
(docs/kafka-format.md section 1.4: xerial snappy, LZ4 frame with 64 KiB independent blocks).
"""

from __future__ import annotations

import gzip
import os
import struct

import lz4.frame
import pytest
import snappy
import xxhash
import zstandard
from kafka import codec as kcodec

from seglogfs.compression import Compression, CompressionError, compress, decompress

XERIAL_MAGIC = b"\x82SNAPPY\x00"
LZ4_MAGIC = struct.pack("<I", 0x184D2204)
MIB = 1024 * 1024

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def _payloads() -> dict[str, bytes]:
    rnd = os.urandom(MIB)
    return {
        "empty": b"",
        "one-byte": b"x",
        "small": b"hello kafka, hello seglogfs\n" * 3,
        "random-1MiB": rnd,
        "repetitive-1MiB": (b"abcdefgh" * 16 + b"0123456789") * (MIB // 138) + b"tail",
        "zeros-1MiB": bytes(MIB),
        "mixed": rnd[:100_000] + bytes(100_000) + rnd[100_000:170_001],
    }


PAYLOADS = _payloads()


def _xerial_blocks(data: bytes) -> list[bytes]:
    """Independent parse of xerial framing: 16-byte header, then int32 length + raw block."""
    assert data[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", data[8:16]) == (1, 1)
    pos, blocks = 16, []
    while pos < len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        blocks.append(data[pos : pos + n])
        pos += n
    assert pos == len(data)
    return blocks


def _lz4_block_sizes(frame: bytes) -> list[tuple[int, bool]]:
    """Independent parse of an LZ4 frame (no content size, no checksums): (block size, stored)."""
    assert frame[:4] == LZ4_MAGIC
    pos = 7
    out = []
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        out.append((size, bool(word & 0x80000000)))
        pos += size
    assert pos == len(frame), "nothing may follow the end mark (no content checksum)"
    return out


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_round_trip(codec, name):
    data = PAYLOADS[name]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    assert decompress(int(codec), memoryview(packed)) == data  # any buffer, plain int codec id
    if name.startswith(("repetitive", "zeros")):
        assert len(packed) < len(data) // 20


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_none_is_identity(name):
    data = PAYLOADS[name]
    assert compress(Compression.NONE, data) == data
    assert decompress(Compression.NONE, memoryview(data)) == data


def test_compression_names():
    assert Compression.from_name("zstd") is Compression.ZSTD
    assert Compression.from_name(" LZ4 ") is Compression.LZ4
    assert Compression.from_name("producer") is Compression.NONE
    assert Compression.from_name("uncompressed") is Compression.NONE
    assert [c.kafka_name for c in Compression] == ["none", "gzip", "snappy", "lz4", "zstd"]
    with pytest.raises(ValueError, match="brotli"):
        Compression.from_name("brotli")


# ------------------------------------------------------------------ seglogfs output read by other readers


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_gzip_read_by_stdlib_and_kafka_python(name):
    data = PAYLOADS[name]
    packed = compress(Compression.GZIP, data)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == data
    assert kcodec.gzip_decode(packed) == data


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_snappy_is_xerial_and_read_by_kafka_python(name):
    data = PAYLOADS[name]
    packed = compress(Compression.SNAPPY, data)
    assert packed.startswith(XERIAL_MAGIC)
    if data:
        assert kcodec.snappy_decode(packed) == data
    else:  # kafka-python only detects xerial framing when a block follows the 16-byte header
        assert packed == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    blocks = _xerial_blocks(packed)
    # Kafka's SnappyOutputStream: one block per 32 KiB of input.
    assert len(blocks) == -(-len(data) // (32 * 1024))
    pieces = [snappy.uncompress(b) for b in blocks]
    assert all(len(p) == 32 * 1024 for p in pieces[:-1])
    assert b"".join(pieces) == data


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_lz4_frame_read_by_lz4_and_kafka_python(name):
    data = PAYLOADS[name]
    packed = compress(Compression.LZ4, data)
    assert packed.startswith(LZ4_MAGIC)
    # FLG: version 01, independent blocks, no checksums, no content size; BD: 64 KiB blocks
    assert packed[4] == 0x60 and packed[5] == 0x40
    # a correct header checksum (Kafka's broken one is only for magic 0): second byte of xxh32(FLG, BD)
    assert packed[6] == (xxhash.xxh32(packed[4:6]).intdigest() >> 8) & 0xFF
    assert lz4.frame.decompress(packed) == data
    assert kcodec.lz4_decode(packed) == data
    blocks = _lz4_block_sizes(packed)
    assert len(blocks) == -(-len(data) // (64 * 1024))
    assert all(size <= 64 * 1024 for size, _ in blocks)


def test_lz4_incompressible_blocks_are_stored():
    data = PAYLOADS["random-1MiB"]
    blocks = _lz4_block_sizes(compress(Compression.LZ4, data))
    assert len(blocks) == 16
    assert all(stored and size == 64 * 1024 for size, stored in blocks)


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_zstd_read_by_zstandard_and_kafka_python(name):
    data = PAYLOADS[name]
    packed = compress(Compression.ZSTD, data)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompressobj().decompress(packed) == data
    assert kcodec.zstd_decode(packed) == data


# ------------------------------------------------------------------ other writers read by seglogfs


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_reads_kafka_python_encoders(name):
    data = PAYLOADS[name]
    assert decompress(Compression.GZIP, kcodec.gzip_encode(data)) == data
    assert decompress(Compression.SNAPPY, kcodec.snappy_encode(data)) == data  # xerial
    assert decompress(Compression.LZ4, kcodec.lz4_encode(data)) == data
    assert decompress(Compression.ZSTD, kcodec.zstd_encode(data)) == data


def test_reads_an_lz4_block_that_cramjam_misreads_without_its_bound() -> None:
    # the record area of seven records kafka-python wrote (a hypothesis find): decompressed into a
    # 64 KiB buffer with no output_len, cramjam returns the right length of the wrong bytes
    data = bytes.fromhex(
        "0e0000c8010101000e0000ca010101000e0000cc01010100140081808001ce01010100140081808001d001010100"
        "140081808001d201010100140081808001d401010100"
    )
    for frame in (kcodec.lz4_encode(data), lz4.frame.compress(data, block_linked=False)):
        assert decompress(Compression.LZ4, frame) == data


@pytest.mark.parametrize("name", ["small", "repetitive-1MiB", "random-1MiB"])
def test_reads_raw_snappy_without_xerial_framing(name):
    data = PAYLOADS[name]
    raw = kcodec.snappy_encode(data, xerial_compatible=False)
    assert not raw.startswith(XERIAL_MAGIC)
    assert decompress(Compression.SNAPPY, raw) == data


@pytest.mark.parametrize("name", ["small", "repetitive-1MiB", "random-1MiB", "one-byte"])
def test_reads_kafka_magic0_lz4_with_broken_header_checksum(name):
    data = PAYLOADS[name]
    old = kcodec.lz4_encode_old_kafka(data)
    correct_hc = (xxhash.xxh32(old[4:6]).intdigest() >> 8) & 0xFF
    assert old[6] != correct_hc, "kafka-python must have produced the broken checksum"
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(old)  # a strict reader refuses it
    assert decompress(Compression.LZ4, old) == data


@pytest.mark.parametrize(
    "kwargs",
    [
        {"content_checksum": True},
        {"block_checksum": True},
        {"store_size": True},
        {"content_checksum": True, "block_checksum": True, "store_size": True},
    ],
    ids=["content-checksum", "block-checksum", "content-size", "all"],
)
def test_reads_lz4_frame_options(kwargs):
    data = PAYLOADS["mixed"]
    frame = lz4.frame.compress(data, block_linked=False, block_size=lz4.frame.BLOCKSIZE_MAX64KB, **kwargs)
    assert decompress(Compression.LZ4, frame) == data


def test_gzip_multiple_members_and_levels():
    data = PAYLOADS["mixed"]
    assert decompress(Compression.GZIP, gzip.compress(data, compresslevel=1)) == data
    two = gzip.compress(data[:1000]) + gzip.compress(data[1000:])
    assert decompress(Compression.GZIP, two) == data


def test_zstd_streamed_frame_without_content_size():
    data = PAYLOADS["mixed"]
    comp = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = comp.compress(data) + comp.flush()
    assert decompress(Compression.ZSTD, frame) == data


# ------------------------------------------------------------------ corrupt input


GARBAGE = [b"\xff", b"not compressed at all, just text", os.urandom(64)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("junk", range(len(GARBAGE)))
def test_garbage_raises_compression_error(codec, junk):
    with pytest.raises(CompressionError):
        decompress(codec, GARBAGE[junk])


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_truncated_output_raises_compression_error(codec):
    packed = compress(codec, PAYLOADS["mixed"])
    for cut in (len(packed) // 3, len(packed) // 2, len(packed) - 5):
        with pytest.raises(CompressionError):
            decompress(codec, packed[:cut])


def test_corrupt_xerial_block_length_raises():
    packed = bytearray(compress(Compression.SNAPPY, PAYLOADS["small"]))
    struct.pack_into(">i", packed, 16, 10_000)  # first block claims more than there is
    with pytest.raises(CompressionError, match="snappy"):
        decompress(Compression.SNAPPY, bytes(packed))
    struct.pack_into(">i", packed, 16, -3)
    with pytest.raises(CompressionError):
        decompress(Compression.SNAPPY, bytes(packed))


def test_corrupt_lz4_block_raises():
    packed = bytearray(compress(Compression.LZ4, PAYLOADS["repetitive-1MiB"]))
    first_size = struct.unpack_from("<I", packed, 7)[0]
    assert not first_size & 0x80000000
    # overwrite the compressed block body with bytes no LZ4 decoder accepts as this block
    packed[11 : 11 + first_size] = b"\xff" * first_size
    with pytest.raises(CompressionError):
        decompress(Compression.LZ4, bytes(packed))


def test_lz4_not_a_frame_raises():
    with pytest.raises(CompressionError, match="LZ4"):
        decompress(Compression.LZ4, b"\x04\x22\x4d")
    with pytest.raises(CompressionError):
        decompress(Compression.LZ4, kcodec.gzip_encode(b"abc"))


def test_unknown_codec_id_raises_compression_error():
    for codec in (5, 6, 7):
        with pytest.raises(CompressionError, match=str(codec)):
            decompress(codec, b"abc")


def test_compression_error_is_a_value_error():
    assert issubclass(CompressionError, ValueError)

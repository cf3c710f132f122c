"""Batch headers (seglogfs/records/batch_header.py): the shallow scan, torn tails, impossible sizes, the
CRC check of v2 batches and legacy messages, and the header field accessors.

Facts: docs/kafka-format.md section 1 (formats).
"""

from __future__ import annotations

import struct

import pytest
from support.record_batches import (
    CODECS,
    NOW,
    PATH,
    kp_parse,
    raw_legacy,
    raw_record,
    raw_v2_batch,
    sl_parse,
)

from seglogfs.compression import Compression
from seglogfs.errors import CorruptRecordError
from seglogfs.records import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    ProducerRecord,
    batch_max_timestamp,
    encode_batch,
    encode_values,
    iter_batch_headers,
    read_batch_header,
    unchecked_v2_header,
    validate_batch,
)

# ====================================== CRC


def _two_batches(codec: Compression) -> tuple[bytes, int]:
    first = encode_batch([ProducerRecord(b"first", b"k")], 0, now_ms=NOW)
    second = encode_batch(
        [ProducerRecord(b"value-%d" % i, b"key", (("h", b"x"),), NOW + i) for i in range(4)],
        1,
        now_ms=NOW,
        compression=codec,
    )
    return first + second, len(first)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_any_flipped_byte_in_crc_range_is_detected(codec):
    buf, pos = _two_batches(codec)
    clean = list(iter_batch_headers(buf, path=PATH))
    validate_batch(buf, clean[1], path=PATH)
    for i in range(pos + 17, len(buf)):  # the CRC field itself and everything it covers
        bad = bytearray(buf)
        bad[i] ^= 0x5A
        headers = list(iter_batch_headers(bytes(bad), path=PATH))
        assert len(headers) == 2
        with pytest.raises(CorruptRecordError) as err:
            validate_batch(bytes(bad), headers[1], path=PATH)
        assert err.value.position == pos
        assert err.value.path == PATH
        assert f"{PATH} at position {pos}" in str(err.value)
        validate_batch(bytes(bad), headers[0], path=PATH)  # the neighbour is untouched


def test_leader_epoch_is_outside_the_crc():
    buf, pos = _two_batches(Compression.NONE)
    bad = bytearray(buf)
    struct.pack_into(">i", bad, pos + 12, 123456)
    h = list(iter_batch_headers(bytes(bad)))[1]
    validate_batch(bytes(bad), h)
    assert h.leader_epoch == 123456


@pytest.mark.parametrize("magic", [0, 1])
def test_any_flipped_byte_in_legacy_message_is_detected(magic):
    msg = raw_legacy(magic, b"key", b"some value", offset=3)
    buf = raw_legacy(magic, None, b"x", offset=2) + msg
    pos = len(buf) - len(msg)
    _, records = sl_parse(buf)
    assert records == kp_parse(buf)[1]
    for i in range(pos + 12, len(buf)):  # CRC, magic... a changed magic is caught too
        if i == pos + 16:
            continue  # flipping the magic byte changes the format, tested below
        bad = bytearray(buf)
        bad[i] ^= 0x01
        h = list(iter_batch_headers(bytes(bad), path=PATH))[1]
        with pytest.raises(CorruptRecordError) as err:
            validate_batch(bytes(bad), h, path=PATH)
        assert err.value.position == pos and f"at position {pos}" in str(err.value)


def test_negative_record_count_fails_validation():
    buf = raw_v2_batch(raw_record(0, 0, None, b"x"), -1, last_delta=0)
    (h,) = list(iter_batch_headers(buf))
    with pytest.raises(CorruptRecordError, match="negative"):
        validate_batch(buf, h, path=PATH)


# ====================================== scanning


def test_truncated_buffer_stops_at_the_last_complete_batch():
    buf = (
        encode_batch([ProducerRecord(b"a" * 100)], 0, now_ms=NOW)
        + raw_legacy(1, b"k", b"legacy", offset=1)
        + encode_batch([ProducerRecord(b"b" * 300, b"k")] * 3, 2, now_ms=NOW, compression=Compression.GZIP)
        + raw_legacy(0, None, b"v0", offset=5)
    )
    full = list(iter_batch_headers(buf))
    assert len(full) == 4 and full[-1].end_position == len(buf)
    for cut in range(len(buf) + 1):
        expected = [h for h in full if h.end_position <= cut]
        assert list(iter_batch_headers(buf[:cut], path=PATH)) == expected
        assert list(iter_batch_headers(buf, 0, cut, path=PATH)) == expected
    # starting mid-buffer: positions stay absolute
    assert list(iter_batch_headers(buf, full[2].position)) == full[2:]


@pytest.mark.parametrize("size", [13, 0, -1, -(2**31)])
def test_size_below_minimum_raises_with_position(size):
    good = encode_batch([ProducerRecord(b"ok")], 0, now_ms=NOW)
    buf = good + struct.pack(">qi", 1, size) + b"\x00" * 40
    it = iter_batch_headers(buf, path=PATH)
    assert next(it).base_offset == 0
    with pytest.raises(CorruptRecordError) as err:
        next(it)
    assert err.value.position == len(good)
    assert f"{PATH} at position {len(good)}" in str(err.value)


def test_v2_size_below_header_and_unknown_magic_raise():
    small_v2 = struct.pack(">qiib", 0, 30, 0, 2) + b"\x00" * 40
    with pytest.raises(CorruptRecordError) as err:
        list(iter_batch_headers(small_v2, path=PATH))
    assert err.value.position == 0
    magic3 = bytearray(encode_batch([ProducerRecord(b"x")], 0, now_ms=NOW))
    magic3[16] = 3
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_batch_headers(bytes(magic3), path=PATH))


# ====================================== field accessors


def test_batch_max_timestamp_reads_the_header_field():
    records = [ProducerRecord(b"a", timestamp=NOW + 5), ProducerRecord(b"b", timestamp=NOW - 5)]
    batch = encode_batch(records, 0, now_ms=NOW)
    assert batch_max_timestamp(batch) == NOW + 5 == next(iter_batch_headers(batch)).max_timestamp
    assert batch_max_timestamp(memoryview(batch)) == NOW + 5


def test_unchecked_v2_header_reads_a_header_that_read_batch_header_refuses():
    batch = bytearray(encode_batch([ProducerRecord(b"x")] * 3, 70, now_ms=NOW, leader_epoch=4))
    good = read_batch_header(bytes(batch), 0)
    assert unchecked_v2_header(bytes(batch)) == good
    assert unchecked_v2_header(b"\0" * 5 + bytes(batch), 5, base_position=100).position == 105
    struct.pack_into(">i", batch, 8, 3)  # a length no batch can have
    with pytest.raises(CorruptRecordError):
        read_batch_header(bytes(batch), 0)
    claimed = unchecked_v2_header(bytes(batch))
    assert (claimed.base_offset, claimed.last_offset, claimed.records_count) == (70, 72, 3)
    assert claimed.size == 3 + LOG_OVERHEAD


def test_header_size_up_to_magic():
    batch = encode_values([b"x"], 0, NOW)
    assert batch[MAGIC_OFFSET] == 2
    assert read_batch_header(batch[: HEADER_SIZE_UP_TO_MAGIC - 1], 0) is None

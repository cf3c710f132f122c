"""Legacy v0/v1 message sets (seglogfs/records/legacy.py): written by kafka-python, by hand and by real
brokers, read by seglogfs; compressed wrappers; messages no valid entry holds.

Facts: docs/kafka-format.md sections 1 (formats) and 9 (kafka-python as an oracle, real broker bytes).
"""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from support.record_batches import (
    LEGACY_CODECS,
    NOW,
    PATH,
    builder_rows,
    fix_legacy_crc,
    kafka_python_build,
    kp_parse,
    raw_legacy,
    sl_parse,
)

from seglogfs.compression import Compression, compress, decompress
from seglogfs.errors import CorruptRecordError
from seglogfs.records import (
    LOG_OVERHEAD,
    TimestampType,
    decode_batch,
    decode_batch_all,
    decode_batch_columns,
    iter_batch_headers,
    validate_batch,
)

# ====================================== kafka-python writes, seglogfs reads


@pytest.mark.parametrize("codec", LEGACY_CODECS[1:], ids=lambda c: c.kafka_name)
def test_v1_wrapper_with_absolute_last_offset(codec):
    """A broker-written v1 wrapper carries the absolute offset of its last inner message, and its max
    timestamp (inside the CRC); inner offsets stay relative."""
    rows = builder_rows(1, n=9)
    buf = bytearray(kafka_python_build(1, codec, rows))
    n = len(rows)
    struct.pack_into(">q", buf, 0, 1000 + n - 1)  # the offset is outside the CRC
    struct.pack_into(">q", buf, 18, max(r[0] for r in rows))  # the timestamp is inside it
    with pytest.raises(CorruptRecordError):
        validate_batch(bytes(buf), next(iter_batch_headers(bytes(buf))))
    fix_legacy_crc(buf)
    buf = bytes(buf)
    _, krecords = kp_parse(buf)
    (h,) = list(iter_batch_headers(buf))
    assert h.base_offset == h.last_offset == 1000 + n - 1
    assert h.max_timestamp == max(r[0] for r in rows)
    _, records = sl_parse(buf)
    assert records == krecords
    assert [r[0] for r in records] == list(range(1000, 1000 + n))
    assert [r[1] for r in records] == [r[0] for r in rows]


@pytest.mark.parametrize("codec", LEGACY_CODECS[1:], ids=lambda c: c.kafka_name)
def test_v0_wrapper_inner_offsets_are_absolute(codec):
    rows = builder_rows(0, n=6)
    buf = bytearray(kafka_python_build(0, codec, rows, offset=500))
    n = len(rows)
    struct.pack_into(">q", buf, 0, 500 + n - 1)
    buf = bytes(buf)
    _, krecords = kp_parse(buf)
    headers, records = sl_parse(buf)
    assert records == krecords
    assert [r[0] for r in records] == list(range(500, 500 + n))
    assert {r[1] for r in records} == {-1} and {r[2] for r in records} == {-1}
    assert headers[0].timestamp_type == TimestampType.NO_TIMESTAMP


@pytest.mark.parametrize("codec", LEGACY_CODECS[1:], ids=lambda c: c.kafka_name)
def test_v1_log_append_time_wrapper_overrides_inner_timestamps(codec):
    rows = builder_rows(1, n=5)
    buf = bytearray(kafka_python_build(1, codec, rows))
    struct.pack_into(">q", buf, 0, 77 + len(rows) - 1)
    buf[17] |= 0x08  # wrapper attributes: LogAppendTime
    struct.pack_into(">q", buf, 18, NOW + 99)
    fix_legacy_crc(buf)
    buf = bytes(buf)
    _, krecords = kp_parse(buf)
    (h,) = list(iter_batch_headers(buf))
    assert h.timestamp_type == TimestampType.LOG_APPEND_TIME
    _, records = sl_parse(buf)
    assert records == krecords
    assert {r[1] for r in records} == {NOW + 99}
    assert {r[2] for r in records} == {int(TimestampType.LOG_APPEND_TIME)}
    assert [r[0] for r in records] == list(range(77, 77 + len(rows)))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.kafka_name)
def test_legacy_record_batch_builder(magic, codec):
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    values = [b"", None, b"abc", b"z" * 5000]
    for i, v in enumerate(values):
        builder.append(i, timestamp=NOW + i, key=None if i == 2 else b"k", value=v)
    buf = bytes(builder.build())
    mr = MemoryRecords(buf)
    kb = mr.next_batch()
    assert isinstance(kb, LegacyRecordBatch) and kb.validate_crc()
    _, krecords = kp_parse(buf)
    headers, records = sl_parse(buf)
    assert records == krecords
    assert [r[4] for r in records] == values
    assert [r[3] for r in records] == [b"k", b"k", None, b"k"]
    for h in headers:
        assert h.magic == magic and h.compression == int(codec)
        assert h.records_count == 1 and not h.is_control and not h.is_transactional
    if magic == 1:
        assert [r[1] for r in records] == [NOW + i for i in range(len(values))]


# ====================================== real broker bytes (kafka-python fixtures)


# Captured from Kafka 0.10 / 0.11 brokers; copied from kafka-python's test/record/test_records.py
# (dpkp/kafka-python, Apache-2.0).

KP_V1 = [
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x19G\x86(\xc2\x01\x00\x00"
    b"\x00\x01^\x18g\xab\xae\xff\xff\xff\xff\x00\x00\x00\x03123",
    b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x16\xef\x98\xc9 \x01\x00"
    b"\x00\x00\x01^\x18g\xaf\xc0\xff\xff\xff\xff\x00\x00\x00\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x16_\xaf\xfb^\x01\x00\x00"
    b"\x00\x01^\x18g\xb0r\xff\xff\xff\xff\x00\x00\x00\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x19\xa8\x12W \x01\x00\x00"
    b"\x00\x01^\x18g\xb8\x03\xff\xff\xff\xff\x00\x00\x00\x03123",
]


KP_V0 = [
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x11\xfe\xb0\x1d\xbf\x00"
    b"\x00\xff\xff\xff\xff\x00\x00\x00\x03123",
    b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x0eyWH\xe0\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x0eyWH\xe0\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x11\xfe\xb0\x1d\xbf\x00"
    b"\x00\xff\xff\xff\xff\x00\x00\x00\x03123",
]


def test_real_broker_v1_messages():
    buf = b"".join(KP_V1)
    headers, records = sl_parse(buf)
    assert [h.magic for h in headers] == [1, 1, 1, 1]
    assert headers[0].crc == 1199974594
    assert [r[4] for r in records] == [b"123", b"", b"", b"123"]
    assert records[0][1] == 1503648000942 and {r[2] for r in records} == {0}
    assert kp_parse(buf)[1] == records


def test_real_broker_v0_messages():
    buf = b"".join(KP_V0)
    headers, records = sl_parse(buf)
    assert headers[0].crc == -22012481 & 0xFFFFFFFF
    assert [r[:3] for r in records] == [(i, -1, -1) for i in range(4)]
    assert [r[4] for r in records] == [b"123", b"", b"", b"123"]
    assert kp_parse(buf)[1] == records


# ====================================== corruption


def _legacy_body(magic, key_len, tail, attributes=0):
    """A legacy message whose fields after the key length are ``tail`` verbatim (CRC fixed)."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", NOW) if magic == 1 else b"")
    body += struct.pack(">i", key_len) + tail
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", 0, len(body) + 4, crc) + body


EMPTY_GZ = gzip.compress(b"")


JUNK_GZ = gzip.compress(struct.pack(">qi", 0, 20) + b"\x00" * 20)  # an inner message of magic 0, size 20


TINY_GZ = gzip.compress(struct.pack(">qi", 0, 2) + b"\x00\x00")  # inner entry too short for a header


# an inner v1 message of 14 bytes: room for the v0 fields only
SHORT_V1_GZ = gzip.compress(struct.pack(">qiIbb", 0, 14, 0, 1, 0) + b"\x00" * 8)


GARBAGE_LEGACY = {
    "key-past-message": _legacy_body(1, 100, b"\x00\x00\x00\x00\x00\x00"),
    "value-past-message": _legacy_body(1, -1, struct.pack(">i", 50) + b"abc"),
    "v0-key-past-message": _legacy_body(0, 30, b"abcdefgh"),
    "fields-shorter-than-size": _legacy_body(1, -1, struct.pack(">i", 1) + b"a" + b"junk"),
    "compressed-null-value": _legacy_body(1, -1, struct.pack(">i", -1), attributes=1),
    "compressed-garbage": _legacy_body(1, -1, struct.pack(">i", 8) + b"notgzip!", attributes=1),
    "compressed-empty-inner-set": _legacy_body(
        1, -1, struct.pack(">i", len(EMPTY_GZ)) + EMPTY_GZ, attributes=1
    ),
    "compressed-inner-garbage": _legacy_body(1, -1, struct.pack(">i", len(JUNK_GZ)) + JUNK_GZ, attributes=1),
    "compressed-inner-too-short": _legacy_body(
        1, -1, struct.pack(">i", len(TINY_GZ)) + TINY_GZ, attributes=1
    ),
    "compressed-inner-v1-too-short": _legacy_body(
        1, -1, struct.pack(">i", len(SHORT_V1_GZ)) + SHORT_V1_GZ, attributes=1
    ),
}


@pytest.mark.parametrize("case", list(GARBAGE_LEGACY))
@pytest.mark.parametrize(
    "decoder", [decode_batch, decode_batch_all, decode_batch_columns], ids=lambda f: f.__name__
)
def test_garbage_legacy_messages_raise_corrupt_record_error(case, decoder):
    prefix = raw_legacy(1, b"k", b"v")
    buf = prefix + GARBAGE_LEGACY[case]
    h = list(iter_batch_headers(buf, path=PATH))[1]
    validate_batch(buf, h, path=PATH)
    with pytest.raises(CorruptRecordError) as err:
        decoder(buf, h, path=PATH)
    assert err.value.position == len(prefix)
    assert PATH in str(err.value)


@settings(max_examples=1500, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(LEGACY_CODECS),
    values=st.lists(st.binary(max_size=40), min_size=1, max_size=4),
    data=st.data(),
)
def test_property_mutated_legacy_messages_decode_or_raise_corrupt(magic, codec, values, data):
    """Mutate a legacy entry (or the inner message set of a compressed wrapper, recompressed), fix its
    CRC-32: decoding either succeeds or raises CorruptRecordError."""
    buf = bytearray(kafka_python_build(magic, codec, [(NOW, b"k", v, []) for v in values]))
    (length,) = struct.unpack_from(">i", buf, 8)
    first_end = LOG_OVERHEAD + length  # mutate the first entry only
    key_pos = 18 if magic == 0 else 26
    if codec == Compression.NONE:
        for _ in range(data.draw(st.integers(1, 3))):
            buf[data.draw(st.integers(key_pos, first_end - 1))] = data.draw(st.integers(0, 255))
    else:
        value_pos = key_pos + 4  # wrappers have a null key
        (vlen,) = struct.unpack_from(">i", buf, value_pos)
        inner = bytearray(decompress(codec, bytes(buf[value_pos + 4 : value_pos + 4 + vlen])))
        for _ in range(data.draw(st.integers(1, 3))):
            inner[data.draw(st.integers(0, len(inner) - 1))] = data.draw(st.integers(0, 255))
        packed = compress(codec, bytes(inner))
        buf = bytearray(buf[:value_pos]) + struct.pack(">i", len(packed)) + packed
        struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
        first_end = len(buf)
    fix_legacy_crc(buf)
    entry = bytes(buf[:first_end])
    try:
        (h,) = list(iter_batch_headers(entry, path=PATH))
    except (CorruptRecordError, ValueError):
        return  # the outer header itself no longer parses: not what this property is about
    validate_batch(entry, h, path=PATH)
    for decoder in (decode_batch, decode_batch_all, decode_batch_columns):
        try:
            decoder(entry, h, path=PATH)
        except CorruptRecordError as exc:
            assert exc.position == 0 and exc.path == PATH

"""Encoding (seglogfs/records/encode.py): seglogfs writes v2 batches, kafka-python (an independent
oracle) and seglogfs read them back; round-trip properties.

Facts: docs/kafka-format.md section 1 (formats).
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.record_batches import (
    CODECS,
    NOW,
    TS_TYPES,
    as_tuple,
    assert_v2_header_matches,
    columns_as_tuples,
    expected_tuples,
    kp_parse,
    record_st,
    rich_records,
    sl_parse,
)

from seglogfs.compression import Compression
from seglogfs.records import (
    LOG_OVERHEAD,
    V2_HEADER_SIZE,
    ProducerRecord,
    Record,
    TimestampType,
    decode_batch,
    decode_batch_columns,
    encode_batch,
    encode_values,
    iter_batch_headers,
    single_value_batch_size,
    validate_batch,
)
from seglogfs.records.encode import KeyedValues, NoSeparatorError, encode_keyed_values

# ====================================== helpers


def _xerial_block_count(area: bytes) -> int:
    assert area[:8] == b"\x82SNAPPY\x00"
    pos, n = 16, 0
    while pos < len(area):
        pos += 4 + struct.unpack_from(">i", area, pos)[0]
        n += 1
    return n


def _lz4_block_count(area: bytes) -> int:
    assert area[:4] == struct.pack("<I", 0x184D2204)
    pos, n = 7, 0
    while True:
        (word,) = struct.unpack_from("<I", area, pos)
        pos += 4
        if word == 0:
            return n
        pos += word & 0x7FFFFFFF
        n += 1


# ====================================== seglogfs writes, kafka-python reads


@pytest.mark.parametrize("ts_type", TS_TYPES, ids=lambda t: t.kafka_name)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_encode_batch_read_by_kafka_python(codec, ts_type):
    records = rich_records()
    base = 1234567
    batch = encode_batch(records, base, now_ms=NOW, compression=codec, timestamp_type=ts_type, leader_epoch=9)
    kbatches, krecords = kp_parse(batch)
    assert len(kbatches) == 1
    kb = kbatches[0]
    assert kb.base_offset == base
    assert kb.last_offset_delta == len(records) - 1
    assert kb.records_count == len(records)
    assert kb.compression_type == int(codec)
    assert kb.timestamp_type == int(ts_type)
    assert kb.leader_epoch == 9
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (-1, -1, -1)
    assert not kb.is_control_batch and not kb.is_transactional
    expected = expected_tuples(records, base, NOW, ts_type)
    assert krecords == expected
    if ts_type == TimestampType.CREATE_TIME:
        assert kb.first_timestamp == NOW - 5
        assert kb.max_timestamp == NOW + 1000
    else:
        assert kb.first_timestamp == kb.max_timestamp == NOW
    # and seglogfs reads its own batch identically
    headers, records_sl = sl_parse(batch)
    assert len(headers) == 1
    assert_v2_header_matches(headers[0], kb)
    assert records_sl == expected


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4])
def test_large_values_span_several_codec_blocks(codec):
    records = rich_records()
    batch = encode_batch(records, 0, now_ms=NOW, compression=codec)
    area = batch[V2_HEADER_SIZE:]
    if codec == Compression.SNAPPY:
        assert _xerial_block_count(area) >= 10  # > 320 KiB of records in 32 KiB xerial blocks
    else:
        assert _lz4_block_count(area) >= 5  # 64 KiB LZ4 frame blocks
    _, krecords = kp_parse(batch)
    assert [r[4] for r in krecords] == [r.value for r in records]


@pytest.mark.parametrize("ts_type", TS_TYPES, ids=lambda t: t.kafka_name)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("n", [1, 5000])
def test_encode_values_read_by_kafka_python(codec, ts_type, n):
    rnd = random.Random(n)
    values = [rnd.randbytes(rnd.choice((0, 1, 7, 100, 130))) for _ in range(n)]
    if n > 1:
        values[17] = b""
        values[-1] = b"x" * 70_000  # > 64 KiB: several codec blocks
    ts = NOW - 3600_000
    batch = encode_values(values, 42, ts, compression=codec, timestamp_type=ts_type, leader_epoch=3)
    kbatches, krecords = kp_parse(batch)
    (kb,) = kbatches
    assert (kb.base_offset, kb.last_offset_delta, kb.records_count) == (42, n - 1, n)
    assert (kb.first_timestamp, kb.max_timestamp) == (ts, ts)
    assert kb.compression_type == int(codec) and kb.timestamp_type == int(ts_type)
    assert krecords == [(42 + i, ts, int(ts_type), None, v, ()) for i, v in enumerate(values)]
    headers, records_sl = sl_parse(batch)
    assert_v2_header_matches(headers[0], kb)
    assert records_sl == krecords


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("n", [1, 5000])
def test_encode_batch_many_records_read_by_kafka_python(codec, n):
    rnd = random.Random(n + int(codec))
    records = [
        ProducerRecord(
            value=None if i % 97 == 3 else rnd.randbytes(rnd.randrange(0, 200)),
            key=None if i % 3 else str(i).encode(),
            headers=(("i", str(i).encode()),) if i % 11 == 0 else (),
            timestamp=NOW + rnd.randrange(-100_000, 100_000),
        )
        for i in range(n)
    ]
    base = 2**40 + 5
    batch = encode_batch(records, base, now_ms=NOW, compression=codec)
    kbatches, krecords = kp_parse(batch)
    assert kbatches[0].records_count == n
    assert krecords == expected_tuples(records, base, NOW, TimestampType.CREATE_TIME)
    assert kbatches[0].max_timestamp == max(r.timestamp for r in records)
    assert kbatches[0].first_timestamp == records[0].timestamp
    assert sl_parse(batch)[1] == krecords


def test_concatenated_batches_read_by_kafka_python():
    buf = b"".join(
        encode_batch([ProducerRecord(f"v{i}".encode(), timestamp=NOW + i)], i, now_ms=NOW, compression=c)
        for i, c in enumerate(CODECS)
    )
    kbatches, krecords = kp_parse(buf)
    assert [b.base_offset for b in kbatches] == list(range(len(CODECS)))
    assert [r[4] for r in krecords] == [f"v{i}".encode() for i in range(len(CODECS))]
    headers, records = sl_parse(buf)
    assert [h.position for h in headers] == list(np.cumsum([0] + [h.size for h in headers[:-1]]))
    for h, kb in zip(headers, kbatches, strict=True):
        assert_v2_header_matches(h, kb)
    assert records == krecords


def test_encode_rejects_bad_input():
    with pytest.raises(ValueError):
        encode_batch([], 0, now_ms=NOW)
    with pytest.raises(ValueError):
        encode_values([], 0, NOW)
    with pytest.raises(TypeError):
        encode_batch([ProducerRecord("text")], 0, now_ms=NOW)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_batch([ProducerRecord(b"v", key="k")], 0, now_ms=NOW)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_batch([ProducerRecord(b"v", headers=((b"k", b"v"),))], 0, now_ms=NOW)  # type: ignore[arg-type]


def test_batch_sizes_are_consistent_with_length_field():
    for codec in CODECS:
        batch = encode_batch(rich_records(), 0, now_ms=NOW, compression=codec)
        (h,) = list(iter_batch_headers(batch))
        assert h.size == len(batch) == struct.unpack_from(">i", batch, 8)[0] + LOG_OVERHEAD
        assert h.end_position == len(batch)
        assert batch[16] == 2


@pytest.mark.parametrize("value_size", [0, 1, 57, 58, 63, 64, 8000, 8191, 8192, 1 << 20])
def test_single_value_batch_size_is_exact(value_size):
    batch = encode_values([b"v" * value_size], 0, NOW)
    assert single_value_batch_size(value_size) == len(batch)


# ====================================== properties


def _check_roundtrip(records, codec, ts_type, base_offset, now_ms):
    batch = encode_batch(records, base_offset, now_ms=now_ms, compression=codec, timestamp_type=ts_type)
    (h,) = list(iter_batch_headers(batch))
    validate_batch(batch, h)
    assert (h.base_offset, h.last_offset, h.records_count) == (
        base_offset,
        base_offset + len(records) - 1,
        len(records),
    )
    expected = [
        Record(off, ts, TimestampType(tt), k, v, hs)
        for off, ts, tt, k, v, hs in expected_tuples(records, base_offset, now_ms, ts_type)
    ]
    decoded = decode_batch(batch, h)
    assert decoded == expected
    assert h.max_timestamp == max(r.timestamp for r in expected)
    cols = decode_batch_columns(batch, h)
    assert columns_as_tuples(cols) == [as_tuple(r) for r in expected]
    keys, values = cols.keys_and_values()
    assert keys == [r.key for r in records]
    assert values == [r.value for r in records]
    return batch


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_st, min_size=1, max_size=40),
    codec=st.sampled_from(CODECS),
    ts_type=st.sampled_from(TS_TYPES),
    base_offset=st.integers(0, 2**62),
    now_ms=st.integers(0, 2**42),
)
def test_property_encode_decode_round_trip(records, codec, ts_type, base_offset, now_ms):
    batch = _check_roundtrip(records, codec, ts_type, base_offset, now_ms)
    # and kafka-python reads the same
    _, krecords = kp_parse(batch)
    assert krecords == expected_tuples(records, base_offset, now_ms, ts_type)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.binary(max_size=300), min_size=1, max_size=200),
    codec=st.sampled_from(CODECS),
    ts_type=st.sampled_from(TS_TYPES),
    ts=st.integers(0, 2**42),
)
def test_property_encode_values_round_trip(values, codec, ts_type, ts):
    batch = encode_values(values, 5, ts, compression=codec, timestamp_type=ts_type)
    (h,) = list(iter_batch_headers(batch))
    validate_batch(batch, h)
    assert decode_batch(batch, h) == [Record(5 + i, ts, ts_type, None, v, ()) for i, v in enumerate(values)]
    cols = decode_batch_columns(batch, h)
    keys, decoded_values = cols.keys_and_values()
    assert decoded_values == values
    assert keys == [None] * len(values)
    assert (cols.key_lengths == -1).all()


def test_many_random_records_round_trip_every_codec():
    rnd = random.Random(3)
    records = [
        ProducerRecord(
            rnd.randbytes(rnd.randrange(300)) if rnd.random() > 0.1 else None,
            rnd.randbytes(rnd.randrange(20)) if rnd.random() > 0.5 else None,
            tuple((f"h{j}", rnd.randbytes(3) if j else None) for j in range(rnd.randrange(3))),
            NOW + rnd.randrange(-(10**6), 10**6),
        )
        for _ in range(3000)
    ]
    for codec in CODECS:
        for ts_type in TS_TYPES:
            _check_roundtrip(records, codec, ts_type, 77, NOW)


@pytest.mark.parametrize("ts_type", TS_TYPES, ids=lambda t: t.kafka_name)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("n", [1, 3000])
def test_encode_keyed_values_is_encode_batch_of_the_same_records(codec, ts_type, n):
    """The keyed fast path writes exactly the batch encode_batch writes, and kafka-python reads it."""
    rnd = random.Random(n)
    keys = [rnd.randbytes(rnd.choice((0, 1, 9, 200))) for _ in range(n)]
    values = [rnd.randbytes(rnd.choice((0, 1, 7, 100, 130))) for _ in range(n)]
    if n > 1:
        values[-1] = b"x" * 70_000
    ts = NOW - 5
    pairs = KeyedValues.from_pairs(keys, values)
    batch = encode_keyed_values(pairs, 7, ts, compression=codec, timestamp_type=ts_type)
    slow = encode_batch(
        [ProducerRecord(key=k, value=v) for k, v in zip(keys, values, strict=True)],
        7,
        now_ms=ts,
        compression=codec,
        timestamp_type=ts_type,
    )
    assert batch == slow
    _, krecords = kp_parse(batch)
    pairs = enumerate(zip(keys, values, strict=True))
    assert krecords == [(7 + i, ts, int(ts_type), k, v, ()) for i, (k, v) in pairs]
    assert kp_parse(slow)[1] == krecords


def test_keyed_values_from_lines_and_slices():
    pairs = KeyedValues.split_lines(b"k1::v1\n::\nkey::x:y", b"::")
    assert len(pairs) == 3
    batch = encode_keyed_values(pairs.slice(1, 3), 10, NOW)
    assert [(r[3], r[4]) for r in kp_parse(batch)[1]] == [(b"", b""), (b"key", b"x:y")]
    whole = kp_parse(encode_keyed_values(pairs, 0, NOW))[1]
    assert [(r[3], r[4]) for r in whole] == [(b"k1", b"v1"), (b"", b""), (b"key", b"x:y")]


def test_encode_keyed_values_refuses_bad_input():
    with pytest.raises(ValueError, match="2 keys for 1 values"):
        KeyedValues.from_pairs([b"a", b"b"], [b"v"])
    with pytest.raises(NoSeparatorError, match="line 1 has no key separator"):
        KeyedValues.split_lines(b"ab:c\na:b\na\n:", b"b:")
    with pytest.raises(NoSeparatorError, match="line 0 has"):  # no match across two lines
        KeyedValues.split_lines(b"ab\n:b:", b"b:")
    for text, missing in ((b"a:\nb", 1), (b"a:\n", 1), (b"a", 0), (b"", 0), (b":\n:\n\n:", 2)):
        with pytest.raises(NoSeparatorError) as caught:
            KeyedValues.split_lines(text, b":")
        assert caught.value.line == missing
    assert len(KeyedValues.split_lines(b":\n:", b":")) == 2
    with pytest.raises(ValueError, match="at least one record"):
        encode_keyed_values(KeyedValues.from_pairs([], []), 0, NOW)

"""v2 decoding (seglogfs/records/decode.py): batches written by kafka-python (an independent oracle) and
by real brokers read by seglogfs, control batches, records areas no valid batch holds, and properties.

Facts: docs/kafka-format.md sections 1 (formats) and 9 (kafka-python as an oracle: its builders
are producer-style, v2 baseOffset 0, legacy compressed wrappers at offset 0).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import ControlRecord, DefaultRecordBatch, DefaultRecordBatchBuilder
from support.record_batches import (
    BUILDER_CASES,
    CODECS,
    NOW,
    PATH,
    TS_TYPES,
    as_tuple,
    assert_v2_header_matches,
    builder_rows,
    columns_as_tuples,
    fix_v2_crc,
    kafka_python_build,
    kp_parse,
    raw_record,
    raw_v2_batch,
    record_st,
    sl_parse,
    varint,
)

from seglogfs.compression import Compression
from seglogfs.errors import CorruptRecordError
from seglogfs.records import (
    V2_HEADER_SIZE,
    ProducerRecord,
    RecordColumns,
    TimestampType,
    decode_batch,
    decode_batch_all,
    decode_batch_columns,
    decode_record,
    encode_batch,
    encode_values,
    first_record_stamp,
    iter_batch_headers,
    record_bounds,
    validate_batch,
)

# ====================================== kafka-python writes, seglogfs reads


@pytest.mark.parametrize(
    ("magic", "codec"), BUILDER_CASES, ids=[f"v{m}-{c.kafka_name}" for m, c in BUILDER_CASES]
)
def test_memory_records_builder_read_by_seglogfs(magic, codec):
    rows = builder_rows(magic)
    buf = kafka_python_build(magic, codec, rows)
    kbatches, krecords = kp_parse(buf)
    headers, records = sl_parse(buf)
    assert records == krecords
    # and against what was appended, independently of kafka-python's reader
    ts_type = -1 if magic == 0 else 0
    expected = [
        (i, -1 if magic == 0 else ts, ts_type, key, value, tuple(hs))
        for i, (ts, key, value, hs) in enumerate(rows)
    ]
    assert records == expected
    for h in headers:
        assert h.magic == magic
        assert int(h.timestamp_type) == ts_type
    if magic == 2:
        (h,) = headers
        assert_v2_header_matches(h, kbatches[0])
        assert h.compression == int(codec)
    elif codec == Compression.NONE:
        assert len(headers) == len(rows)  # one legacy entry per message
        assert [h.base_offset for h in headers] == [h.last_offset for h in headers] == list(range(len(rows)))
    else:
        (h,) = headers  # one compressed wrapper, producer-style at offset 0
        assert h.base_offset == 0 and h.compression == int(codec)
        assert [r.offset for r in decode_batch_all(buf, h)] == list(range(len(rows)))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_v2_builder_batch_patched_to_log_position(codec):
    """baseOffset and partitionLeaderEpoch are outside the CRC: a broker sets them on append."""
    rows = builder_rows(2, n=12)
    buf = bytearray(kafka_python_build(2, codec, rows))
    struct.pack_into(">q", buf, 0, 10_000)
    struct.pack_into(">i", buf, 12, 17)
    buf = bytes(buf)
    kbatches, krecords = kp_parse(buf)
    headers, records = sl_parse(buf)
    assert headers[0].leader_epoch == 17 and headers[0].base_offset == 10_000
    assert_v2_header_matches(headers[0], kbatches[0])
    assert records == krecords
    assert [r[0] for r in records] == list(range(10_000, 10_000 + len(rows)))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_v2_builder_batch_with_log_append_time(codec):
    rows = builder_rows(2, n=6)
    buf = bytearray(kafka_python_build(2, codec, rows))
    struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x08)
    struct.pack_into(">q", buf, 35, NOW + 12345)  # maxTimestamp = broker time
    fix_v2_crc(buf)
    buf = bytes(buf)
    _, krecords = kp_parse(buf)
    headers, records = sl_parse(buf)
    assert headers[0].timestamp_type == TimestampType.LOG_APPEND_TIME
    assert records == krecords
    assert {r[1] for r in records} == {NOW + 12345}


def test_default_record_batch_builder_with_producer_state():
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(Compression.ZSTD),
        is_transactional=True,
        producer_id=123456789,
        producer_epoch=7,
        base_sequence=2**31 - 3,  # the sequence wraps at Int.MAX
        batch_size=1 << 20,
    )
    for i in range(6):
        builder.append(i, timestamp=NOW + i, key=b"k%d" % i, value=b"v" * i, headers=[("n", b"%d" % i)])
    buf = bytes(builder.build())
    kbatches, krecords = kp_parse(buf)
    headers, records = sl_parse(buf)
    (h,) = headers
    assert_v2_header_matches(h, kbatches[0])
    assert h.is_transactional and not h.is_control
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (123456789, 7, 2**31 - 3)
    assert h.last_sequence == 2  # 2**31-3 + 5 wraps to 2
    assert records == krecords
    assert [d.sequence for d in decode_batch_all(buf, h)] == [2**31 - 3, 2**31 - 2, 2**31 - 1, 0, 1, 2]


# ====================================== real broker bytes (kafka-python fixtures)


# Captured from Kafka 0.10 / 0.11 brokers; copied from kafka-python's test/record/test_records.py
# (dpkp/kafka-python, Apache-2.0). The fourth v2 batch is a separate capture (base offset 0 again).

KP_V2 = [
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00;\x00\x00\x00\x01\x02\x03"
    b"\x18\xa2p\x00\x00\x00\x00\x00\x00\x00\x00\x01]\xff{\x06<\x00\x00\x01]"
    b"\xff{\x06<\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00"
    b"\x00\x00\x01\x12\x00\x00\x00\x01\x06123\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00@\x00\x00\x00\x02\x02\xc8"
    b"\\\xbd#\x00\x00\x00\x00\x00\x01\x00\x00\x01]\xff|\xddl\x00\x00\x01]\xff"
    b"|\xde\x14\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00"
    b"\x00\x00\x02\x0c\x00\x00\x00\x01\x00\x00\x0e\x00\xd0\x02\x02\x01\x00"
    b"\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00;\x00\x00\x00\x02\x02.\x0b"
    b"\x85\xb7\x00\x00\x00\x00\x00\x00\x00\x00\x01]\xff|\xe7\x9d\x00\x00\x01]"
    b"\xff|\xe7\x9d\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    b"\x00\x00\x00\x01\x12\x00\x00\x00\x01\x06123\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00E\x00\x00\x00\x00\x02\\"
    b"\xd8\xefR\x00\x00\x00\x00\x00\x00\x00\x00\x01e\x85\xb6\xf3\xc1\x00\x00"
    b"\x01e\x85\xb6\xf3\xc1\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    b"\xff\xff\x00\x00\x00\x01&\x00\x00\x00\x01\x06hdr\x02\x08hkey\x08hval",
]


# Synthetic control batch (its CRC does not match, docs/kafka-format.md section 9).
KP_CONTROL = (
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00R\x00\x00\x00\x00"
    b"\x02e\x97\xff\xd0\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    b"\x98\x96\x7f\x00\x00\x00\x00\x00\x98\x96"
    b"\x7f\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    b"\x00\x00\x00\x01@\x00\x00\x00\x08\x00\x00\x00\x00,opaque-control-message\x00"
)


def test_real_broker_v2_batches():
    buf = b"".join(KP_V2)
    headers, records = sl_parse(buf)  # CRC-32C valid on all four
    assert len(headers) == 4
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [
        (0, 0, 1),
        (1, 2, 2),
        (3, 3, 1),
        (0, 0, 1),
    ]
    assert [h.leader_epoch for h in headers] == [1, 2, 2, 0]
    assert [r[0] for r in records] == [0, 1, 2, 3, 0]
    assert [r[4] for r in records] == [b"123", b"", b"", b"123", b"hdr"]
    assert records[0][1] == 1503229838908 and records[0][2] == 0 and records[0][3] is None
    assert records[4][5] == (("hkey", b"hval"),)
    assert kp_parse(buf)[1] == records
    # a 4-byte tail is not a batch
    assert [h.position for h in iter_batch_headers(buf + b"\x00" * 4)] == [h.position for h in headers]


def test_synthetic_control_fixture_has_a_bad_crc_and_no_user_records():
    (h,) = list(iter_batch_headers(KP_CONTROL))
    assert h.is_control
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(KP_CONTROL, h, path=PATH)
    assert decode_batch(KP_CONTROL, h) == []
    (control,) = decode_batch_all(KP_CONTROL, h)
    assert control.is_control and control.key == b"\x00\x00\x00\x00"  # version 0, ABORT


# ====================================== control batches


def _commit_marker_batch(base_offset: int, epoch: int) -> bytes:
    key = struct.pack(">hh", 0, 1)  # version 0, COMMIT
    value = struct.pack(">hi", 0, epoch)
    area = raw_record(0, 0, key, value)
    return raw_v2_batch(
        area,
        1,
        base_offset=base_offset,
        attributes=0x30,  # control + transactional
        producer_id=4242,
        producer_epoch=3,
        leader_epoch=5,
    )


def test_control_batch_commit_marker():
    data = encode_batch([ProducerRecord(b"txn-1", timestamp=NOW)], 10, now_ms=NOW)
    marker = _commit_marker_batch(11, epoch=88)
    buf = data + marker
    kbatches, krecords = kp_parse(buf)
    assert kbatches[1].is_control_batch
    headers, records = sl_parse(buf)
    assert records == krecords == [(10, NOW, 0, None, b"txn-1", ())]
    h = headers[1]
    assert h.is_control and h.is_transactional and h.attributes == 0x30
    assert (h.base_offset, h.last_offset, h.producer_id, h.producer_epoch) == (11, 11, 4242, 3)
    assert_v2_header_matches(h, kbatches[1])
    assert decode_batch(buf, h) == []
    assert len(decode_batch_columns(buf, h)) == 0
    (control,) = decode_batch_all(buf, h, path=PATH)
    assert control.is_control
    assert control.offset == 11 and control.timestamp == NOW
    assert control.key == b"\x00\x00\x00\x01"
    assert control.value == b"\x00\x00" + struct.pack(">i", 88)
    assert control.sequence == -1
    # kafka-python agrees it is a COMMIT marker
    (krec,) = list(DefaultRecordBatch(marker))
    assert isinstance(krec, ControlRecord) and krec.commit and krec.version == 0


def test_control_batch_abort_and_leader_change_are_not_user_records():
    abort = raw_v2_batch(
        raw_record(0, 0, struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 1)), 1, attributes=0x30
    )
    leader = raw_v2_batch(
        raw_record(0, 0, struct.pack(">hh", 0, 2), b"\x00\x00\x00\x01"), 1, base_offset=1, attributes=0x20
    )
    buf = abort + leader
    headers, records = sl_parse(buf)
    assert records == []
    assert [h.is_control for h in headers] == [True, True]
    assert [h.is_transactional for h in headers] == [True, False]
    assert [d.key for h in headers for d in decode_batch_all(buf, h)] == [
        b"\x00\x00\x00\x00",
        b"\x00\x00\x00\x02",
    ]


def test_transactional_data_batch_is_a_user_batch():
    area = raw_record(0, 0, b"k", b"v") + raw_record(1, 5, None, b"w")
    buf = raw_v2_batch(
        area, 2, base_offset=7, attributes=0x10, producer_id=9, producer_epoch=0, base_sequence=0
    )
    headers, records = sl_parse(buf)
    assert headers[0].is_transactional and not headers[0].is_control
    assert records == [(7, NOW, 0, b"k", b"v", ()), (8, NOW + 5, 0, None, b"w", ())]
    assert kp_parse(buf)[1] == records


def test_delete_horizon_batch_decodes():
    """Bit 0x40 (KIP-534): baseTimestamp holds the delete horizon; the batch still validates and decodes."""
    area = raw_record(0, 0, b"k", None)
    buf = raw_v2_batch(area, 1, attributes=0x40, base_ts=NOW + 86_400_000, max_ts=NOW)
    (h,) = list(iter_batch_headers(buf))
    assert h.has_delete_horizon
    validate_batch(buf, h)
    (rec,) = decode_batch(buf, h)
    assert rec.key == b"k" and rec.value is None


def test_empty_batch_left_by_compaction():
    buf = raw_v2_batch(b"", 0, base_offset=100, last_delta=9, base_ts=-1, max_ts=-1)
    (h,) = list(iter_batch_headers(buf))
    validate_batch(buf, h)
    assert (h.base_offset, h.last_offset, h.next_offset, h.records_count) == (100, 109, 110, 0)
    assert decode_batch(buf, h) == [] and decode_batch_all(buf, h) == []
    assert len(decode_batch_columns(buf, h)) == 0


# ====================================== one record, record bounds, columns


def _mixed_batch() -> bytes:
    records = [
        ProducerRecord(b"v" * (i % 90), None if i % 3 else b"k%d" % i, (("h", b"x"),) if i % 5 == 0 else ())
        for i in range(300)
    ]
    return encode_batch(records, 1000, now_ms=NOW)


def test_record_bounds_and_decode_record_agree_with_decode_batch():
    batch = _mixed_batch()
    (h,) = list(iter_batch_headers(batch))
    bounds = record_bounds(batch, h)
    assert bounds.offset_deltas is None and bounds.area_size == len(batch) - V2_HEADER_SIZE
    expected = decode_batch(batch, h)
    for i, record in enumerate(expected):
        assert bounds.index_of(h.base_offset, record.offset) == i
        start, end = bounds.span(i)
        assert decode_record(batch[V2_HEADER_SIZE + start : V2_HEADER_SIZE + end], h) == record
    assert bounds.index_of(h.base_offset, 999) == bounds.index_of(h.base_offset, 1300) == -1


def test_record_bounds_with_offset_gaps_left_by_compaction():
    area = raw_record(0, 0, b"a", b"1") + raw_record(2, 1, b"b", b"2") + raw_record(5, 2, None, b"3")
    buf = raw_v2_batch(area, 3, base_offset=10, last_delta=5)
    (h,) = list(iter_batch_headers(buf))
    bounds = record_bounds(buf, h)
    assert bounds.offset_deltas.tolist() == [0, 2, 5]
    assert [bounds.index_of(h.base_offset, o) for o in range(10, 17)] == [0, -1, 1, -1, -1, 2, -1]


def test_record_bounds_only_for_uncompressed_v2():
    batch = encode_values([b"x"], 0, NOW, compression=Compression.GZIP)
    with pytest.raises(ValueError):
        record_bounds(batch, next(iter_batch_headers(batch)))


@pytest.mark.parametrize("ts_type", TS_TYPES, ids=lambda t: t.kafka_name)
def test_first_record_stamp(ts_type):
    records = [ProducerRecord(b"a", timestamp=NOW + 7), ProducerRecord(b"b", timestamp=NOW + 9)]
    batch = encode_batch(records, 40, now_ms=NOW + 100, timestamp_type=ts_type)
    (h,) = list(iter_batch_headers(batch))
    stamp = first_record_stamp(batch[V2_HEADER_SIZE : V2_HEADER_SIZE + 32], h)
    assert stamp == (40, NOW + 100 if ts_type == TimestampType.LOG_APPEND_TIME else NOW + 7)
    assert first_record_stamp(b"\xff" * 3, h) is None
    empty = raw_v2_batch(b"", 0, base_offset=5, last_delta=0)
    assert first_record_stamp(b"", next(iter_batch_headers(empty))) is None


def test_columns_records_match_record_by_record_and_select():
    batch = _mixed_batch()
    (h,) = list(iter_batch_headers(batch))
    cols = decode_batch_columns(batch, h)
    assert isinstance(cols, RecordColumns) and len(cols) == 300
    assert cols.records() == [cols.record(i) for i in range(len(cols))] == decode_batch(batch, h)
    mask = cols.offsets % 7 == 0
    picked = cols.select(mask)
    assert picked.records() == [r for r in cols.records() if r.offset % 7 == 0]


# ====================================== corruption


# Records areas that no valid batch holds, each wrapped in a batch with a correct CRC-32C.
GOOD = raw_record(0, 0, b"key", b"value", (("h", b"v"),))


GARBAGE_V2 = {
    "record-length-past-area": (varint(50) + GOOD[1:], 1),
    "count-larger-than-records": (GOOD, 2),
    "bytes-left-over": (GOOD + b"\x00\x00", 1),
    "negative-record-length": (varint(-5) + GOOD[1:], 1),
    "key-past-record": (
        raw_record(0, 0, b"k" * 10, None)[:1] + b"\x00\x00\x00" + varint(40) + b"k" * 10 + b"\x01\x00",
        1,
    ),
    "value-past-record": (varint(8) + b"\x00\x00\x00\x01" + varint(60) + b"ab\x00", 1),
    "negative-header-count": (varint(6) + b"\x00\x00\x00\x01\x01" + varint(-2), 1),
    "header-key-past-record": (varint(9) + b"\x00\x00\x00\x01\x01" + varint(1) + varint(30) + b"ab", 1),
    "negative-header-key-length": (varint(8) + b"\x00\x00\x00\x01\x01" + varint(1) + varint(-3) + b"\x01", 1),
    "header-value-past-record": (
        varint(10) + b"\x00\x00\x00\x01\x01" + varint(1) + varint(1) + b"h" + varint(50) + b"x",
        1,
    ),
    "record-longer-than-fields": (varint(8) + b"\x00\x00\x00\x01\x01\x00\xaa\xbb", 1),
    "varint-too-long": (b"\xff" * 11, 1),
    # a 10-byte record length of 2**63-1: Kafka reads record lengths as int32 varints (at most 5 bytes)
    "record-length-varint-beyond-int64": (varint(2**63 - 1) + GOOD[1:], 1),
    "varint-runs-off-the-end": (varint(3) + b"\x00\xff\xff", 1),
    "empty-area-with-records": (b"", 3),
    "negative-count": (GOOD, -1),
}


@pytest.mark.parametrize("case", list(GARBAGE_V2))
@pytest.mark.parametrize(
    "decoder", [decode_batch, decode_batch_all, decode_batch_columns], ids=lambda f: f.__name__
)
def test_garbage_records_with_valid_crc_raise_corrupt_record_error(case, decoder):
    area, count = GARBAGE_V2[case]
    prefix = encode_batch([ProducerRecord(b"fine")], 0, now_ms=NOW)
    buf = prefix + raw_v2_batch(area, count, base_offset=1, last_delta=0)
    h = list(iter_batch_headers(buf, path=PATH))[1]
    if count >= 0:
        validate_batch(buf, h, path=PATH)  # the CRC is right: only the records are wrong
    with pytest.raises(CorruptRecordError) as err:
        decoder(buf, h, path=PATH)
    assert err.value.position == len(prefix)
    assert PATH in str(err.value)


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.kafka_name)
@pytest.mark.parametrize(
    "decoder", [decode_batch, decode_batch_all, decode_batch_columns], ids=lambda f: f.__name__
)
def test_undecompressible_records_area_raises_corrupt_record_error(codec, decoder):
    buf = raw_v2_batch(b"\xff\x00garbage that is no compressed stream" * 3, 2, attributes=int(codec))
    (h,) = list(iter_batch_headers(buf))
    validate_batch(buf, h)
    with pytest.raises(CorruptRecordError) as err:
        decoder(buf, h, path=PATH)
    assert err.value.position == 0 and PATH in str(err.value)


# ====================================== properties


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 2**41), st.none() | st.binary(max_size=30), st.none() | st.binary(max_size=200)
        ),
        min_size=1,
        max_size=25,
    ),
    magic=st.sampled_from([0, 1, 2]),
    codec=st.sampled_from(CODECS),
)
def test_property_kafka_python_builder_read_by_seglogfs(rows, magic, codec):
    if magic < 2 and codec == Compression.ZSTD:
        codec = Compression.GZIP  # zstd is not allowed in legacy wrappers
    buf = kafka_python_build(magic, codec, [(ts, k, v, []) for ts, k, v in rows])
    _, krecords = kp_parse(buf)
    _, records = sl_parse(buf)
    assert records == krecords
    assert [r[4] for r in records] == [v for _, _, v in rows]


@settings(max_examples=2000, deadline=None)
@given(area=st.binary(max_size=120), count=st.integers(0, 40), codec=st.sampled_from(CODECS))
def test_property_random_records_area_never_crashes_the_decoder(area, count, codec):
    buf = raw_v2_batch(area, count, attributes=int(codec), last_delta=max(count - 1, 0))
    (h,) = list(iter_batch_headers(buf))
    for decoder in (decode_batch, decode_batch_all, decode_batch_columns):
        try:
            decoder(buf, h, path=PATH)
        except CorruptRecordError as exc:
            assert exc.position == 0 and exc.path == PATH


@settings(max_examples=1500, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=6), data=st.data())
def test_property_mutated_records_with_fixed_crc_decode_or_raise_corrupt(records, data):
    batch = bytearray(encode_batch(records, 0, now_ms=NOW))
    n = data.draw(st.integers(1, 4))
    for _ in range(n):
        i = data.draw(st.integers(V2_HEADER_SIZE, len(batch) - 1))
        batch[i] = data.draw(st.integers(0, 255))
    fix_v2_crc(batch)
    buf = bytes(batch)
    (h,) = list(iter_batch_headers(buf))
    validate_batch(buf, h)
    outcomes = []
    for decoder in (decode_batch, decode_batch_columns):
        try:
            outcomes.append(decoder(buf, h, path=PATH))
        except CorruptRecordError as exc:
            assert exc.position == 0
            outcomes.append(None)
    # both decoders judge a batch the same way
    assert (outcomes[0] is None) == (outcomes[1] is None)
    if outcomes[0] is not None:
        assert [as_tuple(r) for r in outcomes[0]] == columns_as_tuples(outcomes[1])

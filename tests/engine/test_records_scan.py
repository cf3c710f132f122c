"""The C records scanner (seglogfs/records/_scan.c, wrapped by seglogfs/records/scan.py) and the fast
paths built on it (``batch_values``, ``batch_values_size``, ``batch_plain_jsonl``, the stream formats):
against kafka-python (an independent oracle) on batches it wrote, on hand-written hostile records
(varints longer than their type, lengths past the record), and on random or mutated bytes (a
CorruptRecordError naming the file and position, or the same answer as the columns, never a crash).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.record_batches import (
    CODECS,
    NOW,
    PATH,
    fix_v2_crc,
    kafka_python_build,
    kp_parse,
    raw_record,
    raw_v2_batch,
    record_st,
    varint,
)

from seglogfs.errors import CorruptRecordError
from seglogfs.jsonl import columns_to_jsonl
from seglogfs.records import (
    V2_HEADER_SIZE,
    Compression,
    batch_plain_jsonl,
    batch_values,
    batch_values_size,
    decode_batch_columns,
    decode_record,
    encode_batch,
    encode_values,
    iter_batch_headers,
    read_batch_header,
    record_bounds,
    records_area,
)
from seglogfs.records import scan as scanner
from seglogfs.stream_format import JSON_LINES, VALUES

ROWS = st.lists(
    st.tuples(st.integers(0, 2**41), st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=150)),
    min_size=1,
    max_size=30,
)


def only_batch(buf: bytes):
    (header,) = list(iter_batch_headers(buf, path=PATH))
    return header


def expected_values(krecords: list[tuple], first_offset: int | None) -> bytes:
    """records' values + newline, from kafka-python's parse."""
    return b"".join(
        (value or b"") + b"\n"
        for offset, _, _, _, value, _ in krecords
        if first_offset is None or offset >= first_offset
    )


def expected_jsonl(krecords: list[tuple]) -> bytes:
    """records.jsonl lines of plain records, built with json from kafka-python's parse."""
    lines = []
    for offset, ts, ts_type, _, value, _ in krecords:
        obj = {
            "offset": offset,
            "timestamp": ts,
            "timestamp_type": ["CreateTime", "LogAppendTime"][ts_type],
            "key": None,
            "value": value.decode("ascii"),
            "headers": [],
        }
        lines.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    return b"".join(lines)


# ====================================== valid batches: kafka-python's answer


@settings(max_examples=400, deadline=None)
@given(rows=ROWS, codec=st.sampled_from(CODECS), cut=st.integers(0, 31))
def test_property_values_of_kafka_python_batches(rows, codec, cut):
    buf = kafka_python_build(2, codec, [(ts, k, v, []) for ts, k, v in rows], offset=100)
    _, krecords = kp_parse(buf)
    header = only_batch(buf)
    first = 100 + cut if cut < 31 else None  # past the last record too
    expected = expected_values(krecords, first)
    assert batch_values(buf, header, path=PATH, first_offset=first) == expected
    assert batch_values_size(buf, header, path=PATH, first_offset=first) == len(expected)
    assert VALUES.render(buf, header, PATH, first) == expected
    assert VALUES.count(buf, header, PATH, first) == len(expected)


@settings(max_examples=300, deadline=None)
@given(rows=ROWS, codec=st.sampled_from(CODECS), data=st.data())
def test_property_scan_fields_match_kafka_python(rows, codec, data):
    headers = data.draw(
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8)), max_size=3)
    )
    buf = kafka_python_build(2, codec, [(ts, k, v, headers) for ts, k, v in rows])
    _, krecords = kp_parse(buf)
    header = only_batch(buf)
    area = records_area(buf, header, PATH)
    fields = scanner.scan_area(area, header.records_count, PATH, header.position)
    raw = bytes(area)
    for i, (offset, ts, _, key, value, hdrs) in enumerate(krecords):
        assert (
            fields[scanner.OFFSET_DELTA, i] == offset
            and header.base_timestamp + fields[scanner.TS_DELTA, i] == ts
        )
        kl, vl = fields[scanner.KEY_LENGTH, i], fields[scanner.VALUE_LENGTH, i]
        assert (None if kl < 0 else raw[fields[scanner.KEY_START, i] :][:kl]) == key
        assert (None if vl < 0 else raw[fields[scanner.VALUE_START, i] :][:vl]) == value
        assert fields[scanner.HEADER_COUNT, i] == len(hdrs)
    assert fields[scanner.START, 0] == 0 and fields[scanner.END, -1] == len(raw)
    assert (fields[scanner.START, 1:] > fields[scanner.START, :-1]).all()


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.binary(max_size=60).filter(lambda v: v.isascii()), min_size=1, max_size=40),
    codec=st.sampled_from(CODECS),
    append_time=st.booleans(),
)
def test_property_plain_jsonl_matches_json_of_kafka_python_records(values, codec, append_time):
    ts_type = 1 if append_time else 0
    buf = kafka_python_build(2, codec, [(NOW + i, None, v, []) for i, v in enumerate(values)])
    if append_time:  # kafka-python's builder writes CreateTime: flag LogAppendTime as a broker would
        patched = bytearray(buf)
        patched[22] |= 0x08
        fix_v2_crc(patched)
        buf = bytes(patched)
    _, krecords = kp_parse(buf)
    assert {r[2] for r in krecords} == {ts_type}
    header = only_batch(buf)
    plain = all(b"\\" not in v and b'"' not in v and all(32 <= c < 128 for c in v) for v in values)
    lines = batch_plain_jsonl(buf, header, path=PATH)
    columns = decode_batch_columns(buf, header, path=PATH)
    assert JSON_LINES.render(buf, header, PATH) == columns_to_jsonl(columns)
    assert JSON_LINES.count(buf, header, PATH) == len(columns_to_jsonl(columns))
    if not plain:
        assert lines is None and batch_plain_jsonl(buf, header, path=PATH, build=False) is None
        return
    assert lines == expected_jsonl(krecords) == columns_to_jsonl(columns)
    assert batch_plain_jsonl(buf, header, path=PATH, build=False) == len(lines)


def test_large_batch_with_every_varint_width():
    """10,000 records: offset deltas cross the one-, two- and three-byte varint widths, and values of
    mixed sizes cross the one- and two-byte record lengths."""
    values = [b"v" * (i % 300) for i in range(10_000)]
    buf = encode_values(values, 5, NOW)
    header = read_batch_header(buf, 0, path=PATH)
    assert batch_values(buf, header, path=PATH) == b"".join(v + b"\n" for v in values)
    assert batch_values(buf, header, path=PATH, first_offset=5 + 9_000) == b"".join(
        v + b"\n" for v in values[9_000:]
    )
    bounds = record_bounds(buf, header, path=PATH)
    assert bounds.offset_deltas is None and bounds.starts.dtype == np.int32
    start, end = bounds.span(8_200)
    record = decode_record(buf[V2_HEADER_SIZE + start : V2_HEADER_SIZE + end], header, path=PATH)
    assert (record.offset, record.value) == (5 + 8_200, values[8_200])


def test_columns_read_an_uncompressed_batch_in_place():
    buf = encode_values([b"a", b"bc"], 0, NOW)
    columns = decode_batch_columns(buf, read_batch_header(buf, 0))
    assert columns.data.base is not None and not columns.data.flags.owndata  # a view, not a copy
    assert columns.records()[1].value == b"bc"


# ====================================== hostile records: CorruptRecordError, never a crash

GOOD = raw_record(0, 0, b"k", b"v")


def padded_varint(value: int, width: int) -> bytes:
    """``value``'s zig-zag varint stretched to ``width`` bytes with continuation groups of zero."""
    short = bytearray(varint(value))
    while len(short) < width:
        short[-1] |= 0x80
        short.append(0)
    return bytes(short)


def rec(body: bytes) -> bytes:
    """A record: its length prefix, then ``body``."""
    return varint(len(body)) + body


NO_KEY_VALUE_HEADERS = varint(-1) + varint(-1) + varint(0)
HOSTILE = {
    # Kafka reads these as int32 varints (at most 5 bytes) and the timestamp delta as an int64 (10)
    "offset-delta-in-6-bytes": rec(b"\x00\x00" + padded_varint(0, 6) + NO_KEY_VALUE_HEADERS),
    "key-length-beyond-int32": rec(b"\x00\x00\x00" + b"\xff\xff\xff\xff\x7f" + varint(-1) + varint(0)),
    "timestamp-delta-in-11-bytes": rec(b"\x00" + padded_varint(0, 11) + b"\x00" + NO_KEY_VALUE_HEADERS),
    "record-length-in-6-bytes": padded_varint(len(GOOD) - 1, 6) + GOOD[1:],
    "key-length-below-minus-one": rec(b"\x00\x00\x00" + varint(-2) + varint(-1) + varint(0)),
    "header-value-length-below-minus-one": rec(
        b"\x00\x00\x00" + varint(-1) + varint(-1) + varint(1) + varint(1) + b"h" + varint(-3)
    ),
    "zero-length-record": varint(0),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_records_raise_corrupt_record_error_naming_file_and_position(case):
    prefix = encode_values([b"fine"], 0, NOW)
    buf = prefix + raw_v2_batch(HOSTILE[case], 1, base_offset=1, last_delta=0)
    header = list(iter_batch_headers(buf, path=PATH))[1]
    fast_paths = [
        lambda: decode_batch_columns(buf, header, path=PATH),
        lambda: record_bounds(buf, header, path=PATH),
        lambda: batch_values(buf, header, path=PATH),
        lambda: batch_values_size(buf, header, path=PATH),
        lambda: batch_plain_jsonl(buf, header, path=PATH),
        lambda: decode_record(HOSTILE[case], header, path=PATH),
    ]
    for call in fast_paths:
        with pytest.raises(CorruptRecordError) as err:
            call()
        assert err.value.position == len(prefix) and err.value.path == PATH
        assert "malformed record" in str(err.value)


def test_the_five_byte_int32_varint_reads_as_before():
    """A key length written in five bytes (padded, still an int32) is not malformed."""
    buf = raw_v2_batch(rec(b"\x00\x00\x00" + padded_varint(1, 5) + b"k" + varint(-1) + varint(0)), 1)
    header = only_batch(buf)
    assert decode_batch_columns(buf, header, path=PATH).records()[0].key == b"k"


def _agree(buf: bytes, first_offset: int | None) -> None:
    """Every fast path answers as the columns do, or all raise CorruptRecordError at the batch."""
    header = only_batch(buf)
    try:
        columns = decode_batch_columns(buf, header, path=PATH)
    except CorruptRecordError as exc:
        assert exc.position == 0 and exc.path == PATH
        for call in (batch_values, batch_values_size, batch_plain_jsonl):
            with pytest.raises(CorruptRecordError):
                call(buf, header, path=PATH, first_offset=first_offset)
        return
    if first_offset is not None and header.base_offset < first_offset:
        columns = columns.select(columns.offsets >= first_offset)
    assert VALUES.render(buf, header, PATH, first_offset) == VALUES.render_columns(columns)
    assert VALUES.count(buf, header, PATH, first_offset) == VALUES.count_columns(columns)
    assert JSON_LINES.render(buf, header, PATH, first_offset) == columns_to_jsonl(columns)
    assert JSON_LINES.count(buf, header, PATH, first_offset) == len(columns_to_jsonl(columns))


@settings(max_examples=2000, deadline=None)
@given(area=st.binary(max_size=120), count=st.integers(-1, 40), codec=st.sampled_from(CODECS))
def test_property_random_records_area_never_crashes_a_fast_path(area, count, codec):
    _agree(raw_v2_batch(area, count, attributes=int(codec), last_delta=max(count - 1, 0)), None)


@settings(max_examples=2000, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=6), data=st.data())
def test_property_mutated_batches_answer_as_the_columns_or_raise(records, data):
    batch = bytearray(encode_batch(records, 0, now_ms=NOW))
    for _ in range(data.draw(st.integers(1, 4))):
        batch[data.draw(st.integers(V2_HEADER_SIZE, len(batch) - 1))] = data.draw(st.integers(0, 255))
    fix_v2_crc(batch)
    _agree(bytes(batch), data.draw(st.none() | st.integers(0, 6)))


def test_a_negative_offset_counts_as_it_renders():
    """An offset delta that puts a record below 0 (damage with a valid CRC): records.jsonl's count
    must still equal its lines ("-1" has a sign jsonl_length's digit count once missed)."""
    buf = raw_v2_batch(raw_record(-1, 0, None, b"v"), 1, last_delta=0)
    header = only_batch(buf)
    lines = JSON_LINES.render(buf, header, PATH)
    assert lines.startswith(b'{"offset":-1,') and JSON_LINES.count(buf, header, PATH) == len(lines)
    assert VALUES.render(buf, header, PATH) == b"v\n" and VALUES.count(buf, header, PATH) == 2


# ====================================== the build


def test_a_missing_build_is_an_import_error_saying_how_to_build_it():
    code = "import sys; sys.modules['seglogfs.records._scan'] = None; import seglogfs.records"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode != 0
    assert "ImportError" in run.stderr and "scripts/install.sh" in run.stderr


def test_compressed_batches_take_the_fast_paths_too():
    values = [b"x%d" % i for i in range(50)]
    for codec in Compression:
        buf = encode_values(values, 0, NOW, compression=codec)
        header = read_batch_header(buf, 0)
        assert batch_values(buf, header, path=PATH) == b"".join(v + b"\n" for v in values)

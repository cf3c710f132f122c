"""The streams behind ``from/<n>``, ``records.jsonl`` and ``from/<n>.jsonl`` (seglogfs/stream_format.py,
ValueStream's ``first_offset`` and ``fmt``), on real logs: exact bytes, found through the index, growth,
damage; and the JSON lines themselves (count == render, round trip through append.jsonl's parser)."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest
from support.engine_helpers import config, open_log

from seglogfs.errors import InvalidRecordError
from seglogfs.jsonl import columns_to_jsonl, jsonl_length, parse_jsonl_line
from seglogfs.log import Log
from seglogfs.records import (
    ProducerRecord,
    Record,
    TimestampType,
    decode_batch_columns,
    encode_batch,
    read_batch_header,
)
from seglogfs.segment import LogSegment
from seglogfs.stream_format import JSON_LINES, VALUES
from seglogfs.views.value_stream import ValueStream

PER_BATCH = 7


def value_of(offset: int) -> bytes:
    return b"value-%d" % offset


def build(tmp_path: Path, batches: int = 60, min_segments: int = 4, **settings: object) -> Log:
    """A log of ``min_segments`` or more, ``PER_BATCH`` records a batch, each value naming its offset."""
    lg = open_log(tmp_path / "t-0", config(segment_bytes=2000, index_interval_bytes=200, **settings))
    for _ in range(batches):
        start = lg.end_offset
        lg.append_values([value_of(start + i) for i in range(PER_BATCH)])
    assert len(lg.segments) >= min_segments
    return lg


def expected_values(lg: Log, first: int) -> bytes:
    return b"".join(r.value + b"\n" for r in lg.iter_records(first))


def test_from_stream_is_every_value_from_n_on(tmp_path: Path) -> None:
    lg = build(tmp_path)
    try:
        middle = lg.segments[2]
        cases = [0, 1, PER_BATCH, PER_BATCH + 3, middle.base_offset, middle.base_offset + 4]
        for first in [*cases, lg.end_offset - 1]:
            stream = ValueStream(lg, first_offset=first)
            expected = expected_values(lg, first)
            assert expected.startswith(value_of(first) + b"\n"), first
            assert stream.size() == len(expected), first
            assert stream.read(0, 10**9) == expected, first
            assert stream.read(5, 13) == expected[5:18], first
    finally:
        lg.close()


def spy_walks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """From now on, every ``LogSegment.iter_batches`` call as (segment base offset, start position)."""
    walked: list[tuple[int, int]] = []
    real = LogSegment.iter_batches

    def spy(segment: LogSegment, start: int = 0, end: int | None = None, **kw):  # type: ignore[no-untyped-def]
        walked.append((segment.base_offset, start))
        return real(segment, start, end, **kw)

    monkeypatch.setattr(LogSegment, "iter_batches", spy)
    return walked


def test_from_stream_reads_no_segment_before_n(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found through the offset index: the segments before n's are never walked, and n's segment is
    walked from the indexed batch before n, not from its start."""
    lg = build(tmp_path)
    try:
        middle = lg.segments[2]
        first = middle.base_offset + 5 * PER_BATCH + 2
        expected = expected_values(lg, first)
        walked = spy_walks(monkeypatch)
        stream = ValueStream(lg, first_offset=first)
        assert stream.read(0, 10**9) == expected
        assert min(base for base, _ in walked) == middle.base_offset, walked
    finally:
        lg.close()


def test_stream_sizes_come_from_the_engine_totals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine counted every batch at append: a from/<n> size, in either format, walks only n's
    own segment (to find n's batch), never another segment."""
    lg = build(tmp_path)
    try:
        middle = lg.segments[1]
        first = middle.base_offset + 3
        expected = expected_values(lg, first)
        walked = spy_walks(monkeypatch)
        stream = ValueStream(lg, first_offset=first)
        assert stream.size() == len(expected)
        assert {base for base, _ in walked} == {middle.base_offset}
        walked.clear()
        json_stream = ValueStream(lg, first_offset=first, fmt=JSON_LINES)
        json_stream.size()
        assert {base for base, _ in walked} == {middle.base_offset}
        walked.clear()
        assert ValueStream(lg).size() > 0 and ValueStream(lg, fmt=JSON_LINES).size() > 0
        assert walked == []
        monkeypatch.undo()
        assert stream.read(0, 10**9) == expected
    finally:
        lg.close()


def test_from_stream_at_or_past_the_end_grows_from_n(tmp_path: Path) -> None:
    lg = build(tmp_path, batches=10, min_segments=1)
    try:
        end = lg.end_offset
        at_end = ValueStream(lg, first_offset=end)
        past = ValueStream(lg, first_offset=end + 3)
        assert at_end.size() == past.size() == 0
        lg.append_values([value_of(end + i) for i in range(5)])
        assert at_end.read(0, 1000) == b"".join(value_of(end + i) + b"\n" for i in range(5))
        assert past.read(0, 1000) == b"".join(value_of(end + i) + b"\n" for i in range(3, 5))
        lg.roll()
        lg.append_values([b"next"])
        assert past.size() == len(value_of(end + 3)) + len(value_of(end + 4)) + 2 + 5
        assert past.read(0, 1000).endswith(b"next\n")
    finally:
        lg.close()


def test_from_stream_skips_a_damaged_batch_and_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lg = build(tmp_path)
    try:
        middle = lg.segments[2]
        headers = list(middle.iter_headers())
        hurt = headers[len(headers) // 2]
        lg.close()
        with open(middle.log_path, "r+b") as f:  # flip CRC bytes of one batch at rest
            f.seek(hurt.position + 17)
            f.write(b"\xde\xad")
        lg = Log.open(lg.dir, lg.config)  # the totals saved at close no longer match: counted again
        first = middle.base_offset + 1
        lost = set(range(hurt.base_offset, hurt.last_offset + 1))
        expected = b"".join(value_of(o) + b"\n" for o in range(first, lg.end_offset) if o not in lost)
        with caplog.at_level(logging.ERROR, logger="seglogfs.views.value_stream"):
            stream = ValueStream(lg, first_offset=first)
            assert stream.read(0, 10**9) == expected
            assert stream.size() == len(expected)
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert sum(str(middle.log_path) in r.getMessage() for r in errors) == 1, caplog.text
    finally:
        lg.close()


# ---------------------------------------------------------------- JSON lines
RECORDS = [
    ProducerRecord(b"plain ascii", timestamp=1_700_000_000_000),
    ProducerRecord("caf\u00e9 \u2603 \"quoted\" back\\slash\n\ttab \x00".encode(), key=b"k1", timestamp=5),
    ProducerRecord(b"\xff\xfe not utf-8 \x80", key=b"\xc3(", headers=[("h", b"\xff"), ("t", b"text")]),
    ProducerRecord(None, key=b"tombstone", headers=[("n", None), ("n", b"")]),
    ProducerRecord(b"", key=b"", timestamp=0),
    ProducerRecord(b"\xed\xa0\x80 surrogate bytes", timestamp=2**62),  # not UTF-8 for Python either
]


def batch_columns(records: list[ProducerRecord], **kw: object):  # type: ignore[no-untyped-def]
    buf = encode_batch(records, 40, now_ms=123, **kw)
    return decode_batch_columns(buf, read_batch_header(buf, 0))


@pytest.mark.parametrize(
    "records", [RECORDS, RECORDS[:1] * 50, RECORDS[4:5] * 3], ids=["mixed", "plain", "empty"]
)
@pytest.mark.parametrize("timestamp_type", [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME])
def test_jsonl_lines_parse_back_and_count_exactly(records: list[ProducerRecord], timestamp_type) -> None:
    cols = batch_columns(records, timestamp_type=timestamp_type)
    text = columns_to_jsonl(cols)
    assert jsonl_length(cols) == len(text)
    lines = text.split(b"\n")
    assert lines.pop() == b"" and len(lines) == len(records)
    for i, (line, record) in enumerate(zip(lines, records, strict=True)):
        obj = json.loads(line)
        assert list(obj)[:3] == ["offset", "timestamp", "timestamp_type"]
        assert obj["offset"] == 40 + i and obj["timestamp_type"] == timestamp_type.kafka_name
        back = parse_jsonl_line(line)  # append.jsonl takes the line as it is
        assert (back.key, back.value, list(back.headers)) == (record.key, record.value, list(record.headers))
        assert back.timestamp == int(cols.timestamps[i]) == obj["timestamp"]


def test_jsonl_fields_are_text_where_utf8_and_base64_where_not() -> None:
    lines = [json.loads(x) for x in columns_to_jsonl(batch_columns(RECORDS)).splitlines()]
    assert lines[0]["value"] == "plain ascii" and lines[0]["key"] is None and lines[0]["headers"] == []
    assert lines[1]["value"] == RECORDS[1].value.decode()
    assert base64.b64decode(lines[2]["value_b64"]) == RECORDS[2].value and "value" not in lines[2]
    assert base64.b64decode(lines[2]["key_b64"]) == b"\xc3("
    assert lines[2]["headers"] == [["h", {"b64": "/w=="}], ["t", "text"]]
    assert lines[3]["value"] is None and lines[3]["headers"] == [["n", None], ["n", ""]]
    assert "value_b64" in lines[5]


def test_jsonl_matches_record_to_jsonl_field_for_field() -> None:
    from seglogfs.jsonl import record_to_jsonl

    cols = batch_columns(RECORDS)
    for i, line in enumerate(columns_to_jsonl(cols).splitlines()):
        obj = json.loads(line)
        del obj["offset"], obj["timestamp_type"]
        record: Record = cols.record(i)
        single = json.loads(record_to_jsonl(record))
        assert {k: v for k, v in obj.items() if v not in (None, [])} == single


def test_append_jsonl_ignores_the_read_only_fields_and_stays_strict() -> None:
    line = b'{"offset":7,"timestamp":9,"timestamp_type":"LogAppendTime","key":null,"value":"v","headers":[]}'
    assert parse_jsonl_line(line) == ProducerRecord(b"v", None, [], 9)
    with pytest.raises(InvalidRecordError, match="unknown field"):
        parse_jsonl_line(b'{"value":"v","partition":3}')


def test_jsonl_stream_of_a_compressed_log_from_n(tmp_path: Path) -> None:
    lg = build(tmp_path, batches=30, min_segments=2, compression_type="zstd")
    try:
        first = lg.segments[1].base_offset + 3
        stream = ValueStream(lg, first_offset=first, fmt=JSON_LINES)
        text = stream.read(0, 10**9)
        assert stream.size() == len(text)
        offsets = [json.loads(line)["offset"] for line in text.splitlines()]
        assert offsets == list(range(first, lg.end_offset))
        values = ValueStream(lg, first_offset=first, fmt=VALUES).read(0, 10**9)
        assert values == expected_values(lg, first)
    finally:
        lg.close()


def test_reading_start_to_end_counts_no_segment_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the whole stream (as `cat` does) walks each stretch of each segment once."""
    lg = build(tmp_path, batches=150, min_segments=12)
    try:
        stream = ValueStream(lg, fmt=JSON_LINES)
        size = stream.size()
        walked = spy_walks(monkeypatch)
        assert len(b"".join(stream.read(p, 4096) for p in range(0, size, 4096))) == size
        # each stretch between two of the totals' checkpoints is walked once
        assert len(walked) == len(set(walked)), walked
    finally:
        lg.close()

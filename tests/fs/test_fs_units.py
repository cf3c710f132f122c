"""Unit tests of the FUSE adapter's pieces that need no mount: paths, errnos, JSON lines, ValueStream."""

from __future__ import annotations

import base64
import errno
import json
from pathlib import Path

import pytest

import seglogfs.fs  # noqa: F401  (libfuse3 before mfusepy)
from seglogfs.config import LogConfig
from seglogfs.errors import (
    CorruptRecordError,
    InvalidLogNameError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    ReadOnlyLogError,
    RecordTooLargeError,
    TimestampNotFoundError,
)
from seglogfs.fs.errors import errno_for, fuse_errors
from seglogfs.fs.paths import Kind, parse_path
from seglogfs.jsonl import parse_jsonl_line, record_to_jsonl
from seglogfs.log import Log
from seglogfs.records import ProducerRecord
from seglogfs.segment import LogSegment
from seglogfs.timestamps import parse_iso8601_ms
from seglogfs.views.value_stream import ValueStream


# ---------------------------------------------------------------- paths
@pytest.mark.parametrize(
    ("path", "kind", "log", "name", "number"),
    [
        ("/", Kind.ROOT, None, None, None),
        ("/events-0", Kind.LOG, "events-0", None, None),
        ("/events-0/append", Kind.APPEND, "events-0", None, None),
        ("/events-0/append.jsonl", Kind.APPEND_JSONL, "events-0", None, None),
        ("/events-0/append.raw", Kind.APPEND_RAW, "events-0", None, None),
        ("/events-0/records", Kind.RECORDS, "events-0", None, None),
        ("/events-0/info", Kind.INFO, "events-0", None, None),
        ("/events-0/by-offset", Kind.BY_OFFSET_DIR, "events-0", None, None),
        ("/events-0/by-offset/42", Kind.BY_OFFSET, "events-0", "42", 42),
        ("/events-0/by-time/1700000000000", Kind.BY_TIME, "events-0", "1700000000000", 1_700_000_000_000),
        ("/events-0/by-time/2023-11-14T22:13:20Z", Kind.BY_TIME, "events-0", "2023-11-14T22:13:20Z",
         1_700_000_000_000),
        ("/events-0/segments", Kind.SEGMENTS_DIR, "events-0", None, None),
        ("/events-0/segments/00000000000000000000.log", Kind.SEGMENT_FILE, "events-0",
         "00000000000000000000.log", None),
    ],
)
def test_parse_path(path: str, kind: Kind, log: str | None, name: str | None, number: int | None) -> None:
    node = parse_path(path)
    assert (node.kind, node.log, node.name, node.number) == (kind, log, name, number)


@pytest.mark.parametrize(
    "path",
    ["/events-0/nope", "/events-0/by-offset/abc", "/events-0/by-offset/-1", "/events-0/by-offset/1.5",
     "/events-0/by-offset/ 1", "/events-0/by-time/yesterday", "/events-0/records/x",
     "/events-0/by-offset/1/x", "/events-0/segments/.hidden", "/a/b/c/d"],
)
def test_parse_path_enoent(path: str) -> None:
    with pytest.raises(OSError) as info:
        parse_path(path)
    assert info.value.errno == errno.ENOENT


# ---------------------------------------------------------------- errnos
@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (OffsetOutOfRangeError("x"), errno.ENOENT),
        (TimestampNotFoundError("x"), errno.ENOENT),
        (RecordTooLargeError("x"), errno.EFBIG),
        (ReadOnlyLogError("x"), errno.EROFS),
        (InvalidRecordError("x"), errno.EINVAL),
        (InvalidLogNameError("x"), errno.EINVAL),
        (CorruptRecordError("bad crc", "/d/0.log", 123), errno.EIO),
        (OSError(errno.ENOSPC, "full"), errno.ENOSPC),
        (RuntimeError("a bug"), errno.EIO),
        (KeyError("a bug"), errno.EIO),
    ],
)
def test_errno_for(exc: BaseException, code: int) -> None:
    assert errno_for(exc) == code


def test_fuse_errors_turns_everything_into_fuse_os_error(caplog: pytest.LogCaptureFixture) -> None:
    class Ops:
        @fuse_errors
        def boom(self, path: str) -> None:
            raise ZeroDivisionError("oops")

        @fuse_errors
        def corrupt(self, path: str) -> None:
            raise CorruptRecordError("crc mismatch", "/data/x-0/00000000000000000000.log", 4242)

    with pytest.raises(OSError) as info:
        Ops().boom("/x")
    assert info.value.errno == errno.EIO
    assert "unexpected error in boom /x" in caplog.text
    for _ in range(3):
        with pytest.raises(OSError) as info:
            Ops().corrupt("/x-0/by-offset/7")
        assert info.value.errno == errno.EIO
    # logged once, naming the file and position
    assert caplog.text.count("00000000000000000000.log at position 4242") == 1


# ---------------------------------------------------------------- JSON lines
def test_jsonl_text_fields() -> None:
    line = b'{"value": "h\\u00e9", "key": "k", "headers": {"a": "1", "b": null}, "timestamp": 5}'
    rec = parse_jsonl_line(line)
    assert rec.value == "hé".encode()
    assert rec.key == b"k"
    assert list(rec.headers) == [("a", b"1"), ("b", None)]
    assert rec.timestamp == 5


def test_jsonl_base64_and_header_list() -> None:
    line = json.dumps({
        "value_b64": base64.b64encode(b"\x00\xff").decode(),
        "key_b64": base64.b64encode(b"\x01").decode(),
        "headers": [["h", "x"], ["h", {"b64": base64.b64encode(b"\xfe").decode()}]],
        "timestamp": "2023-11-14T22:13:20.5Z",
    })
    rec = parse_jsonl_line(line.encode())
    assert (rec.value, rec.key) == (b"\x00\xff", b"\x01")
    assert list(rec.headers) == [("h", b"x"), ("h", b"\xfe")]
    assert rec.timestamp == 1_700_000_000_500


def test_jsonl_nulls_and_defaults() -> None:
    rec = parse_jsonl_line(b"{}")
    assert (rec.value, rec.key, list(rec.headers), rec.timestamp) == (None, None, [], None)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b"{bad", "not a JSON object"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"value": 1}', '"value" must be a string'),
        (b'{"value": "a", "value_b64": "YQ=="}', "both"),
        (b'{"value_b64": "***"}', "not valid base64"),
        (b'{"headers": "x"}', '"headers" must be'),
        (b'{"headers": [["a"]]}', "pairs"),
        (b'{"headers": {"a": 1}}', "header 'a'"),
        (b'{"timestamp": "soon"}', "ISO-8601"),
        (b'{"timestamp": -1}', "negative"),
        (b'{"vaule": "typo"}', "unknown field"),
    ],
)
def test_jsonl_errors_name_the_problem(line: bytes, problem: str) -> None:
    with pytest.raises(InvalidRecordError, match=problem):
        parse_jsonl_line(line)


def test_jsonl_round_trip() -> None:
    records = [
        ProducerRecord(b"text", b"key", [("h", b"v"), ("n", None)], 17),
        ProducerRecord(b"\x00\x80bin", None, [("b", b"\xff")], None),
        ProducerRecord(None),
    ]
    for rec in records:
        line = record_to_jsonl(rec)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        back = parse_jsonl_line(line)
        assert (back.value, back.key, list(back.headers), back.timestamp) == (
            rec.value, rec.key, list(rec.headers), rec.timestamp)


def test_parse_timestamp_forms() -> None:
    assert parse_iso8601_ms("1970-01-01T00:00:01Z") == 1000
    assert parse_iso8601_ms("1970-01-01T01:00:00+01:00") == 0
    assert parse_iso8601_ms("1970-01-01 00:00:00.250") == 250


# ---------------------------------------------------------------- ValueStream (real engine, real files)
def _open(tmp_path: Path, **settings: object) -> Log:
    cfg = LogConfig.from_mapping(settings)
    return Log.open(tmp_path / "vs-0", cfg, create=True)


def test_value_stream_matches_the_records(tmp_path: Path) -> None:
    lg = _open(tmp_path, **{"segment.bytes": 2000})
    try:
        expected = bytearray()
        for i in range(60):
            values = [f"v{i}-{j}".encode() * (j + 1) for j in range(5)]
            lg.append_values(values)
            expected += b"".join(v + b"\n" for v in values)
        lg.append([ProducerRecord(None), ProducerRecord(b"last", key=b"k")])
        expected += b"\nlast\n"
        assert len(lg.segments) > 3
        stream = ValueStream(lg)
        assert stream.size() == len(expected)
        assert stream.read(0, 10**9) == bytes(expected)
        for pos, size in [(0, 1), (7, 100), (1234, 777), (len(expected) - 5, 100), (len(expected), 10)]:
            assert stream.read(pos, size) == bytes(expected[pos:pos + size])
        # growth is seen incrementally
        lg.append_values([b"more"])
        assert stream.size() == len(expected) + 5
        assert stream.read(len(expected), 100) == b"more\n"
    finally:
        lg.close()


def test_value_stream_sizes_walk_no_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine counted each batch at append: a size() reads no segment, the first one either."""
    lg = _open(tmp_path, **{"segment.bytes": 1000})
    try:
        for i in range(50):
            lg.append_values([f"{i:04d}".encode() * 10])
        scanned: list[tuple[int, int]] = []
        real = LogSegment.iter_batches

        def spy(segment: LogSegment, start: int = 0, end: int | None = None, **kw):  # type: ignore[no-untyped-def]
            scanned.append((segment.base_offset, start))
            return real(segment, start, end, **kw)

        monkeypatch.setattr(LogSegment, "iter_batches", spy)
        stream = ValueStream(lg)
        first = stream.size()
        assert first == 50 * 41
        lg.append_values([b"x"])
        assert stream.size() == first + 2
        assert scanned == []
    finally:
        lg.close()

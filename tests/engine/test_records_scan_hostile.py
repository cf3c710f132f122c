"""The C records scanner against hostile batches a review found: counts that lie about the area's size,
offsets and timestamps at the ends of int64, an mmap'd area rewritten by another process while it is
read, and value bytes at the edges of the JSON fast path. Each answer is a CorruptRecordError naming the
file and batch, or the columns' answer; never a crash, a MemoryError or an OverflowError.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.record_batches import NOW, PATH, raw_record, raw_v2_batch

from seglogfs.errors import CorruptRecordError
from seglogfs.jsonl import columns_to_jsonl
from seglogfs.records import (
    batch_plain_jsonl,
    batch_values,
    batch_values_size,
    decode_batch_columns,
    decode_record,
    encode_values,
    first_record_stamp,
    iter_batch_headers,
    read_batch_header,
    record_bounds,
)
from seglogfs.records import scan as scanner
from seglogfs.stream_format import JSON_LINES, VALUES

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


def only_batch(buf: bytes):
    (header,) = list(iter_batch_headers(buf, path=PATH))
    return header


# ====================================== counts that lie


def test_a_count_the_area_cannot_hold_fails_before_any_allocation():
    """A 70-byte batch claiming 2**31 - 1 (or 2 * 10**8) records: CorruptRecordError at once, under
    a 2 GiB address-space limit (the columns once asked numpy for 160 GiB, the bounds for 24 GiB)."""
    code = textwrap.dedent(
        f"""
        import resource, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from support.record_batches import PATH, raw_record, raw_v2_batch
        from seglogfs.errors import CorruptRecordError
        from seglogfs.records import decode_batch_columns, iter_batch_headers, record_bounds
        for count in (2**31 - 1, 200_000_000):
            buf = raw_v2_batch(raw_record(0, 0, None, b"v"), count, last_delta=0)
            (header,) = list(iter_batch_headers(buf, path=PATH))
            for decode in (decode_batch_columns, record_bounds):
                try:
                    decode(buf, header, path=PATH)
                except CorruptRecordError as exc:
                    assert "cannot fit in 8 bytes" in str(exc) and exc.position == 0, exc
                else:
                    raise AssertionError("decoded")
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # ASan cannot run under RLIMIT_AS
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_the_smallest_records_still_fill_their_count():
    """Seven bytes a record (no key, no value, no headers, one-byte varints): the count check's bound."""
    area = b"".join(raw_record(i, 0, None, None) for i in range(9))
    assert len(area) == 9 * scanner.MIN_RECORD_SIZE
    buf = raw_v2_batch(area, 9)
    header = only_batch(buf)
    assert len(decode_batch_columns(buf, header, path=PATH).records()) == 9
    assert record_bounds(buf, header, path=PATH).starts.tolist() == list(range(0, 63, 7))
    with pytest.raises(CorruptRecordError, match="10 records cannot fit in 63 bytes"):
        decode_batch_columns(raw_v2_batch(area, 10), only_batch(raw_v2_batch(area, 10)), path=PATH)


# ====================================== offsets and timestamps at the ends of int64


@pytest.mark.parametrize("base", [INT64_MIN, INT64_MIN + (1 << 31) - 1, INT64_MAX - (1 << 31) + 2, INT64_MAX])
def test_a_base_offset_whose_offsets_wrap_is_corrupt_on_every_path(base):
    """base + delta would wrap around int64 (columns compare offsets, the fast paths deltas: they once
    disagreed, and a from/<n> read raised OverflowError)."""
    buf = raw_v2_batch(raw_record(-1, 0, None, b"v"), 1, last_delta=0, base_offset=base)
    header = only_batch(buf)
    record = raw_record(-1, 0, None, b"v")
    for call in (
        lambda: decode_batch_columns(buf, header, path=PATH),
        lambda: batch_values(buf, header, path=PATH, first_offset=10),
        lambda: batch_values_size(buf, header, path=PATH, first_offset=10),
        lambda: batch_plain_jsonl(buf, header, path=PATH, first_offset=10),
        lambda: VALUES.render(buf, header, PATH, 10),
        lambda: JSON_LINES.count(buf, header, PATH, 10),
        lambda: decode_record(record, header, path=PATH),
    ):
        with pytest.raises(CorruptRecordError, match="leaves no room") as err:
            call()
        assert err.value.position == 0 and err.value.path == PATH


@pytest.mark.parametrize("first_offset", [10, INT64_MAX, 1 << 70])
def test_a_first_offset_far_above_the_batch_selects_nothing(first_offset):
    base = INT64_MIN + (1 << 31)  # the lowest base offset allowed: first_offset - base passes int64
    buf = raw_v2_batch(raw_record(5, 0, None, b"v"), 1, last_delta=5, base_offset=base)
    header = only_batch(buf)
    assert batch_values(buf, header, path=PATH, first_offset=first_offset) == b""
    assert VALUES.render(buf, header, PATH, first_offset) == b""
    assert JSON_LINES.render(buf, header, PATH, first_offset) == b""
    assert JSON_LINES.count(buf, header, PATH, first_offset) == 0


@pytest.mark.parametrize(("base_ts", "ts_delta"), [(INT64_MIN, -1), (INT64_MAX, 1), (INT64_MAX - 5, 5)])
def test_timestamps_past_int64_wrap_as_the_columns_do(base_ts, ts_delta):
    """Kafka sums base timestamp and delta in a Java long, the columns in numpy int64: both wrap. The
    C sum wraps the same way, in unsigned arithmetic (a signed overflow is undefined behaviour, which
    the ASan/UBSan build of tests/engine/test_records_scan*.py reports)."""
    buf = raw_v2_batch(raw_record(0, ts_delta, None, b"v"), 1, last_delta=0, base_ts=base_ts)
    header = only_batch(buf)
    expected = columns_to_jsonl(decode_batch_columns(buf, header, path=PATH))
    assert JSON_LINES.render(buf, header, PATH) == expected
    assert JSON_LINES.count(buf, header, PATH) == len(expected)
    lines = batch_plain_jsonl(buf, header, path=PATH)
    assert lines is None or lines == expected


def wide_varint(value: int) -> bytes:
    """``value`` zig-zagged as a varint of any width (kafka-python's stops at 64 bits)."""
    raw, out = (value << 1) if value >= 0 else ((-value << 1) - 1), bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    return bytes(out) + bytes([raw])


@pytest.mark.parametrize(("ts_delta", "offset_delta"), [(0, 1 << 31), (0, -(1 << 31) - 1), (1 << 63, 0)])
def test_a_first_record_stamp_wider_than_its_type_is_no_stamp(ts_delta, offset_delta):
    """The timestamp search reads a batch's first record without the scanner: an offset delta past
    int32 or a timestamp delta past int64 (a 10-byte varint holds 70 bits) once gave offsets past
    int64."""
    prefix = b"\x40\x00" + wide_varint(ts_delta) + wide_varint(offset_delta) + b"\x01\x01\x00"
    buf = encode_values([b"v"], 0, NOW)
    header = read_batch_header(buf, 0, path=PATH)
    assert first_record_stamp(prefix, header) is None
    assert first_record_stamp(buf[61:93], header) == (0, NOW)


# ====================================== an area rewritten while it is read

RACE = textwrap.dedent(
    """
    import mmap, multiprocessing, os, sys, tempfile, time
    from seglogfs.errors import CorruptRecordError
    from seglogfs.records import scan as scanner
    from kafka.record.util import encode_varint

    def varint(v, width=1):  # zig-zag, stretched to width bytes by continuation groups of zero
        out = bytearray()
        encode_varint(v, out.append)
        while len(out) < width:
            out[-1] |= 0x80
            out.append(0)
        return bytes(out)

    # Two shapes of one record, each a plain one (no key, no headers) of the same length: the value
    # is 21 bytes longer when the varints around it take their fewest bytes.
    L, N = 4000, 200
    def record(delta, short):
        w = (1, 1, 1, 1) if short else (10, 5, 5, 5)
        value = b"a" * (L + 21 if short else L)
        body = b"\\x00" + varint(0, w[0]) + varint(delta, w[1]) + varint(-1, w[2])
        body += varint(len(value)) + value + varint(0, w[3])
        return varint(len(body)) + body
    area = b"".join(record(i, False) for i in range(N))
    first = record(0, True)
    shapes = (area[: len(first)], first)
    assert len(shapes[0]) == len(first)

    def flip(path, stop, until):  # until: a reader that crashed never sets stop
        with open(path, "r+b") as f:
            shared = mmap.mmap(f.fileno(), 0)
            n = 0
            while not stop.is_set() and time.monotonic() < until:
                shared[: len(first)] = shapes[n & 1]
                n += 1

    if __name__ == "__main__":
        fd, path = tempfile.mkstemp()
        os.write(fd, area)
        os.close(fd)
        stop = multiprocessing.Event()
        flipper = multiprocessing.Process(target=flip, args=(path, stop, time.monotonic() + 30))
        flipper.start()
        view = mmap.mmap(os.open(path, os.O_RDONLY), 0, access=mmap.ACCESS_READ)
        sizes, errors = range(N * (L + 1), N * (L + 1) + 22), 0
        deadline = time.monotonic() + float(sys.argv[1])
        try:
            while time.monotonic() < deadline:
                try:
                    values = scanner.join_values(view, N, -(2**63), "f", 0)
                    assert len(values) in sizes, len(values)  # the record fills its length either way
                    lines = scanner.plain_jsonl(view, N, 0, (0, 0, None, "CreateTime"), True, "f", 0)
                    assert lines is None or lines.count(b"\\n") == N
                except CorruptRecordError:
                    errors += 1
        finally:
            stop.set()
            flipper.join()
            os.unlink(path)
        print("errors", errors)
    """
)


def test_an_mmap_rewritten_between_the_two_passes_never_writes_past_the_output(tmp_path):
    """values and plain_jsonl count their output in one walk and fill it in a second; a file another
    process rewrites in between once made the second walk copy 4,000 bytes into a 200-byte result (a
    segfault within a second; ASan: heap-buffer-overflow). Now it is a CorruptRecordError."""
    script = tmp_path / "race.py"
    script.write_text(RACE)
    run = subprocess.run(
        [sys.executable, str(script), "3"], capture_output=True, text=True, check=False, timeout=120
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    assert run.stdout.startswith("errors ") and int(run.stdout.split()[1]) > 0  # the race did happen


# ====================================== values at the edges of the JSON fast path

EDGE_VALUES = [bytes([b]) for b in range(256)] + [
    b"",
    b'a"b\\c',
    "\u2028\u2029".encode(),
    b"\xed\xa0\x80",  # a surrogate, in CESU-8: not UTF-8
    b"\xc3\x28",  # invalid UTF-8
    b"\x7f" * 3,  # DEL: printable for JSON (json.dumps leaves it as is)
    b"x" * 1_000_000,
    b"~" * 70_000 + b"\x00",
]


@pytest.mark.parametrize("log_append_time", [False, True])
def test_edge_values_render_as_the_columns_do_and_plain_ones_as_json_dumps(log_append_time):
    for value in EDGE_VALUES:
        buf = encode_values([value, b"ok"], 7, NOW)
        if log_append_time:  # the flag and a max timestamp, as a broker writes them (CRC not read here)
            patched = bytearray(buf)
            patched[22] |= 0x08
            buf = bytes(patched)
        header = read_batch_header(buf, 0, path=PATH)
        expected = columns_to_jsonl(decode_batch_columns(buf, header, path=PATH))
        assert JSON_LINES.render(buf, header, PATH) == expected, value[:20]
        assert JSON_LINES.count(buf, header, PATH) == len(expected)
        lines = batch_plain_jsonl(buf, header, path=PATH)
        plain = all(0x20 <= b < 0x80 and b not in b'"\\' for b in value)
        assert (lines is not None) == plain, value[:20]
        if plain:
            first = json.loads(lines.split(b"\n")[0])
            assert first["value"] == value.decode() and first["key"] is None and first["offset"] == 7
            dumped = json.dumps(first, ensure_ascii=False, separators=(",", ":")).encode()
            assert lines.split(b"\n")[0] == dumped


# ====================================== buffers: every path gives its export back


def test_every_function_releases_its_buffers_on_success_and_on_error():
    """A bytearray with a live export cannot be resized (BufferError): after each call, good or bad
    area, good or bad arguments, the area and the outputs resize, so no path kept a buffer."""
    good = raw_record(0, 0, None, b"v" * 40) + raw_record(1, 0, b"k", b"w", [("h", b"x")])
    for data in (good, good[:-3], b""):
        area = bytearray(data)
        out, starts, deltas = bytearray(8 * scanner.ROWS * 2), bytearray(8), bytearray(16)
        c = scanner._scan
        calls = [
            (c.scan, (area, 2, out)),
            (c.scan, (area, 2, b"read-only")),
            (c.bounds, (area, 2, starts, deltas)),
            (c.record, (area,)),
            (c.values, (area, 2, 0, True)),
            (c.values, (area, 2, 1 << 64, True)),
            (c.plain_jsonl, (area, 2, 0, 0, 0, None, "CreateTime", True)),
            (c.plain_jsonl, (area, 2, 0, 0, 0, "not an int", "CreateTime", True)),
        ]
        for function, args in calls:
            with contextlib.suppress(ValueError, TypeError, OverflowError):
                function(*args)
            for buffer in (area, out, starts, deltas):
                buffer.append(0)  # BufferError while an export is held
                del buffer[-1]

"""The mount's write path under hostile or unlucky writers (issue 7: #3, #12, #13, #14, #15, #16, #20).

Real programs (cat, fallocate, a shell with dup'ed descriptors) and raw ``os`` calls against a real
seglogd. A partial line or an ``append.raw`` body is committed when the kernel releases the open file,
which happens just after the last close() returns, so the tests wait for it (bounded) rather than
assume it.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from support.mount_fixture import RELEASE_TIMEOUT, Seglogd, end_offset, fuse_required, make_seglogd, sh

from seglogfs.config import LogConfig
from seglogfs.errors import RecordTooLargeError
from seglogfs.log import Log
from seglogfs.records import ProducerRecord, encode_values

pytestmark = [pytest.mark.fuse, fuse_required]

LOGS = {
    "small-0": {"max.message.bytes": 2000},
    "exact-0": {"max.message.bytes": 1000},
    "raw-0": {"max.message.bytes": 4000},
    "json-0": {},
    "fal-0": {},
    "dup-0": {},
    "link-0": {},
    "gz-0": {"max.message.bytes": 1000, "compression.type": "gzip"},
}


@pytest.fixture(scope="module")
def mnt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    daemon = make_seglogd(tmp_path_factory.mktemp("wf"), logs=LOGS)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.cleanup()
    assert "Traceback" not in daemon.stderr(), daemon.stderr()




def records(mnt: Seglogd, log: str) -> list[bytes]:
    return (mnt / log / "records").read_bytes().split(b"\n")[:-1]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + RELEASE_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def settle(mnt: Seglogd, log: str, expected_end: int) -> None:
    """Wait until ``log`` reaches ``expected_end``, then check it does not go past it."""
    wait_for(lambda: end_offset(mnt, log) >= expected_end, f"{log} to reach offset {expected_end}")
    assert end_offset(mnt, log) == expected_end


def released(mnt: Seglogd, log: str, marker: bytes) -> None:
    """Append ``marker`` on a fresh open file. The kernel queued the RELEASE of every file closed
    before this call ahead of this open, so once the marker is in, a record that release would have
    appended is (all but certainly) in too, before the marker."""
    with open(mnt / log / "append", "wb", buffering=0) as f:
        f.write(marker + b"\n")


def errno_of(func: Callable, *args: object) -> int:
    try:
        func(*args)
    except OSError as exc:
        return exc.errno
    shown = [f"<{len(a)} bytes>" if isinstance(a, bytes) else repr(a) for a in args]
    raise AssertionError(f"{getattr(func, '__name__', func)}({', '.join(shown)}) did not fail")


def batches(mnt: Seglogd, log: str) -> list[list[bytes]]:
    """Every batch of ``log`` as the list of its values, parsed by kafka-python."""
    out = []
    for seg in sorted((mnt.data_dir / log).glob("*.log")):
        mem = MemoryRecords(seg.read_bytes())
        while (batch := mem.next_batch()) is not None:
            out.append([r.value for r in batch])
    return out


# ---------------------------------------------------------------- #3: EFBIG discards the record whole
def test_oversized_line_is_discarded_whole_across_writes(mnt: Seglogd) -> None:
    """A line that outgrows max.message.bytes over several writes: nothing of it, the next line fine."""
    start = end_offset(mnt, "small-0")
    fd = os.open(mnt / "small-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"before\n" + b"h" * 1500)  # a partial line may wait...
        assert errno_of(os.write, fd, b"h" * 1500) == errno.EFBIG  # ...until it cannot fit any more
        assert errno_of(os.write, fd, b"t" * 100) == errno.EFBIG  # more of the same line
        assert errno_of(os.write, fd, b"tail\n") == errno.EFBIG  # its newline ends it
        os.write(fd, b"next\n")
    finally:
        os.close(fd)
    settle(mnt, "small-0", start + 2)
    assert records(mnt, "small-0")[start:] == [b"before", b"next"]


def test_efbig_write_discards_every_line_it_touches(mnt: Seglogd) -> None:
    """A writer that skips a write refused for a too-large line in its middle gets no splice of the
    line before it (begun earlier) with the line after it (finished later)."""
    start = end_offset(mnt, "small-0")
    fd = os.open(mnt / "small-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"A-head ")
        assert errno_of(os.write, fd, b"A-tail\n" + b"x" * 3000 + b"\nC-head ") == errno.EFBIG
        assert errno_of(os.write, fd, b"C-rest\n") == errno.EFBIG
        os.write(fd, b"D\n")
        assert errno_of(os.write, fd, b"y" * 3000 + b"\n") == errno.EFBIG  # whole line in one write:
        os.write(fd, b"E\n")  # nothing else is lost
    finally:
        os.close(fd)
    settle(mnt, "small-0", start + 2)
    assert records(mnt, "small-0")[start:] == [b"D", b"E"]


def test_oversized_line_then_close_appends_nothing(mnt: Seglogd) -> None:
    start = end_offset(mnt, "small-0")
    fd = os.open(mnt / "small-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"p" * 1500)
        assert errno_of(os.write, fd, b"p" * 1500) == errno.EFBIG
    finally:
        os.close(fd)
    released(mnt, "small-0", b"marker")
    settle(mnt, "small-0", start + 1)
    assert records(mnt, "small-0")[start:] == [b"marker"]


def test_cat_of_a_line_just_under_the_limit_appends_nothing(mnt: Seglogd, tmp_path: Path) -> None:
    """The issue's case: a 1,048,530-byte line is under max.message.bytes but its batch is not.

    cat writes it in one write(2) that the kernel splits into two 512 KiB requests; the first was
    accepted as a partial line, so the whole line must go, and cat's retry of the rest must not land.
    """
    big = tmp_path / "big.txt"
    big.write_bytes(b"b" * 1_048_530 + b"\n")
    start = end_offset(mnt, "json-0")
    result = sh(f"cat {big} > {mnt / 'json-0' / 'append'}")
    assert result.returncode == 1 and "File too large" in result.stderr, result
    released(mnt, "json-0", b"marker")
    settle(mnt, "json-0", start + 1)
    assert records(mnt, "json-0")[start:] == [b"marker"]


def test_a_writer_that_goes_on_after_efbig_gets_no_splice(mnt: Seglogd) -> None:
    """One write(2) of a 1.5 MiB line: the kernel sends 512 KiB requests, the third crosses the
    limit, so write() returns 1 MiB. Writing the rest fails too, before its newline reaches the
    daemon; so the next newline, in "next", ends the discarded line (EFBIG: the writer is told).
    The line after that is appended; no fragment of the big line ever is."""
    start = end_offset(mnt, "json-0")
    line = b"L" * (3 << 19) + b"\n"
    fd = os.open(mnt / "json-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        written = os.write(fd, line)
        assert written < len(line)
        assert errno_of(os.write, fd, line[written:]) == errno.EFBIG
        assert errno_of(os.write, fd, b"next\n") == errno.EFBIG
        os.write(fd, b"after\n")
    finally:
        os.close(fd)
    settle(mnt, "json-0", start + 1)
    assert records(mnt, "json-0")[start:] == [b"after"]


def test_append_raw_over_the_limit_fails_at_the_crossing_write_and_close_appends_nothing(
    mnt: Seglogd,
) -> None:
    start = end_offset(mnt, "raw-0")
    fd = os.open(mnt / "raw-0" / "append.raw", os.O_WRONLY)
    try:
        os.write(fd, b"r" * 3000)
        assert errno_of(os.write, fd, b"r" * 3000) == errno.EFBIG
        assert errno_of(os.write, fd, b"r" * 10) == errno.EFBIG  # the record is gone: so is the rest
    finally:
        os.close(fd)  # close() itself succeeds: there is nothing to append
    released(mnt, "raw-0", b"marker")
    settle(mnt, "raw-0", start + 1)
    assert records(mnt, "raw-0")[start:] == [b"marker"]
    # the next open is a fresh record
    (mnt / "raw-0" / "append.raw").write_bytes(b"fresh")
    settle(mnt, "raw-0", start + 2)
    assert (mnt / "raw-0" / "by-offset" / str(start + 1)).read_bytes() == b"fresh"


def test_append_raw_is_limited_by_its_exact_batch_size(mnt: Seglogd) -> None:
    """max.message.bytes 1000 limits the batch: 930 value bytes fit, 931 fail at write(), and close
    appends nothing (they used to be accepted, then dropped at release with close() returning 0)."""
    start = end_offset(mnt, "exact-0")
    for size in (931, 1000):
        fd = os.open(mnt / "exact-0" / "append.raw", os.O_WRONLY)
        try:
            assert errno_of(os.write, fd, b"r" * size) == errno.EFBIG, size
        finally:
            os.close(fd)
    fd = os.open(mnt / "exact-0" / "append.raw", os.O_WRONLY)
    try:
        os.write(fd, b"r" * 900)
        assert errno_of(os.write, fd, b"r" * 31) == errno.EFBIG  # the write that crosses it
    finally:
        os.close(fd)
    (mnt / "exact-0" / "append.raw").write_bytes(b"f" * 930)
    settle(mnt, "exact-0", start + 1)
    assert (mnt / "exact-0" / "by-offset" / str(start)).read_bytes() == b"f" * 930


def test_a_partial_line_is_limited_by_its_exact_batch_size(mnt: Seglogd) -> None:
    """A trailing partial line of 950 bytes can never make a batch of 1000: its write is EFBIG, and
    nothing is appended at close."""
    start = end_offset(mnt, "exact-0")
    fd = os.open(mnt / "exact-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        assert errno_of(os.write, fd, b"p" * 950) == errno.EFBIG
    finally:
        os.close(fd)
    fd = os.open(mnt / "exact-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"q" * 930)  # fits exactly: committed at release
    finally:
        os.close(fd)
    released(mnt, "exact-0", b"marker")
    settle(mnt, "exact-0", start + 2)
    assert records(mnt, "exact-0")[start:] == [b"q" * 930, b"marker"]


def _incompressible(size: int, seed: int) -> bytes:
    """Random bytes without a newline: gzip makes them a little larger, never smaller."""
    return bytes(b if b != 10 else 11 for b in random.Random(seed).randbytes(size))


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("append", _incompressible(930, 1)),  # a last line without newline
        ("append.raw", _incompressible(930, 2)),
        ("append.jsonl", b'{"value_b64": "%s"}' % base64.b64encode(_incompressible(930, 3))),
    ],
)
def test_a_body_that_compression_makes_too_large_fails_its_close(
    mnt: Seglogd, name: str, body: bytes
) -> None:
    """On a gzip log of max.message.bytes 1000, a 930-byte value fits uncompressed (every write is
    accepted) but not compressed: the close() that would leave it to RELEASE, where nobody hears an
    error, is EFBIG, and nothing of it is appended; later bytes continuing the line go too."""
    start = end_offset(mnt, "gz-0")
    fd = os.open(mnt / "gz-0" / name, os.O_WRONLY | os.O_APPEND)
    os.write(fd, body[:400])
    os.write(fd, body[400:])
    assert errno_of(os.close, fd) == errno.EFBIG
    released(mnt, "gz-0", b"marker")
    settle(mnt, "gz-0", start + 1)
    assert records(mnt, "gz-0")[start:] == [b"marker"]
    assert "dropped pending data" not in mnt.stderr()


def test_a_dup_closed_early_refuses_the_too_large_body_and_its_continuation(mnt: Seglogd) -> None:
    """Every close() of a dup checks the body as it stands; once refused, what the other dup writes
    to continue that line is discarded through its newline, and the next line appends."""
    start = end_offset(mnt, "gz-0")
    fd = os.open(mnt / "gz-0" / "append", os.O_WRONLY | os.O_APPEND)
    dup = os.dup(fd)
    os.write(fd, _incompressible(930, 4))
    assert errno_of(os.close, dup) == errno.EFBIG
    assert errno_of(os.write, fd, b"tail\n") == errno.EFBIG
    os.write(fd, b"next\n")
    os.close(fd)
    settle(mnt, "gz-0", start + 1)
    assert records(mnt, "gz-0")[start:] == [b"next"]


def test_a_compressible_body_near_the_limit_closes_and_appends(mnt: Seglogd) -> None:
    start = end_offset(mnt, "gz-0")
    for name in ("append", "append.raw"):
        fd = os.open(mnt / "gz-0" / name, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"c" * 930)
        os.close(fd)  # FLUSH checks it: it fits compressed
    released(mnt, "gz-0", b"marker")
    settle(mnt, "gz-0", start + 3)
    assert records(mnt, "gz-0")[start:] == [b"c" * 930, b"c" * 930, b"marker"]


def test_engine_check_append_raises_what_append_would_and_appends_nothing(tmp_path: Path) -> None:
    config = LogConfig.from_mapping({"max.message.bytes": 1000, "compression.type": "gzip"})
    with Log.open(tmp_path / "check-0", config, create=True) as log:
        assert log.compresses
        log.check_append([b"c" * 930])
        with pytest.raises(RecordTooLargeError):
            log.check_append([_incompressible(930, 5)])
        assert log.end_offset == 0
    with Log.open(tmp_path / "plain-0", LogConfig.from_mapping({}), create=True) as log:
        assert not log.compresses


def test_append_raw_at_the_default_limit(tmp_path: Path) -> None:
    """Default max.message.bytes (1048588): the largest value is 1048516 bytes; 1048520 is EFBIG."""
    daemon = make_seglogd(tmp_path, logs={"raw-0": {}})
    try:
        daemon.start()
        for size in (1048520, 1048517):
            fd = os.open(daemon / "raw-0" / "append.raw", os.O_WRONLY)
            try:
                data = b"d" * size
                written = os.write(fd, data)  # the kernel's first 512 KiB request is accepted
                assert written < size, (size, written)
                assert errno_of(os.write, fd, data[written:]) == errno.EFBIG, size  # like a writer's retry
            finally:
                os.close(fd)
        (daemon / "raw-0" / "append.raw").write_bytes(b"d" * 1048516)
        settle(daemon, "raw-0", 1)
        assert len((daemon / "raw-0" / "by-offset" / "0").read_bytes()) == 1048516
        assert "dropped pending data" not in daemon.stderr()
    finally:
        daemon.cleanup()


def test_the_line_after_an_efbig_newline_appends(mnt: Seglogd) -> None:
    """The write holding the newline that ends an oversized line is EFBIG; the next line is fine."""
    start = end_offset(mnt, "exact-0")
    fd = os.open(mnt / "exact-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        assert os.write(fd, b"z" * 921) == 921
        assert errno_of(os.write, fd, b"z" * 10 + b"\n") == errno.EFBIG
        assert os.write(fd, b"after\n") == 6
    finally:
        os.close(fd)
    settle(mnt, "exact-0", start + 1)
    assert records(mnt, "exact-0")[start:] == [b"after"]


def test_cat_of_a_file_with_an_oversized_line_in_the_middle(mnt: Seglogd, tmp_path: Path) -> None:
    """cat writes 512 KiB requests: the first is accepted with the oversized line begun at its end, the
    second (its newline and the lines after) is EFBIG; write() returns the first's count and cat sends
    the second again, which must be refused again, not taken as a new line. Then cat says EFBIG."""
    good = [b"g%06d" % i + b"-" * 90 for i in range(5342)]  # 97 + 1 bytes a line
    head = b"\n".join(good) + b"\n"
    cut = (1 << 19) - len(head)  # the oversized line starts in the first request, ends in the second
    assert 1500 - 930 < cut < 930  # its start fits a partial line, and so would its tail alone
    file = tmp_path / "mixed.txt"
    file.write_bytes(head + b"O" * 1500 + b"\n" + b"".join(b"after-%d\n" % i for i in range(3)))
    start = end_offset(mnt, "exact-0")
    result = sh(f"cat {file} > {mnt / 'exact-0' / 'append'}")
    assert result.returncode == 1 and "File too large" in result.stderr, result
    released(mnt, "exact-0", b"marker")
    got = records(mnt, "exact-0")[start:]
    assert got == [*good, b"marker"], (len(got), [r[:20] for r in got[-3:]])


# ---------------------------------------------------------------- #13: a partial line waits for release
def test_partial_line_survives_the_close_of_a_dup(mnt: Seglogd) -> None:
    """``{ printf 'took '; sleep; echo '0.2s'; } > append``: every command closes its dup."""
    start = end_offset(mnt, "dup-0")
    path = mnt / "dup-0" / "append"
    result = sh(f"{{ printf 'took '; sleep 0.2; echo '0.2s'; }} > {path}")
    assert result.returncode == 0, result
    settle(mnt, "dup-0", start + 1)
    assert records(mnt, "dup-0")[start:] == [b"took 0.2s"]


def test_partial_line_is_committed_at_the_last_close_only(mnt: Seglogd) -> None:
    start = end_offset(mnt, "dup-0")
    fd = os.open(mnt / "dup-0" / "append", os.O_WRONLY | os.O_APPEND)
    dup = os.dup(fd)
    os.write(fd, b"head ")
    os.close(fd)  # a FLUSH, not the last close: the line is not over
    os.write(dup, b"and tail")
    released(mnt, "dup-0", b"marker")
    settle(mnt, "dup-0", start + 1)
    os.close(dup)  # the last close: the partial line is a record now
    settle(mnt, "dup-0", start + 2)
    assert records(mnt, "dup-0")[start:] == [b"marker", b"head and tail"]


def test_append_raw_is_one_record_across_dups(mnt: Seglogd) -> None:
    start = end_offset(mnt, "dup-0")
    result = sh(f"{{ printf 'raw '; sleep 0.1; printf 'body'; }} > {mnt / 'dup-0' / 'append.raw'}")
    assert result.returncode == 0, result
    settle(mnt, "dup-0", start + 1)
    assert (mnt / "dup-0" / "by-offset" / str(start)).read_bytes() == b"raw body"


# ---------------------------------------------------------------- #14: append.jsonl edge values
@pytest.mark.parametrize(
    "line",
    [
        b'{"value": "v", "timestamp": 9223372036854775808}',  # 2^63
        b'{"value": "v", "timestamp": 99999999999999999999999}',
        b'{"value": "v", "headers": [["\\ud800", "x"]]}',  # a lone surrogate cannot be UTF-8
        b'{"value": "v", "headers": {"\\udfff": null}}',
        b'{"value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"value": "v", "timestamp": "1969-12-31T23:59:59Z"}',
        b'{"value": "v", "timestamp": "0001-01-01T00:00:00Z"}',
        b'{"value": "v", "timestamp": -5}',
    ],
    ids=["ts-2^63", "ts-huge", "header-surrogate", "header-surrogate-object", "nested-100000",
         "iso-before-1970", "iso-year-1", "negative"],
)
def test_jsonl_edge_values_are_einval_with_nothing_appended(mnt: Seglogd, line: bytes) -> None:
    start = end_offset(mnt, "json-0")
    fd = os.open(mnt / "json-0" / "append.jsonl", os.O_WRONLY | os.O_APPEND)
    try:
        assert errno_of(os.write, fd, b'{"value": "ok"}\n' + line + b"\n") == errno.EINVAL
    finally:
        os.close(fd)
    released(mnt, "json-0", b"marker")
    settle(mnt, "json-0", start + 1)
    assert records(mnt, "json-0")[start:] == [b"marker"]
    assert "Traceback" not in mnt.stderr()


def test_jsonl_timestamp_bounds_that_are_valid(mnt: Seglogd) -> None:
    start = end_offset(mnt, "json-0")
    lines = [{"value": "epoch", "timestamp": "1970-01-01T00:00:00Z"}, {"value": "zero", "timestamp": 0}]
    (mnt / "json-0" / "append.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    settle(mnt, "json-0", start + 2)
    for i in range(2):
        assert os.getxattr(mnt / "json-0" / "by-offset" / str(start + i), "user.seglog.timestamp") == b"0"


# ---------------------------------------------------------------- #15: split by exact encoded size
def test_two_lines_that_fit_alone_become_two_batches(mnt: Seglogd) -> None:
    start = end_offset(mnt, "exact-0")
    a, b = b"a" * 880, b"b" * 880
    fd = os.open(mnt / "exact-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        assert os.write(fd, a + b"\n" + b + b"\n") == 1762
    finally:
        os.close(fd)
    settle(mnt, "exact-0", start + 2)
    assert batches(mnt, "exact-0")[-2:] == [[a], [b]]


def test_a_line_fits_exactly_when_its_encoded_batch_fits(mnt: Seglogd) -> None:
    """A 930-byte value makes a 1000-byte batch (61 header + 2 length + 7 framing + 930)."""
    start = end_offset(mnt, "exact-0")
    fd = os.open(mnt / "exact-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"x" * 930 + b"\n")
        assert errno_of(os.write, fd, b"y" * 931 + b"\n") == errno.EFBIG
        os.write(fd, b"s" * 100 + b"\n" + b"x" * 930 + b"\n" + b"s" * 10 + b"\n")
    finally:
        os.close(fd)
    settle(mnt, "exact-0", start + 4)
    assert [[len(v) for v in batch] for batch in batches(mnt, "exact-0")[-4:]] == [[930], [100], [930], [10]]


def test_engine_append_split_plans_every_batch_before_appending(tmp_path: Path) -> None:
    config = LogConfig.from_mapping({"max.message.bytes": 1000})
    with Log.open(tmp_path / "split-0", config, create=True) as log:
        infos = log.append_split([b"a" * 880, b"b" * 880, b"c" * 10, b"d" * 10])
        assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 0), (1, 3)]
        with pytest.raises(RecordTooLargeError) as err:
            log.append_split([b"ok", b"z" * 931, b"ok"])
        assert err.value.index == 1 and "record 1" in str(err.value)
        with pytest.raises(RecordTooLargeError):
            log.append_split([ProducerRecord(b"k" * 500), ProducerRecord(b"v", key=b"q" * 1000)])
        assert log.end_offset == 4  # nothing of the refused calls
        infos = log.append_split([ProducerRecord(b"r" * 600, key=b"k", headers=[("h", b"x")])] * 3)
        assert len(infos) == 3 and log.end_offset == 7
        assert [r.value for r in log.iter_records(0, 7)] == [
            b"a" * 880, b"b" * 880, b"c" * 10, b"d" * 10, b"r" * 600, b"r" * 600, b"r" * 600]


@pytest.mark.parametrize(
    ("limit", "codec"), [(70, "none"), (1000, "none"), (16_460, "none"), (1_048_588, "none"), (1000, "gzip")]
)
def test_engine_max_value_bytes_is_the_exact_one_record_limit(tmp_path: Path, limit: int, codec: str) -> None:
    """``Log.max_value_bytes`` is the largest value whose uncompressed one-record batch fits."""
    config = LogConfig.from_mapping({"max.message.bytes": limit, "compression.type": codec})
    with Log.open(tmp_path / "size-0", config, create=True) as log:
        largest = log.max_value_bytes()
        assert len(encode_values([b"v" * largest], 0, 0)) <= limit, (limit, largest)
        assert len(encode_values([b"v" * (largest + 1)], 0, 0)) > limit, (limit, largest)
        log.append_values([b"v" * largest])  # repetitive: fits compressed too
        assert log.end_offset == 1


def test_engine_batches_of_one_write_go_to_one_segment(tmp_path: Path) -> None:
    """A write of several batches rolls once, before anything is written, on their total size; it may
    take its segment past segment.bytes. An index that fills part-way gets no more entries."""
    config = LogConfig.from_mapping(
        {"segment.bytes": 4096, "max.message.bytes": 1000, "segment.index.bytes": 24,
         "index.interval.bytes": 0}
    )
    values = [b"%d-%s" % (i, b"v" * 797) for i in range(8)]
    with Log.open(tmp_path / "one-0", config, create=True) as log:
        log.append_values([b"first"])
        infos = log.append_split(values)
        assert len(infos) == 8
        assert [s.base_offset for s in log.segments] == [0, 1]
        assert log.segments[-1].size > 4096
        assert [log.read(offset).value for offset in range(9)] == [b"first", *values]
        log.append_values([b"next"])  # the active segment is over size and its index is full: rolls
        assert [s.base_offset for s in log.segments] == [0, 1, 9]
    with Log.open(tmp_path / "one-0", config) as log:
        assert [r.value for r in log.iter_records(0, 10)] == [b"first", *values, b"next"]


# ---------------------------------------------------------------- #16: fallocate never adds bytes
@pytest.mark.parametrize(
    ("name", "data"),
    [("append", b"hello\n"), ("append.jsonl", b'{"value": "hello"}\n'), ("append.raw", b"hello")],
)
def test_posix_fallocate_adds_no_bytes(mnt: Seglogd, name: str, data: bytes) -> None:
    start = end_offset(mnt, "fal-0")
    fd = os.open(mnt / "fal-0" / name, os.O_WRONLY)  # no O_APPEND: glibc would emulate it
    try:
        assert errno_of(os.posix_fallocate, fd, 0, 4096) == errno.EPERM
        assert errno_of(os.posix_fallocate, fd, 10, 3 << 20) == errno.EPERM
        os.write(fd, data)
    finally:
        os.close(fd)
    settle(mnt, "fal-0", start + 1)
    assert records(mnt, "fal-0")[start:] == [b"hello"]


@pytest.mark.parametrize("name", ["append", "append.jsonl", "append.raw"])
def test_fallocate_command_adds_no_bytes(mnt: Seglogd, name: str) -> None:
    start = end_offset(mnt, "fal-0")
    path = mnt / "fal-0" / name
    for flags in ("-l 4096", "--posix -l 4096", "-o 100 -l 1MiB", "--keep-size -l 4096"):
        result = sh(f"fallocate {flags} {path}")  # it opens O_RDWR: the write-only file refuses that
        assert result.returncode != 0, (flags, result)
    released(mnt, "fal-0", b"marker")
    settle(mnt, "fal-0", start + 1)
    assert records(mnt, "fal-0")[start:] == [b"marker"]


# ---------------------------------------------------------------- #20: chmod/chown
def test_chmod_and_chown_are_eperm(mnt: Seglogd) -> None:
    (mnt / "fal-0" / "append").write_bytes(b"a record\n")
    for path in (mnt.mount, mnt / "fal-0", mnt / "fal-0" / "append", mnt / "fal-0" / "info",
                 mnt / "fal-0" / "by-offset" / "0", mnt / "fal-0" / "segments"):
        assert errno_of(os.chmod, path, 0o600) == errno.EPERM, path
        assert errno_of(os.chown, path, 1, 1) == errno.EPERM, path
    assert sh(f"chmod 600 {mnt / 'fal-0' / 'append'}").returncode == 1


def test_chmod_and_chown_are_erofs_on_a_read_only_mount(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with Log.open(data_dir / "ro-0", LogConfig.from_mapping({}), create=True) as log:
        log.append_values([b"one"])
    daemon = make_seglogd(tmp_path, data_dir=data_dir, read_only=True, logs={})
    try:
        daemon.start()
        for path in (daemon.mount, daemon / "ro-0" / "append", daemon / "ro-0" / "by-offset" / "0"):
            assert errno_of(os.chmod, path, 0o600) == errno.EROFS, path
            assert errno_of(os.chown, path, 1, 1) == errno.EROFS, path
    finally:
        daemon.cleanup()
    assert "Traceback" not in daemon.stderr()


# ---------------------------------------------------------------- #12: only regular files in segments/
def test_segments_serves_regular_files_only(mnt: Seglogd, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("outside the data dir\n")
    log_dir = mnt.data_dir / "link-0"
    (log_dir / "evil.log").symlink_to(secret)
    (log_dir / "00000000000000099999.log").symlink_to(secret)
    os.mkfifo(log_dir / "fifo.log")
    (log_dir / "subdir").mkdir()
    try:
        listed = os.listdir(mnt / "link-0" / "segments")
        for name in ("evil.log", "00000000000000099999.log", "fifo.log", "subdir"):
            assert name not in listed
            path = mnt / "link-0" / "segments" / name
            assert errno_of(os.stat, path) == errno.ENOENT, name
            assert errno_of(os.open, path, os.O_RDONLY | os.O_NONBLOCK) == errno.ENOENT, name
        assert sh(f"cat {mnt / 'link-0' / 'segments' / 'evil.log'}").returncode == 1
        assert "00000000000000000000.log" in listed
    finally:
        for name in ("evil.log", "00000000000000099999.log", "fifo.log"):
            (log_dir / name).unlink()
        (log_dir / "subdir").rmdir()


# ---------------------------------------------------------------- campaign: random lines, random writes
CAMPAIGN_SEED = int(os.environ.get("SEGLOG_CAMPAIGN_SEED", "20261123"))
CAMPAIGN_CASES = 400


def random_line(rng: random.Random, i: int) -> bytes:
    """Line ``i``: mostly short, some around the 930 bytes that fit exactly, a few far too long."""
    kind = rng.random()
    if kind < 0.8:
        size = rng.randrange(0, 120)
    elif kind < 0.95:
        size = rng.randrange(920, 940)
    else:
        size = rng.randrange(1000, 3000)
    prefix = b"%d." % i
    return prefix + b"x" * max(0, size - len(prefix))


@pytest.mark.slow
def test_campaign_random_lines_in_random_writes(mnt: Seglogd) -> None:
    """A writer that goes on after every error, over random lines (some too large, some within a few
    bytes of the limit) cut into random writes, to ``append`` or (as JSON) to ``append.jsonl``. The
    oracle is the contract, not a second implementation: a line is appended, whole and in order,
    exactly when every write that carried any of its bytes succeeded; a failed write appends nothing."""
    rng = random.Random(CAMPAIGN_SEED)
    limit = 1000  # exact-0: one value fits up to 930 bytes, a batch up to 1000
    started = time.monotonic()
    for case in range(CAMPAIGN_CASES):
        jsonl = rng.random() < 0.3
        where = f"seed {CAMPAIGN_SEED} case {case} ({'append.jsonl' if jsonl else 'append'})"
        values = [random_line(rng, i) for i in range(rng.randrange(1, 80))]
        lines = [json.dumps({"value": v.decode()}).encode() if jsonl else v for v in values]
        stream = b"".join(line + b"\n" for line in lines)
        cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randrange(0, 40))))
        writes = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        start = end_offset(mnt, "exact-0")
        failed_bytes: set[int] = set()  # stream positions carried by a failed write
        position = 0
        fd = os.open(mnt / "exact-0" / ("append.jsonl" if jsonl else "append"), os.O_WRONLY | os.O_APPEND)
        try:
            for chunk in writes:
                try:
                    assert os.write(fd, chunk) == len(chunk), where
                except OSError as exc:
                    assert exc.errno == errno.EFBIG, (where, exc)
                    failed_bytes.update(range(position, position + len(chunk)))
                position += len(chunk)
        finally:
            os.close(fd)
        expected, position = [], 0
        for value, line in zip(values, lines, strict=True):
            span = range(position, position + len(line) + 1)
            position += len(line) + 1
            if not failed_bytes.intersection(span):
                expected.append(value)
        target = start + len(expected)
        wait_for(lambda target=target: end_offset(mnt, "exact-0") >= target, where)
        end = end_offset(mnt, "exact-0")
        got = [(mnt / "exact-0" / "by-offset" / str(n)).read_bytes() for n in range(start, end)]
        assert got == expected, (where, [len(x) for x in values], [len(w) for w in writes],
                                 [x[:8] for x in got], [x[:8] for x in expected])
        assert all(len(x) <= limit - 70 for x in got), where
    print(f"write campaign: {CAMPAIGN_CASES} cases, seed {CAMPAIGN_SEED}, {time.monotonic() - started:.1f} s")

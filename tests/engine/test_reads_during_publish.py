"""Reads by offset against appends made at the same time from another thread: an append moves the
log's end offset before its batch is visible in the segment."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from support.engine_helpers import open_log

from seglogfs.fetch_data_info import read_fetch_data
from seglogfs.log import Log
from seglogfs.segment import LogSegment


@contextlib.contextmanager
def append_stopped_at_publish(log: Log, value: bytes) -> Iterator[None]:
    """An append of ``value`` in another thread, held just before its batch is published (the end
    offset already moved, the log's lock held) for the body of the ``with``."""
    at_publish, go_on = threading.Event(), threading.Event()

    def stop_at_publish(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is LogSegment.publish.__code__:
            at_publish.set()
            go_on.wait(10)

    def append() -> None:
        sys.settrace(stop_at_publish)
        try:
            log.append_values([value])
        finally:
            sys.settrace(None)

    appender = threading.Thread(target=append)
    appender.start()
    try:
        assert at_publish.wait(10)
        yield
    finally:
        go_on.set()
        appender.join()


def test_a_fetch_at_the_end_while_an_append_is_published_is_empty_not_out_of_range(tmp_path: Path) -> None:
    """A fetch from the old end in between (a consumer at the tail, a FUSE append in another thread)
    finds no batch yet and answers nothing, as at the end, rather than OffsetOutOfRangeError (which
    makes a Kafka consumer reset its position); it never waits on the append (the listener's loop)."""
    log = open_log(tmp_path / "t-0")
    log.append_values([b"old"])
    with append_stopped_at_publish(log, b"new"):
        assert log.end_offset == 2  # moved; the batch is not published yet
        read = read_fetch_data(log, 1, 1 << 20, read_committed=False)
        assert read.records.size == 0
        assert read.high_watermark == 2
    read = read_fetch_data(log, 1, 1 << 20, read_committed=False)
    assert read.records.size > 0 and b"new" in read.records.read()
    log.close()


def test_a_read_of_an_offset_being_published_waits_for_it_rather_than_saying_it_is_missing(
    tmp_path: Path,
) -> None:
    """The same moment for ``Log.read`` (the mount's ``by-offset/<n>``): a poller that saw the new end
    offset and reads its record gets the record once the append is published, never
    OffsetOutOfRangeError (ENOENT) for a record the log counts."""
    log = open_log(tmp_path / "t-0")
    log.append_values([b"old"])
    got: list[bytes | None] = []
    reader = threading.Thread(target=lambda: got.append(log.read(1).value))
    with append_stopped_at_publish(log, b"new"):
        assert log.end_offset == 2
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and not got  # waiting for the append, not failing
    reader.join(10)
    assert got == [b"new"]
    log.close()

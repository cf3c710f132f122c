"""read_fetch_data against appends made at the same time from another thread."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import FrameType

from support.engine_helpers import open_log

from seglogfs.fetch_data_info import read_fetch_data
from seglogfs.segment import LogSegment


def test_a_fetch_at_the_end_while_an_append_is_published_is_empty_not_out_of_range(tmp_path: Path) -> None:
    """An append moves the log's end offset before its batch is visible in the segment: a fetch from
    the old end in between (a consumer at the tail, a FUSE append in another thread) finds no batch
    yet and answers nothing, as at the end, rather than OffsetOutOfRangeError (which makes a Kafka
    consumer reset its position)."""
    log = open_log(tmp_path / "t-0")
    log.append_values([b"old"])
    at_publish, go_on = threading.Event(), threading.Event()

    def stop_at_publish(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is LogSegment.publish.__code__:
            at_publish.set()
            go_on.wait(10)

    def append() -> None:
        sys.settrace(stop_at_publish)
        try:
            log.append_values([b"new"])
        finally:
            sys.settrace(None)

    appender = threading.Thread(target=append)
    appender.start()
    try:
        assert at_publish.wait(10)
        assert log.end_offset == 2  # moved; the batch is not published yet
        read = read_fetch_data(log, 1, 1 << 20, read_committed=False)
        assert read.records.size == 0
        assert read.high_watermark == 2
    finally:
        go_on.set()
        appender.join()
    read = read_fetch_data(log, 1, 1 << 20, read_committed=False)
    assert read.records.size > 0 and b"new" in read.records.read()
    log.close()

"""LogSegment's own life: the descriptor it lends readers, and the walk to its tail from the index."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seglogfs.log_files import DELETED_SUFFIX
from seglogfs.records import encode_values
from seglogfs.segment import LogSegment


def _segment_with_batches(directory: Path, batches: int = 5) -> LogSegment:
    segment = LogSegment(directory, 0, index_interval_bytes=1)  # every batch after the first indexed
    for i in range(batches):
        segment.append(encode_values([b"v%d" % i], i, 1000 + i), i, 1000 + i)
    return segment


def test_reader_fd_is_the_callers_and_outlives_the_segments(tmp_path):
    segment = _segment_with_batches(tmp_path)
    expected = segment.read(0, segment.size)
    fd = segment.open_reader_fd()  # the segment's descriptor is open: a duplicate of it
    try:
        segment.close()
        other = os.open(os.devnull, os.O_RDONLY)  # may take the number the segment gave back
        try:
            assert os.pread(fd, segment.size, 0) == expected
        finally:
            os.close(other)
    finally:
        os.close(fd)


def test_reader_fd_follows_retention_renames_and_never_creates(tmp_path):
    segment = _segment_with_batches(tmp_path)
    expected = segment.read(0, segment.size)
    renamed = segment.rename_suffix(DELETED_SUFFIX)
    assert segment.log_path.name.endswith(DELETED_SUFFIX)
    segment.close(trim=False)
    fd = segment.open_reader_fd()  # no descriptor left: opens the renamed file
    try:
        assert os.pread(fd, len(expected), 0) == expected
    finally:
        os.close(fd)
    for path in renamed:
        path.unlink()
    with pytest.raises(FileNotFoundError):
        segment.open_reader_fd()
    assert list(tmp_path.iterdir()) == []  # nothing was brought back


def test_tail_walks_from_the_index_agree_with_a_full_walk(tmp_path):
    segment = _segment_with_batches(tmp_path)
    assert segment.offset_index.entries >= 2
    headers = list(segment.iter_headers(0))
    assert segment.read_next_offset() == headers[-1].next_offset == 5
    assert segment.last_intact_batch() == headers[-1]
    assert segment.intact_end() == (5, segment.size)
    segment.close()
    empty = LogSegment(tmp_path / "empty", 0, writable=False)
    assert (empty.read_next_offset(), empty.last_intact_batch(), empty.intact_end()) == (0, None, (0, 0))


def test_a_segment_retention_removed_is_freed_without_the_garbage_collector(tmp_path):
    """A segment holds no reference cycle (its parts see it through a weak proxy): one that leaves the
    log is freed as its last reference goes, so the daemon may freeze its long-lived objects out of the
    collector's passes (daemon/long_lived.py) without leaking the segments retention deletes later."""
    import gc
    import weakref

    from support.engine_helpers import config

    from seglogfs.log_manager import LogManager

    with LogManager(tmp_path, config(segment_bytes=4096, retention_bytes=8192, file_delete_delay_ms=0)) as m:
        lg = m.create_log("r-0")
        for _ in range(20):
            lg.append_values([b"x" * 3000])
        old = [weakref.ref(s) for s in lg.segments[:-3]]
        gc.collect()
        gc.disable()
        try:
            m.maintain()
            m.maintain()
            assert len(lg.segments) < 20 - len(old) + 3
            assert [r for r in old if r() is not None] == []
        finally:
            gc.enable()

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

"""The descriptor budget: segments past it close their files and reopen them on their next use, with
the same no-symlink rule, and a file that vanished meanwhile is a clear error."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from seglogfs.config import LogConfig
from seglogfs.descriptor_budget import BUDGET, DESCRIPTORS_PER_HOLDER, budget_for_limit
from seglogfs.errors import LogOfflineError, SegmentFileMissingError
from seglogfs.log import Log
from seglogfs.log_manager import LogManager

LIMIT = 4  # holders (segments) allowed to keep descriptors


@pytest.fixture
def small_budget() -> Iterator[None]:
    BUDGET.configure(LIMIT)
    try:
        yield
    finally:
        BUDGET.configure()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_budget_is_half_the_open_files_limit() -> None:
    assert budget_for_limit(1024) * DESCRIPTORS_PER_HOLDER <= 512
    assert budget_for_limit(1024) >= 100
    assert budget_for_limit(16) >= 1


def test_logs_past_the_budget_close_their_files_and_reopen_them(tmp_path: Path, small_budget: None) -> None:
    """40 logs, each appended to (with index entries) and read: the process holds at most the
    budget's descriptors; every log reads back what it was given, twice (files reopened)."""
    cfg = LogConfig.from_mapping({"index.interval.bytes": 100, "segment.bytes": 4096})
    before = _open_fds()
    with LogManager(tmp_path / "data", cfg) as manager:
        names = [f"t{i}-0" for i in range(40)]
        for name in names:
            manager.create_log(name)
        assert _open_fds() - before <= 2  # the data dir lock: fresh logs hold nothing
        for round_no in range(2):
            for name in names:
                manager.logs[name].append_values([b"%s-%d-%s" % (name.encode(), round_no, b"x" * 300)] * 8)
                assert _open_fds() - before <= 2 + LIMIT * DESCRIPTORS_PER_HOLDER
        for name in names:
            values = [r.value for r in manager.logs[name].iter_records()]
            assert values == [b"%s-%d-%s" % (name.encode(), n, b"x" * 300) for n in (0, 1) for _ in range(8)]
            assert manager.logs[name].read(12).value.startswith(b"%s-1-" % name.encode())  # via the index
        assert _open_fds() - before <= 2 + LIMIT * DESCRIPTORS_PER_HOLDER
        assert len(BUDGET) <= LIMIT
        sealed = [s for name in names for s in manager.logs[name].segments[:-1]]
        assert sealed and sum(s._offset_index is not None for s in sealed) <= LIMIT  # copies dropped too


def test_a_file_gone_while_closed_takes_the_log_offline(tmp_path: Path, small_budget: None) -> None:
    """A .log the budget closed and that vanished meanwhile is found at the reopen: the append is
    refused (nothing acknowledged) and the log goes offline, naming the file."""
    lg = Log.open(tmp_path / "a-0", create=True)
    lg.append_values([b"one"])
    lg.release_files()
    segment = lg.segments[-1]
    segment.log_path.rename(tmp_path / "moved.log")
    with pytest.raises(LogOfflineError, match="is gone") as info:
        lg.append_values([b"two"])
    assert isinstance(info.value.__cause__, SegmentFileMissingError)
    assert info.value.__cause__.errno == errno.ENOENT and str(segment.log_path) in str(info.value)
    assert lg.end_offset == 1 and lg.offline_reason is not None
    lg.abandon()


def test_a_planted_symlink_is_refused_at_the_reopen(tmp_path: Path, small_budget: None) -> None:
    with Log.open(tmp_path / "a-0", create=True) as lg:
        lg.append_values([b"one"])
        lg.release_files()
        segment = lg.segments[-1]
        segment.log_path.rename(tmp_path / "moved.log")
        os.symlink(tmp_path / "moved.log", segment.log_path)
        with pytest.raises(OSError) as loop:
            lg.read(0)
        assert loop.value.errno == errno.ELOOP
        segment.log_path.unlink()
        (tmp_path / "moved.log").rename(segment.log_path)
        assert lg.read(0).value == b"one"
        lg.append_values([b"two"])
        assert [r.value for r in lg.iter_records()] == [b"one", b"two"]


def test_a_file_replaced_while_closed_is_never_read_as_the_segment(
    tmp_path: Path, small_budget: None
) -> None:
    """A reopened .log must be the file the segment had: another file put under its name (a copy
    with other bytes) is an error, never read in its place."""
    with Log.open(tmp_path / "a-0", create=True) as lg:
        lg.append_values([b"one"])
        lg.release_files()
        path = lg.segments[-1].log_path
        copy = tmp_path / "copy.log"
        copy.write_bytes(path.read_bytes())
        original = tmp_path / "original.log"
        path.rename(original)
        copy.rename(path)
        with pytest.raises(SegmentFileMissingError, match="replaced on disk"):
            lg.read(0)
        path.unlink()
        original.rename(path)
        assert lg.read(0).value == b"one"

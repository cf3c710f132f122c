"""The kinds of paths (seglogfs/fs/files.py) and their open files, called as libfuse would: no mount."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import seglogfs.fs  # noqa: F401  (libfuse3 before mfusepy)
from seglogfs.config import LogConfig
from seglogfs.fs.operations import SeglogOperations
from seglogfs.log_manager import LogManager


@dataclass
class FileInfo:
    """The fields of libfuse's fuse_file_info that the operations use."""

    flags: int
    fh: int = 0
    direct_io: int = 0
    keep_cache: int = 0
    noflush: int = 0


@pytest.fixture
def ops(tmp_path: Path) -> Iterator[SeglogOperations]:
    manager = LogManager(tmp_path / "data", LogConfig.from_mapping({"max.message.bytes": 1000}))
    lg = manager.create_log("t-0")
    lg.append_values([b"a", b"b"])
    lg.roll()
    yield SeglogOperations(manager)
    manager.close()


def errno_of(call, *args) -> int:
    with pytest.raises(OSError) as caught:  # FuseOSError
        call(*args)
    return caught.value.errno


def test_open_sets_the_caching_flags_of_each_kind(ops: SeglogOperations) -> None:
    cases = {
        "/t-0/by-offset/1": (0, 1),
        "/t-0/records": (1, 0),
        "/t-0/info": (1, 0),
        "/t-0/segments/00000000000000000000.log": (0, 1),  # sealed
        "/t-0/segments/00000000000000000002.log": (0, 0),  # active
    }
    for path, (direct_io, keep_cache) in cases.items():
        fi = FileInfo(os.O_RDONLY)
        assert ops.open(path, fi) == 0
        assert (fi.direct_io, fi.keep_cache, fi.noflush) == (direct_io, keep_cache, 1), path
        ops.release(path, fi)
    fi = FileInfo(os.O_WRONLY)
    ops.open("/t-0/append", fi)
    assert (fi.direct_io, fi.keep_cache, fi.noflush) == (1, 0, 1)
    ops.release("/t-0/append", fi)


def test_open_errnos(ops: SeglogOperations) -> None:
    assert errno_of(ops.open, "/t-0/by-offset", FileInfo(os.O_RDONLY)) == errno.EISDIR
    assert errno_of(ops.open, "/t-0/append", FileInfo(os.O_RDONLY)) == errno.EACCES
    assert errno_of(ops.open, "/t-0/records", FileInfo(os.O_WRONLY)) == errno.EROFS
    assert errno_of(ops.open, "/t-0/by-offset/9", FileInfo(os.O_RDONLY)) == errno.ENOENT
    assert errno_of(ops.open, "/nope-0/records", FileInfo(os.O_RDONLY)) == errno.ENOENT
    assert errno_of(ops.getattr, "/t-0/segments/.seglogfs.lock") == errno.ENOENT


def test_reads_and_writes_go_to_the_open_file(ops: SeglogOperations) -> None:
    fi = FileInfo(os.O_WRONLY)
    ops.open("/t-0/append", fi)
    assert ops.write("/t-0/append", b"c\nd", 0, fi) == 3
    assert errno_of(ops.read, "/t-0/append", 10, 0, fi) == errno.EBADF
    assert errno_of(ops.write, "/t-0/append", b"x" * 2000, 0, fi) == errno.EFBIG  # the line goes
    ops.release("/t-0/append", fi)
    reader = FileInfo(os.O_RDONLY)
    ops.open("/t-0/records", reader)
    assert ops.read("/t-0/records", 100, 0, reader) == b"a\nb\nc\n"
    assert errno_of(ops.write, "/t-0/records", b"x", 0, reader) == errno.EBADF
    ops.release("/t-0/records", reader)
    assert errno_of(ops.read, "/t-0/records", 100, 0, reader) == errno.EBADF  # released


def test_append_raw_is_one_record_at_release(ops: SeglogOperations) -> None:
    fi = FileInfo(os.O_WRONLY)
    ops.open("/t-0/append.raw", fi)
    ops.write("/t-0/append.raw", b"x\n", 0, fi)
    ops.write("/t-0/append.raw", b"y", 0, fi)
    ops.release("/t-0/append.raw", fi)
    assert ops.manager.get("t-0").read(2).value == b"x\ny"


def test_listings_and_attributes(ops: SeglogOperations) -> None:
    assert [name for name, _, _ in ops.readdir("/", 0)] == [".", "..", "t-0"]
    entries = {name: mode for name, mode, _ in ops.readdir("/t-0", 0)}
    assert entries["segments"] == stat.S_IFDIR and entries["append"] == stat.S_IFREG
    assert [name for name, _, _ in ops.readdir("/t-0/by-offset", 0)][2:] == ["0", "1"]
    assert [name for name, _, _ in ops.readdir("/t-0/by-time", 0)] == [".", ".."]
    assert "00000000000000000000.log" in [name for name, _, _ in ops.readdir("/t-0/segments", 0)]
    assert errno_of(ops.readdir, "/t-0/info", 0) == errno.ENOTDIR
    assert stat.S_ISLNK(ops.getattr("/t-0/by-time/0")["st_mode"])
    assert ops.readlink("/t-0/by-time/0") == "../by-offset/0"
    assert ops.getattr("/t-0/by-offset/1")["st_size"] == 1
    assert ops.getxattr("/t-0/by-offset/1", "user.seglog.offset") == b"1"
    assert ops.listxattr("/t-0/records") == []

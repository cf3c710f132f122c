"""The per-request path of the mount: remembered path parses, the lean libfuse callbacks
(seglogfs/fs/fast_callbacks.py) and the record cache that spares re-opened files the engine."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.mount_fixture import Seglogd, fuse_required, make_seglogd

import seglogfs.fs  # noqa: F401  (libfuse3 before mfusepy)
from seglogfs.config import LogConfig
from seglogfs.fs import fast_callbacks, paths
from seglogfs.fs.fast_callbacks import LeanFUSE, lean_callbacks_available, stat_packer
from seglogfs.fs.operations import SeglogOperations
from seglogfs.fs.paths import Kind, node_of, parse_path
from seglogfs.log import Log
from seglogfs.log_manager import LogManager

mfusepy = fast_callbacks.mfusepy  # imported by seglogfs.fs, once it has chosen libfuse3


# ---------------------------------------------------------------- node_of
def test_node_of_remembers_each_parse() -> None:
    path = "/t-0/by-offset/12"
    first = node_of(path)
    assert first == parse_path(path) and first.kind is Kind.BY_OFFSET and first.number == 12
    assert node_of(path) is first


def test_node_of_does_not_remember_errors() -> None:
    for _ in range(2):
        with pytest.raises(OSError) as raised:
            node_of("/t-0/by-offset/x1")
        assert raised.value.errno == errno.ENOENT
    assert "/t-0/by-offset/x1" not in paths._nodes


def test_node_of_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "NODE_CACHE_ENTRIES", 8)
    monkeypatch.setattr(paths, "_nodes", {})
    for n in range(20):
        assert node_of(f"/t-0/by-offset/{n}").number == n
        assert len(paths._nodes) <= 8


# ---------------------------------------------------------------- lean callbacks
ATTRS = [
    {"st_mode": 0o100444, "st_nlink": 1, "st_size": 100, "st_uid": 1000, "st_gid": 1000,
     "st_atime": 1_700_000_000_123_456_789, "st_mtime": 1_700_000_000_123_456_789,
     "st_ctime": 1_700_000_000_123_456_789, "st_blksize": 1 << 20, "st_blocks": 1},
    {"st_mode": 0o40755, "st_nlink": 13, "st_size": 0, "st_uid": 0, "st_gid": 0,
     "st_atime": 0, "st_mtime": 5, "st_ctime": 999_999_999, "st_blksize": 1 << 20, "st_blocks": 0},
    {"st_mode": 0o100200, "st_nlink": 1, "st_size": (1 << 62) + 3, "st_uid": (1 << 32) - 2,
     "st_gid": (1 << 32) - 2, "st_atime": -1_500_000_000, "st_mtime": (1 << 40) * 1_000_000,
     "st_ctime": 1, "st_blksize": 4096, "st_blocks": 1 << 53},
]


@pytest.mark.parametrize("attrs", ATTRS)
def test_stat_packer_writes_what_mfusepy_writes(attrs: dict[str, int]) -> None:
    pack = stat_packer()
    assert pack is not None, "the lean callbacks must serve on this platform"
    expected = mfusepy.c_stat()
    mfusepy.set_st_attrs(expected, attrs, use_ns=True)
    assert pack(attrs) == bytes(expected)


def test_lean_getattr_fills_a_partial_answer_as_mfusepy_does() -> None:
    class Ops:
        def getattr(self, path: str, fi: object) -> dict[str, int]:
            return {"st_mode": 0o100444, "st_size": 7, "st_mtime": 3_000_000_001}

    st = mfusepy.c_stat()
    ctypes.memset(ctypes.addressof(st), 0xFF, ctypes.sizeof(st))
    assert _lean(Ops()).getattr_fuse_3(b"/x", ctypes.pointer(st), None) == 0
    expected = mfusepy.c_stat()
    mfusepy.set_st_attrs(expected, Ops().getattr("/x", None), use_ns=True)
    assert bytes(st) == bytes(expected)


@dataclass
class _Ops:
    """Operations whose read answers ``data`` whatever the size asked."""

    data: bytes

    def read(self, path: str | None, size: int, offset: int, fi: object) -> bytes:
        return self.data


def _lean(operations: object) -> LeanFUSE:
    """A LeanFUSE that is not mounted: its callbacks called as libfuse would."""
    fuse = LeanFUSE.__new__(LeanFUSE)
    fuse.operations = operations
    fuse.raw_fi = True
    return fuse


def test_lean_read_copies_the_answer_and_never_past_the_buffer() -> None:
    assert lean_callbacks_available()
    fi = mfusepy.fuse_file_info()
    buf = (ctypes.c_byte * 8)()
    target = ctypes.cast(buf, ctypes.POINTER(ctypes.c_byte))
    assert _lean(_Ops(b"abc")).read(b"/t-0/records", target, 8, 0, ctypes.pointer(fi)) == 3
    assert bytes(buf)[:3] == b"abc"
    assert _lean(_Ops(b"")).read(b"/t-0/records", target, 8, 0, ctypes.pointer(fi)) == 0
    with pytest.raises(OSError) as raised:  # libfuse's buffer holds 4 bytes: EIO, nothing written
        _lean(_Ops(b"too long")).read(b"/t-0/records", target, 4, 0, ctypes.pointer(fi))
    assert raised.value.errno == errno.EIO
    assert bytes(buf)[:3] == b"abc"


def test_the_mount_serves_with_the_lean_callbacks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from seglogfs.fs import mount

    used: list[type] = []

    def fake(cls: type) -> type:
        class Recorder(cls):  # type: ignore[misc, valid-type]
            def __init__(self, *args: object, **kwargs: object) -> None:
                used.append(cls)

        return Recorder

    plain = mfusepy.FUSE
    monkeypatch.setattr(mount, "LeanFUSE", fake(LeanFUSE))
    monkeypatch.setattr(mount.mfusepy, "FUSE", fake(plain))
    ops = SimpleNamespace(loop_ended=lambda: None)  # nothing is served: the recorders mount nothing
    mount.run_mount(ops, tmp_path)  # type: ignore[arg-type]
    assert used == [LeanFUSE]
    monkeypatch.setattr(fast_callbacks, "_pack_stat", None)  # a struct stat it does not know
    mount.run_mount(ops, tmp_path)  # type: ignore[arg-type]
    assert used == [LeanFUSE, plain]


# ---------------------------------------------------------------- the record cache
@pytest.fixture
def big_ops(tmp_path: Path) -> Iterator[SeglogOperations]:
    manager = LogManager(tmp_path / "data", LogConfig.from_mapping({}))
    lg = manager.create_log("t-0")
    for first in range(0, 40_000, 1000):
        lg.append_values([b"%0100d" % i for i in range(first, first + 1000)])
    yield SeglogOperations(manager)
    manager.close()


def test_reopening_the_last_40000_small_records_needs_no_engine_read(
        big_ops: SeglogOperations, monkeypatch: pytest.MonkeyPatch) -> None:
    # bench/fuse.py reads 2 x 20,000 random records, then opens the first 20,000 again: the kernel
    # keeps their pages, but each open asks for its record
    for n in range(40_000):
        big_ops.getattr(f"/t-0/by-offset/{n}")
    reads: list[int] = []
    original = Log.read
    monkeypatch.setattr(Log, "read", lambda lg, offset: reads.append(offset) or original(lg, offset))
    for n in range(40_000):
        fi = mfusepy.fuse_file_info(flags=os.O_RDONLY)  # libfuse's own struct
        big_ops.open(f"/t-0/by-offset/{n}", fi)
        assert big_ops.read(f"/t-0/by-offset/{n}", 4096, 0, fi) == b"%0100d" % n
        big_ops.release(f"/t-0/by-offset/{n}", fi)
    assert reads == []


# ---------------------------------------------------------------- through a real mount
@pytest.fixture(scope="module")
def mnt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    daemon = make_seglogd(tmp_path_factory.mktemp("requests"), logs={"r-0": {}})
    try:
        daemon.start()
        with open(daemon.mount / "r-0" / "append.jsonl", "w") as f:
            f.write('{"value": "hello", "timestamp": 1700000000123}\n{"value": "", "timestamp": 5}\n')
        yield daemon
    finally:
        daemon.cleanup()


@pytest.mark.fuse
@fuse_required
def test_stat_through_the_lean_getattr(mnt: Seglogd) -> None:
    st = os.stat(mnt.mount / "r-0" / "by-offset" / "0")
    assert (st.st_size, st.st_mtime_ns) == (5, 1_700_000_000_123_000_000)
    assert (st.st_blksize, st.st_blocks, st.st_mode, st.st_nlink) == (1 << 20, 1, 0o100444, 1)
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    assert os.stat(mnt.mount / "r-0" / "by-offset" / "1").st_mtime_ns == 5_000_000
    assert os.stat(mnt.mount / "r-0").st_nlink == 6


@pytest.mark.fuse
@fuse_required
def test_reads_through_the_lean_callbacks(mnt: Seglogd) -> None:
    path = mnt.mount / "r-0" / "by-offset" / "0"
    for _ in range(3):  # cold, then from the kernel's pages (OPEN and RELEASE still reach us)
        fd = os.open(path, os.O_RDONLY)
        try:
            assert os.read(fd, 4096) == b"hello"
        finally:
            os.close(fd)
    assert (mnt.mount / "r-0" / "records").read_bytes() == b"hello\n\n"
    with pytest.raises(FileNotFoundError):
        os.open(mnt.mount / "r-0" / "by-offset" / "2", os.O_RDONLY)

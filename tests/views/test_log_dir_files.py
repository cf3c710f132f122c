"""LogDirFiles: the regular files of a log dir, never following a symlink, never blocking on a FIFO."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.engine_helpers import open_log

from seglogfs.views.log_dir_files import LogDirFiles


@pytest.fixture
def files(tmp_path: Path) -> Iterator[LogDirFiles]:
    lg = open_log(tmp_path / "t-0")
    lg.append_values([b"a", b"b"])
    lg.roll()
    lg.append_values([b"c"])
    (lg.dir / ".hidden").write_bytes(b"x")
    (lg.dir / "subdir").mkdir()
    os.mkfifo(lg.dir / "fifo")
    (lg.dir / "link.log").symlink_to(lg.dir / "00000000000000000000.log")
    yield LogDirFiles(lg)
    lg.close()


def test_names_are_the_regular_non_hidden_files(files: LogDirFiles) -> None:
    names = files.names()
    assert "00000000000000000000.log" in names and "00000000000000000002.timeindex" in names
    assert names == sorted(names)
    assert not {".hidden", "subdir", "fifo", "link.log", ".seglogfs.lock"} & set(names)


@pytest.mark.parametrize("name", ["subdir", "fifo", "link.log", "missing"])
def test_stat_and_open_refuse_what_is_not_a_regular_file(files: LogDirFiles, name: str) -> None:
    with pytest.raises(FileNotFoundError):
        files.stat(name)
    with pytest.raises(FileNotFoundError):
        files.open(name)  # the FIFO does not block


def test_open_reads_the_file_as_it_is_on_disk(files: LogDirFiles) -> None:
    name = "00000000000000000000.log"
    fd = files.open(name)
    try:
        assert os.pread(fd, 1 << 20, 0) == (files.log.dir / name).read_bytes()
    finally:
        os.close(fd)
    assert files.stat(name).st_size == (files.log.dir / name).stat().st_size


def test_only_the_files_of_sealed_segments_are_sealed(files: LogDirFiles) -> None:
    assert files.is_sealed("00000000000000000000.log")
    assert files.is_sealed("00000000000000000000.index")
    assert files.is_sealed("00000000000000000000.timeindex")
    assert not files.is_sealed("00000000000000000002.log")  # the active segment
    assert not files.is_sealed("0.log")  # not the canonical 20-digit name
    assert not files.is_sealed("00000000000000000000.log.deleted")
    assert not files.is_sealed("partition.metadata")

"""``seglogfs.regular_files``: what the tools open, and how they refuse what they must not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seglogfs.regular_files import (
    NotRegularFileError,
    non_regular_kind,
    open_readonly,
    require_regular_file,
)


def test_kinds_by_stat_alone(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    os.mkfifo(tmp_path / "fifo")
    assert non_regular_kind(tmp_path / "f") is None
    assert non_regular_kind(tmp_path / "missing") is None
    assert non_regular_kind(tmp_path) == "a directory"
    assert non_regular_kind(tmp_path / "fifo") == "a FIFO"
    with pytest.raises(NotRegularFileError, match="a FIFO, not a regular file"):
        require_regular_file(tmp_path / "fifo")


def test_open_readonly_never_blocks_and_maps_the_whole_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "data").write_bytes(b"abc")
    os.mkfifo(tmp_path / "fifo")
    with open_readonly(tmp_path / "empty") as buf:
        assert buf == b""
    with open_readonly(tmp_path / "data") as buf:
        assert bytes(buf[:]) == b"abc"
    with pytest.raises(NotRegularFileError), open_readonly(tmp_path / "fifo"):
        pass


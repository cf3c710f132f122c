"""``seglogfs.log_files``: every on-disk name, parsed and built in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglogfs.errors import InvalidLogNameError
from seglogfs.log_files import (
    LOG_LOCK_FILE,
    base_offset_from_name,
    find_log_dirs,
    is_log_dir,
    is_segment_file_name,
    parse_offset_file_name,
    sealed_segment_file,
    segment_file_name,
    sibling_path,
    validate_log_name,
)


def test_segment_names_round_trip() -> None:
    name = segment_file_name(42, ".timeindex")
    assert name == "00000000000000000042.timeindex"
    assert base_offset_from_name(name) == 42
    assert parse_offset_file_name(name) == (42, ".timeindex")
    assert parse_offset_file_name("00000000000000000042.log.deleted") == (42, ".log.deleted")


@pytest.mark.parametrize("name", ["x.log", "42", ".log", "\u00b2.log", "-1.log", ""])
def test_names_that_are_not_offset_named(name: str) -> None:
    assert parse_offset_file_name(name) is None
    assert not is_segment_file_name(name)


def test_segment_file_name_needs_an_exact_suffix() -> None:
    assert is_segment_file_name("7.snapshot")
    assert not is_segment_file_name("7.log.swap")
    assert not is_segment_file_name("00.foo.log")


def test_sealed_only_below_the_active_segment_and_canonical() -> None:
    assert sealed_segment_file(segment_file_name(0, ".log"), 100)
    assert sealed_segment_file(segment_file_name(99, ".timeindex"), 100)
    assert not sealed_segment_file(segment_file_name(100, ".log"), 100)  # the active segment grows
    assert not sealed_segment_file("5.log", 100)  # not the 20-digit spelling
    assert not sealed_segment_file(segment_file_name(0, ".snapshot"), 100)


def test_sibling_keeps_the_offset_as_written(tmp_path: Path) -> None:
    assert sibling_path(tmp_path / "5.index", ".log") == tmp_path / "5.log"
    assert sibling_path(Path("00000000000000000007.timeindex"), ".index").name == "00000000000000000007.index"


def test_find_log_dirs(tmp_path: Path) -> None:
    for name in ("a-0", "b-1", "x-0.abc-delete", ".hidden-0"):
        (tmp_path / name).mkdir()
    (tmp_path / "a-0" / segment_file_name(0, ".log")).write_bytes(b"")
    (tmp_path / "b-1" / LOG_LOCK_FILE).write_bytes(b"")
    (tmp_path / "link-0").symlink_to(tmp_path / "a-0")
    assert is_log_dir(tmp_path / "a-0") and is_log_dir(tmp_path / "b-1")
    assert not is_log_dir(tmp_path) and not is_log_dir(tmp_path / "missing")
    assert [p.name for p in find_log_dirs(tmp_path)] == ["a-0", "b-1"]
    assert find_log_dirs(tmp_path / "a-0") == [tmp_path / "a-0"]
    with pytest.raises(FileNotFoundError):
        find_log_dirs(tmp_path / "missing")
    with pytest.raises(InvalidLogNameError):
        validate_log_name("a/b")

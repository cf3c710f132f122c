"""A log name is a Kafka topic-partition: one name per (topic, partition), in its canonical spelling.

``c`` and ``c-0`` (or ``x-00`` and ``x-0``) would share one line of every data-dir checkpoint: the
second log would take the first one's log start offset and hide or delete its records.
"""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest
from support.mount_fixture import fuse_required, seglogd  # noqa: F401  (fixture)

from seglogd.config import parse_config
from seglogfs.checkpoint import read_offset_checkpoint
from seglogfs.config import LogConfig
from seglogfs.errors import ConfigError, InvalidLogNameError
from seglogfs.log import Log
from seglogfs.log_files import check_new_log_name, shared_topic_partitions
from seglogfs.log_manager import LogManager


@pytest.mark.parametrize(
    "name", ["x-00", "x-01", "-5", "t-2147483648", "e-0.3b2c1a0f9e8d7c6b5a4f3e2d1c0b9a8f-delete"]
)
def test_non_canonical_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidLogNameError, match="log name"):
        check_new_log_name(name)
    with LogManager(tmp_path / "data") as manager, pytest.raises(InvalidLogNameError):
        manager.create_log(name)
    assert not (tmp_path / "data" / name).exists()


@pytest.mark.parametrize(
    ("name", "key"),
    [("c", ("c", 0)), ("c-0", ("c", 0)), ("a-b", ("a-b", 0)), ("t-2147483647", ("t", 2147483647))],
)
def test_canonical_names(name: str, key: tuple[str, int]) -> None:
    assert check_new_log_name(name) == key


def test_shared_topic_partitions() -> None:
    assert shared_topic_partitions(["c", "c-0", "x-00", "x-0", "y-1", "y"]) == {
        ("c", 0): ["c", "c-0"],
        ("x", 0): ["x-0", "x-00"],
    }


@pytest.mark.parametrize(("first", "second"), [("c-0", "c"), ("c", "c-0"), ("a-b-0", "a-b")])
def test_create_log_refuses_a_taken_topic_partition(tmp_path: Path, first: str, second: str) -> None:
    with LogManager(tmp_path / "data") as manager:
        manager.create_log(first)
        with pytest.raises(FileExistsError) as info:
            manager.create_log(second)
        assert info.value.errno == errno.EEXIST
        assert first in str(info.value) and second in str(info.value)
        assert sorted(manager.logs) == [first]
    assert not (tmp_path / "data" / second).exists()


def test_config_refuses_two_names_for_one_topic_partition() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("data_dir: /d\nmount_point: /m\nlogs:\n  c-0: {}\n  c: {}\n")
    assert info.value.key == "logs.c" and "c-0" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_config("data_dir: /d\nmount_point: /m\nlogs:\n  x-00: {}\n")
    assert info.value.key == "logs.x-00" and "canonical" in str(info.value)


def _log_with_records(data: Path, name: str, count: int, prefix: bytes) -> None:
    """A log dir made on its own, as an older seglogfs (which took any name) could leave it."""
    log = Log.open(data / name, LogConfig(), create=True)
    log.append_values([prefix + b"%d" % i for i in range(count)])
    log.close()


def test_load_serves_neither_of_two_dirs_of_one_topic_partition(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _log_with_records(data, "c-0", 30, b"c-0:")
    _log_with_records(data, "c", 50, b"c:")
    _log_with_records(data, "other-0", 5, b"o:")
    before = {p: p.read_bytes() for p in data.rglob("*.log")}
    (data / "log-start-offset-checkpoint").write_text("0\n2\nc 0 20\nother 0 0\n")
    for _ in range(2):  # two restarts, as in the issue
        with LogManager(data) as manager:
            assert sorted(manager.logs) == ["other-0"]
            offline = manager.offline
            assert sorted(offline) == ["c", "c-0"]
            assert "c-0" in offline["c"] and "topic c partition 0" in offline["c"]
            assert "c" in offline["c-0"]
            for name in ("c", "c-0"):
                with pytest.raises(FileExistsError):
                    manager.create_log(name)
            manager.maintain()
    assert {p: p.read_bytes() for p in data.rglob("*.log")} == before
    # The shared line is carried over unchanged: whichever dir the operator keeps finds it again.
    assert read_offset_checkpoint(data / "log-start-offset-checkpoint")[("c", 0)] == 20
    (data / "c").rename(data / "d-0")
    with LogManager(data) as manager:
        assert sorted(manager.logs) == ["c-0", "d-0", "other-0"]
        assert [r.value for r in manager.get("d-0").iter_records()] == [b"c:%d" % i for i in range(50)]
        assert manager.get("c-0").start_offset == 20


@fuse_required
def test_mkdir_of_a_taken_or_non_canonical_topic_partition(seglogd) -> None:  # noqa: F811
    d = seglogd(logs={"c-0": {}})
    for name, code in (("c", "File exists"), ("x-00", "Invalid argument")):
        result = subprocess.run(["mkdir", str(d / name)], capture_output=True, text=True)
        assert result.returncode != 0 and code in result.stderr, (name, result.stderr)
    assert subprocess.run(["mkdir", str(d / "x-0")], capture_output=True).returncode == 0
    result = subprocess.run(["mkdir", str(d / "x")], capture_output=True, text=True)
    assert "File exists" in result.stderr
    assert sorted(p.name for p in d.mount.iterdir()) == ["c-0", "x-0"]
    assert json.loads((d / "c-0" / "info").read_text())["name"] == "c-0"
    assert d.stop() == 0
    assert sorted(p.name for p in d.data_dir.iterdir() if p.is_dir()) == ["c-0", "x-0"]


# --- names whose topic would be '.' or '..' ---------------------------------------------------------
# ``.-0`` passes the character rule, but its topic is '.', which Kafka refuses: every checkpoint
# holding that line failed to write, and with it every other log's recovery point and the marker.

_DOT_TOPIC_NAMES = [".-0", "..-0", ".-7", "..-12"]


@pytest.mark.parametrize("name", _DOT_TOPIC_NAMES)
def test_a_name_whose_topic_is_dot_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidLogNameError, match="topic"):
        check_new_log_name(name)
    with LogManager(tmp_path / "data") as manager:
        with pytest.raises(InvalidLogNameError):
            manager.create_log(name)
        manager.create_log("events-0")
    assert not (tmp_path / "data" / name).exists()
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    with pytest.raises(ConfigError) as info:
        parse_config(f"data_dir: /d\nmount_point: /m\nlogs:\n  '{name}': {{}}\n")
    assert info.value.key == f"logs.{name}"


def test_a_dot_topic_dir_at_load_is_skipped_and_checkpoints_still_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    _log_with_records(data, "events-0", 5, b"e:")
    (data / ".-0").mkdir()
    (data / "..-0").mkdir()
    caplog.set_level("WARNING")
    with LogManager(data) as manager:
        assert sorted(manager.logs) == ["events-0"]
        manager.get("events-0").append_values([b"more"])
        manager.get("events-0").flush()
        manager.maintain()
    assert any(".-0" in r.getMessage() and "is not allowed" in r.getMessage() for r in caplog.records)
    assert read_offset_checkpoint(data / "recovery-point-offset-checkpoint") == {("events", 0): 6}
    assert read_offset_checkpoint(data / "log-start-offset-checkpoint") == {("events", 0): 0}
    assert (data / ".kafka_cleanshutdown").exists()
    assert (data / ".-0").is_dir() and (data / "..-0").is_dir()  # left as found


@fuse_required
def test_mkdir_of_a_dot_topic_name_is_einval_and_shutdown_stays_clean(seglogd) -> None:  # noqa: F811
    d = seglogd(logs={"events-0": {}})
    for name in (".-0", "..-0"):
        result = subprocess.run(["mkdir", str(d / name)], capture_output=True, text=True)
        assert result.returncode != 0 and "Invalid argument" in result.stderr, (name, result.stderr)
    subprocess.run(f"echo hello > {d / 'events-0' / 'append'}", shell=True, check=True)
    assert d.stop() == 0, d.stderr()
    assert "Traceback" not in d.stderr() and "cannot shut down cleanly" not in d.stderr(), d.stderr()
    assert not (d.data_dir / ".-0").exists() and not (d.data_dir / "..-0").exists()
    assert (d.data_dir / ".kafka_cleanshutdown").exists()
    assert read_offset_checkpoint(d.data_dir / "recovery-point-offset-checkpoint") == {("events", 0): 1}

"""Loading a data dir: one log's damage stops nothing, one owner at a time, no symlink followed.

A torn or garbage tail is cut (read-write) or not read (read-only) whatever the clean-shutdown marker
says; a log that truly cannot be opened is offline (named in the daemon log and in its ``info``, other
paths EIO, still listed) while every other log serves; nothing holding the only copy of data is
deleted. The data dir is locked (``.lock``) so a second daemon cannot share it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.mount_fixture import fuse_required, seglogd  # noqa: F401  (fixture)

from seglogfs.config import LogConfig
from seglogfs.errors import CloseError, LogOfflineError
from seglogfs.log_manager import LogManager

FIRST_LOG = "00000000000000000000.log"
VALUES = [f"v{i}" for i in range(40)]


def make_data(data: Path, *names: str, values: list[str] = VALUES) -> None:
    """A cleanly closed data dir holding ``values`` in each named log."""
    with LogManager(data, LogConfig()) as manager:
        for name in names:
            manager.create_log(name).append_values([v.encode() for v in values])


def records(mount_log: Path) -> list[str]:
    return (mount_log / "records").read_text().splitlines()


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True)


# ---------------------------------------------------------------------------- torn and garbage tails


@fuse_required
@pytest.mark.parametrize("tail", ["zeros", "garbage"])
def test_clean_marker_and_a_bad_active_tail_start_and_cut_it(seglogd, tail: str) -> None:  # noqa: F811
    d = seglogd(logs={"events-0": {}, "other-0": {}})
    (d / "events-0" / "append").write_text("".join(f"{v}\n" for v in VALUES))
    (d / "other-0" / "append").write_text("o\n")
    assert d.stop() == 0
    segment = d.data_dir / "events-0" / FIRST_LOG
    size = segment.stat().st_size
    if tail == "zeros":
        assert run("truncate", "-s", "+100", str(segment)).returncode == 0
    else:
        with open(segment, "ab") as f:
            f.write(bytes(range(7, 107)))
    assert (d.data_dir / ".kafka_cleanshutdown").exists()
    d.start()
    assert records(d / "events-0") == VALUES
    assert records(d / "other-0") == ["o"]
    assert segment.stat().st_size == size  # the tail was cut, nothing before it
    (d / "events-0" / "append").write_text("after\n")
    assert (d / "events-0" / "by-offset" / "40").read_text() == "after"
    assert "recovery cut 100 bytes" in d.stderr()
    assert d.stop() == 0
    d.start()
    assert records(d / "events-0") == [*VALUES, "after"]


@fuse_required
@pytest.mark.parametrize("marker", [True, False])
def test_read_only_over_a_preallocated_active_segment(seglogd, tmp_path: Path, marker: bool) -> None:  # noqa: F811
    data = tmp_path / "kafka-copy"
    make_data(data, "events-0", "other-0")
    segment = data / "events-0" / FIRST_LOG
    with open(segment, "ab") as f:  # a broker with log.preallocate=true: a zero-filled tail
        f.write(bytes(4096))
    if not marker:
        (data / ".kafka_cleanshutdown").unlink()
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file()}
    d = seglogd(data_dir=data, read_only=True, logs={})
    assert records(d / "events-0") == VALUES
    assert records(d / "other-0") == VALUES
    info = json.loads((d / "events-0" / "info").read_text())
    assert info["end_offset"] == 40
    assert "not reading 4096 bytes" in d.stderr()
    assert d.stop() == 0
    assert {p: p.read_bytes() for p in data.rglob("*") if p.is_file()} == before


@fuse_required
def test_garbage_swap_is_set_aside_and_every_start_serves(seglogd) -> None:  # noqa: F811
    d = seglogd(start=False, logs={"events-0": {}})
    make_data(d.data_dir, "events-0")
    garbage = bytes((i * 37 + 11) % 256 for i in range(300))
    (d.data_dir / "events-0" / (FIRST_LOG + ".swap")).write_bytes(garbage)
    for _ in range(2):
        d.start()
        assert records(d / "events-0") == VALUES
        assert d.stop() == 0
    kept = d.data_dir / "events-0" / (FIRST_LOG + ".swap.corrupt")
    assert kept.read_bytes() == garbage  # set aside, never deleted
    first_run = d.stderr_path.with_name("seglogd-1.stderr").read_text()
    assert "set 00000000000000000000.log.swap aside" in first_run


# ---------------------------------------------------------------------------- offline logs


@fuse_required
def test_a_log_that_cannot_be_opened_is_offline_while_the_others_serve(seglogd) -> None:  # noqa: F811
    d = seglogd(start=False, logs={"bad-0": {}, "good-0": {}})
    make_data(d.data_dir, "bad-0", "good-0")
    # A corrupt .swap whose segment is gone: it may be the only copy of its records.
    bad = d.data_dir / "bad-0"
    swap = bad / (FIRST_LOG + ".swap")
    (bad / FIRST_LOG).rename(swap)
    with open(swap, "r+b") as f:
        f.seek(30)
        f.write(b"\xff\xff")
    files_before = {p.name: p.read_bytes() for p in bad.iterdir() if p.name != ".seglogfs.lock"}
    d.start()
    assert records(d / "good-0") == VALUES
    (d / "good-0" / "append").write_text("more\n")
    assert sorted(p.name for p in d.mount.iterdir()) == ["bad-0", "good-0"]
    assert sorted(p.name for p in (d / "bad-0").iterdir()) == ["info"]
    info = json.loads((d / "bad-0" / "info").read_text())
    assert info["name"] == "bad-0" and info["offline"] is True
    assert "swap" in info["reason"] and "CRC" in info["reason"], info
    for path in ("records", "by-offset/0", "segments"):
        result = run("cat", str(d / "bad-0" / path))
        assert "Input/output error" in result.stderr, (path, result.stderr)
    result = run("sh", "-c", f"echo x >> {d / 'bad-0' / 'append'}")
    assert "Input/output error" in result.stderr
    assert "File exists" in run("mkdir", str(d / "bad-0")).stderr
    assert "log bad-0 is offline" in d.stderr() and "Traceback" not in d.stderr()
    assert d.stop() == 0
    files_after = {p.name: p.read_bytes() for p in bad.iterdir() if p.name != ".seglogfs.lock"}
    assert files_after == files_before  # nothing touched (the lock file names its last holder)


def test_offline_logs_keep_their_checkpoint_lines_and_no_unclean_marker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_data(data, "bad-0", "good-0")
    (data / ".kafka_cleanshutdown").unlink()  # as after a crash
    (data / "bad-0" / FIRST_LOG).rename(data / "bad-0" / (FIRST_LOG + ".swap"))
    with open(data / "bad-0" / (FIRST_LOG + ".swap"), "ab") as f:
        f.write(b"torn")
    with LogManager(data) as manager:
        assert list(manager.offline) == ["bad-0"]
        assert "torn tail" in manager.offline["bad-0"]
    lines = (data / "recovery-point-offset-checkpoint").read_text().splitlines()
    assert "bad 0 40" in lines and "good 0 40" in lines
    # bad-0 was never recovered: the marker must not vouch for it.
    assert not (data / ".kafka_cleanshutdown").exists()


@pytest.mark.parametrize("how", ["rm -r", "mv and copy back", "truncate"])
def test_a_log_whose_files_vanish_while_open_goes_offline_and_the_close_is_unclean(
    tmp_path: Path, how: str
) -> None:
    """The engine side of an operator's mistake under a running process: the next append raises
    LogOfflineError with nothing acknowledged, the manager serves the log no more (its checkpoint
    lines dropped: the next load recovers whatever is there), and close() says so, without a marker."""
    data = tmp_path / "data"
    make_data(data, "gone-0", "good-0")
    manager = LogManager(data)
    gone = manager.get("gone-0")
    if how == "rm -r":
        shutil.rmtree(data / "gone-0")
    elif how == "mv and copy back":
        (data / "gone-0").rename(tmp_path / "moved")
        shutil.copytree(tmp_path / "moved", data / "gone-0")
    else:
        os.truncate(data / "gone-0" / FIRST_LOG, 10)
    end = gone.end_offset
    with pytest.raises(LogOfflineError):
        gone.append_values([b"not acknowledged"])
    assert gone.end_offset == end
    with pytest.raises(LogOfflineError):
        gone.flush()
    assert "went offline while open" in manager.offline["gone-0"]
    with pytest.raises(KeyError):
        manager.get("gone-0")
    manager.get("good-0").append_values([b"more"])
    manager.maintain()
    lines = (data / "recovery-point-offset-checkpoint").read_text().splitlines()
    assert not any(line.startswith("gone ") for line in lines), lines
    with pytest.raises(CloseError) as closed:
        manager.close()
    assert list(closed.value.failures) == ["gone-0"]
    assert not (data / ".kafka_cleanshutdown").exists()
    with LogManager(data) as again:
        assert again.get("good-0").end_offset == len(VALUES) + 1


def test_an_idle_log_whose_dir_is_removed_goes_offline_at_the_next_maintenance(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_data(data, "idle-0", "good-0")
    with pytest.raises(CloseError), LogManager(data) as manager:
        shutil.rmtree(data / "idle-0")
        manager.maintain()
        assert "is gone" in manager.offline["idle-0"] and list(manager.logs) == ["good-0"]


# ---------------------------------------------------------------------------- one owner per data dir


@fuse_required
def test_second_daemon_on_the_same_data_dir_is_refused(seglogd) -> None:  # noqa: F811
    first = seglogd(logs={})  # no log yet: nothing but the data dir itself to lock
    second = seglogd(start=False, data_dir=first.data_dir, logs={"events-0": {}})
    second.start(wait=False)
    assert second.proc is not None
    assert second.proc.wait(30) != 0
    message = second.stderr()
    assert f"data dir {first.data_dir} is locked for writing by pid {first.proc.pid}" in message, message
    assert "Traceback" not in message
    assert not (first.data_dir / "events-0").exists()
    # Read-only openers take no lock.
    with LogManager(first.data_dir, read_only=True) as reader:
        assert reader.logs == {}
    assert first.stop() == 0
    second.start()  # the lock went with its holder
    assert second.stop() == 0


# ---------------------------------------------------------------------------- symlinks


@fuse_required
def test_symlinked_log_dir_is_not_followed_and_its_target_untouched(seglogd, tmp_path: Path) -> None:  # noqa: F811
    d = seglogd(start=False, logs={"events-0": {}, "evil-0": {}})
    make_data(d.data_dir, "events-0")
    outside = tmp_path / "outside" / "evil-0"
    make_data(tmp_path / "outside", "evil-0")
    for name in ("00000000000000000000.log.deleted", "00000000000000000007.index", "x.cleaned"):
        (outside / name).write_bytes(b"precious")
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    (d.data_dir / "evil-0").symlink_to(outside)
    d.start()  # the config lists evil-0: it is reported, not created, and the rest serves
    assert records(d / "events-0") == VALUES
    assert sorted(p.name for p in d.mount.iterdir()) == ["events-0", "evil-0"]
    reason = json.loads((d / "evil-0" / "info").read_text())["reason"]
    assert "symbolic link" in reason and str(outside) in reason
    assert "Input/output error" in run("cat", str(d / "evil-0" / "records")).stderr
    assert "log evil-0 is offline" in d.stderr()
    assert d.stop() == 0
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert (d.data_dir / "evil-0").is_symlink()


@pytest.mark.parametrize("link", ["00000000000000000040.log", "00000000000000000000.index", ".seglogfs.lock"])
def test_symlinked_file_in_a_log_dir_is_never_followed(tmp_path: Path, link: str) -> None:
    data = tmp_path / "data"
    make_data(data, "events-0", "other-0")
    target = tmp_path / "outside.bin"
    target.write_bytes(b"precious" * 100)
    path = data / "events-0" / link
    path.unlink(missing_ok=True)
    path.symlink_to(target)
    for _ in range(2):
        with LogManager(data) as manager:
            assert sorted(manager.logs) == ["other-0"]
            assert "symbolic link" in manager.offline["events-0"] or "Too many levels" in manager.offline[
                "events-0"
            ], manager.offline
    assert target.read_bytes() == b"precious" * 100
    assert path.is_symlink()
    assert os.path.realpath(path) == str(target)


def test_an_empty_swap_never_replaces_its_segment(tmp_path: Path) -> None:
    """A 0-byte ``.log.swap`` (a cleaner or copy killed before writing) holds no batch: completing it
    would rename it over the segment and lose every record there (campaign seed 99 found it)."""
    data = tmp_path / "data"
    make_data(data, "events-0")
    log_dir = data / "events-0"
    (log_dir / (FIRST_LOG + ".swap")).write_bytes(b"")
    with LogManager(data, LogConfig()) as manager:
        assert not manager.offline
        assert [r.value.decode() for r in manager.get("events-0").iter_records()] == VALUES
    assert (log_dir / (FIRST_LOG + ".swap.corrupt")).stat().st_size == 0  # set aside, not deleted


def test_topic_configs_outlive_restarts_and_a_damaged_file_takes_only_its_log_offline(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager(data, LogConfig()) as manager:
        manager.create_log("kept-0", topic_config={"cleanup.policy": "compact", "segment.bytes": "4096"})
        manager.create_log("other-0").append_values([b"x"])
    with LogManager(data, LogConfig(), {"other-0": LogConfig(segment_bytes=8192)}) as manager:
        kept = manager.get("kept-0")
        assert kept.config.cleanup_policy == ("compact",) and kept.config.segment_bytes == 4096
        # a reload keeps them; the config file's own entry for a log wins over them
        manager.update_configs(LogConfig(retention_ms=1000), {})
        assert kept.config.cleanup_policy == ("compact",) and kept.config.retention_ms == 1000
        manager.update_configs(LogConfig(), {"kept-0": LogConfig()})
        assert kept.config.cleanup_policy == ("delete",)
    (data / "kept-0" / ".seglogfs.topic-config").write_text("{not json")
    with LogManager(data, LogConfig()) as manager:
        assert "kept-0" in manager.offline and ".seglogfs.topic-config" in manager.offline["kept-0"]
        assert manager.get("other-0").read(0).value == b"x"

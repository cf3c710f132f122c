"""seglogd's life cycle under faults: restart after kill -9, failed clean shutdowns, SIGTERM under load."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from support.mount_fixture import mounted, require_root_mounts, seglogd  # noqa: F401  (fixture)
from support.yaml_cases import alias_bomb
from test_daemon import info, wait_for

from seglogd.service import MAINTENANCE_INTERVAL_S

pytestmark = [pytest.mark.fuse]


def test_restart_at_once_after_kill_9_with_cached_attributes(seglogd) -> None:  # noqa: F811
    """The kernel answers stat() of a dead mount from its attribute cache for up to a second: the
    stale-mount probe must reach the daemon (statfs) and not trust stat()."""
    d = seglogd()
    (d / "events-0" / "append").write_text("before\n")
    for _ in range(3):
        os.stat(d.mount)  # fills the attribute cache of the mount's root
        os.stat(d / "events-0")
        d.kill()
        d.start()
        assert "stale mount" in d.stderr(), d.stderr()
        try:
            record = (d / "events-0" / "by-offset" / "0").read_text()
        except OSError as exc:  # say what the mount and the daemon showed (seen once, under heavy load)
            listing = sorted(os.listdir(d / "events-0")) if (d / "events-0").exists() else os.listdir(d.mount)
            raise AssertionError(f"{exc}; mount shows {listing}; daemon log:\n{d.stderr()}") from exc
        assert record == "before"
    assert d.stop(signal.SIGTERM) == 0
    assert not mounted(d.mount)


# ---------------------------------------------------------------------------------- a disk that fails


@contextlib.contextmanager
def ext4_volume(mount_point: Path, image: Path) -> Iterator[Callable[[], None]]:
    """A small ext4 volume mounted on ``mount_point`` with ``errors=remount-ro``; yields ``fail()``,
    which makes the kernel remount it read-only as it does after a disk error (open files and all):
    from then on every write, truncate or create on it is EROFS. Always unmounted on exit."""
    require_root_mounts(
        "a loop-device ext4 volume", tools=("mkfs.ext4", "findmnt"), paths=("/dev/loop-control",)
    )
    if not image.exists():
        subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image)], check=True)
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-o", "loop,errors=remount-ro", str(image), str(mount_point)], check=True)
    try:
        with contextlib.suppress(FileNotFoundError):
            (mount_point / "lost+found").rmdir()
        device = subprocess.run(["findmnt", "-no", "SOURCE", str(mount_point)], capture_output=True,
                                text=True, check=True).stdout.strip()

        def fail() -> None:
            Path(f"/sys/fs/ext4/{os.path.basename(device)}/trigger_fs_error").write_text("seglogfs test\n")
            with pytest.raises(OSError) as exc:
                (mount_point / "probe").write_bytes(b"")
            assert exc.value.errno == errno.EROFS

        yield fail
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


SMALL_INDEXES = {"segment.bytes": "1MiB", "segment.index.bytes": 4096}  # fits a 16 MiB volume


def _append_lines(path: Path, prefix: str, n: int, *, fsync: bool = True) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for i in range(n):
            os.write(fd, b"%s%d\n" % (prefix.encode(), i))
        if fsync:
            os.fsync(fd)  # on disk: a disk that fails later must not lose them
    finally:
        os.close(fd)


def test_one_log_on_a_failed_disk_does_not_stop_the_clean_close_of_the_others(
    seglogd, tmp_path: Path  # noqa: F811
) -> None:
    data = tmp_path / "data"
    image = tmp_path / "a.img"
    with ext4_volume(data / "a-0", image) as fail:
        d = seglogd(data_dir=data, logs={"a-0": {}, "b-0": {}, "c-0": {}}, defaults=SMALL_INDEXES)
        for name in ("a-0", "b-0", "c-0"):
            _append_lines(d / name / "append", name, 100)
        fail()
        code = d.stop()
        err = d.stderr()
        assert code != 0, err  # the clean shutdown failed: say so to systemd
        assert "Traceback" not in err, err
        assert "a-0" in err and "Read-only file system" in err, err
        assert not (data / ".kafka_cleanshutdown").exists()  # a-0 was not closed cleanly
        # every other log was closed: indexes trimmed, recovery point at its end in the checkpoint
        preallocated = SMALL_INDEXES["segment.index.bytes"]
        for name in ("b-0", "c-0"):
            assert (data / name / "00000000000000000000.index").stat().st_size < preallocated
        checkpoint = (data / "recovery-point-offset-checkpoint").read_text().split("\n")
        assert "b 0 100" in checkpoint and "c 0 100" in checkpoint, checkpoint
    with ext4_volume(data / "a-0", image):  # the disk is back: nothing acknowledged was lost
        d.start()
        for name in ("a-0", "b-0", "c-0"):
            assert (d / name / "records").read_text() == "".join(f"{name}{i}\n" for i in range(100))
        assert d.stop() == 0
        assert (data / ".kafka_cleanshutdown").exists()


def test_read_only_data_dir_logs_the_fault_once_and_the_stop_fails(seglogd, tmp_path: Path) -> None:  # noqa: F811
    data = tmp_path / "data"
    with ext4_volume(data, tmp_path / "data.img") as fail:
        # flush.ms: maintenance also tries to flush what the failed disk still holds, every round
        d = seglogd(data_dir=data, logs={"a-0": {}}, defaults={**SMALL_INDEXES, "flush.ms": 100})
        _append_lines(d / "a-0" / "append", "a", 10, fsync=False)
        fail()
        assert wait_for(lambda: "Read-only file system" in d.stderr(), 10), d.stderr()
        time.sleep(3 * MAINTENANCE_INTERVAL_S)  # three more rounds of maintenance on the read-only disk
        assert d.proc is not None and d.proc.poll() is None
        code = d.stop()
        err = d.stderr()
    assert code != 0, err
    assert "Traceback" not in err, err
    def logged(what: str) -> int:
        return sum(what in line and "Read-only file system" in line for line in err.splitlines())

    # once per change of state, not once a second (the log's flush fails only if maintenance did not
    # flush the records before the disk failed)
    assert logged("maintenance (retention, flush.ms, checkpoints) failed") == 1, err
    assert logged("maintenance of log a-0 failed") <= 1, err
    assert logged("cannot shut down cleanly") == 1, err


# ---------------------------------------------------------------------------------- files removed under it


def _stat_errno(path: Path) -> int:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno or 0
    return 0


def _offline_reason(d, name: str) -> str:  # type: ignore[no-untyped-def]
    data = info(d.mount, name)
    return data["reason"] if data.get("offline") else ""


def test_a_log_dir_removed_or_replaced_under_the_daemon_goes_offline_and_acknowledges_nothing(
    seglogd  # noqa: F811
) -> None:
    """An operator's ``rm -rf`` or ``mv`` of a log dir under the running daemon: the next append (or
    fsync, or maintenance round for an idle log) finds the files gone, the log goes offline (its
    ``info`` and the daemon log say why), and no append is acknowledged that the next start would
    not find. The other logs serve on."""
    logs = {name: {} for name in ("rm-0", "mv-0", "sync-0", "idle-0", "ok-0")}
    d = seglogd(logs=logs, defaults={"segment.bytes": "1KiB"})
    for name in logs:
        subprocess.run(["bash", "-c", f"echo first >> {d / name / 'append'}"], check=True)
        os.stat(d / name / "records")  # the kernel keeps this answer until told otherwise
    fd = os.open(d / "sync-0" / "append", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"written before the rm\n")
        shutil.rmtree(d.data_dir / "sync-0")
        with pytest.raises(OSError) as exc:
            os.fsync(fd)  # not on disk where the next start looks
        assert exc.value.errno == errno.EIO
    finally:
        os.close(fd)
    shutil.rmtree(d.data_dir / "rm-0")
    (d.data_dir / "mv-0").rename(d.data_dir / "mv-0.bak")
    shutil.copytree(d.data_dir / "mv-0.bak", d.data_dir / "mv-0")  # a copy put in its place
    for name in ("rm-0", "mv-0"):
        for i in range(3):
            result = subprocess.run(["bash", "-c", f"echo acked-{i} >> {d / name / 'append'}"],
                                    capture_output=True, text=True, check=False)
            assert result.returncode != 0 and "Input/output error" in result.stderr, result
    assert "gone" in _offline_reason(d, "rm-0") and "another file" in _offline_reason(d, "mv-0")
    shutil.rmtree(d.data_dir / "idle-0")
    assert wait_for(lambda: "gone" in _offline_reason(d, "idle-0"), 5)  # the maintenance round
    for name in ("rm-0", "mv-0", "sync-0", "idle-0"):
        assert f"log {name} is offline" in d.stderr()
        assert wait_for(lambda n=name: _stat_errno(d / n / "records") == errno.EIO, 5), name
        with pytest.raises(OSError) as exc:
            (d / name / "records").read_bytes()
        assert exc.value.errno == errno.EIO
    subprocess.run(["bash", "-c", f"echo second >> {d / 'ok-0' / 'append'}"], check=True)
    assert d.stop() != 0  # not a clean shutdown: no marker, every log recovered at the next start
    assert "Traceback" not in d.stderr(), d.stderr()
    assert not (d.data_dir / ".kafka_cleanshutdown").exists()
    d.start()
    assert (d / "ok-0" / "records").read_text() == "first\nsecond\n"
    assert (d / "mv-0" / "records").read_text() == "first\n"  # the copy put in its place
    for name in ("rm-0", "sync-0", "idle-0"):  # created again (the config's logs): nothing acked is missing
        assert (d / name / "records").read_text() == ""
    assert d.stop() == 0


# ---------------------------------------------------------------------------------- a mkdir that fails


def _open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _set_soft_nofile(pid: int, limit: int) -> None:
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:"], check=True)


def test_a_mkdir_failing_with_emfile_leaves_no_log_and_no_descriptor(seglogd) -> None:  # noqa: F811
    """Out of descriptors at each step of a create in turn (the soft limit one higher each time):
    every mkdir that fails leaves neither a directory nor a descriptor behind; the one that succeeds
    is a whole log, and the next start serves exactly the logs that were created."""
    d = seglogd(logs={"a-0": {}})
    assert d.proc is not None
    pid, created = d.proc.pid, None
    for extra in range(40):
        before = _open_descriptors(pid)
        name = f"m-{extra}"
        _set_soft_nofile(pid, before + extra)
        try:
            os.mkdir(d / name)
        except OSError as exc:
            assert exc.errno == errno.EMFILE, exc
        else:
            created = name
        finally:
            _set_soft_nofile(pid, 1024)
        if created:
            break
        assert not (d.data_dir / name).exists(), sorted(os.listdir(d.data_dir / name))
        assert wait_for(lambda n=before: _open_descriptors(pid) <= n), (before, _open_descriptors(pid))
    assert created is not None and extra >= 2  # it failed at each step that opens a file first
    assert {"partition.metadata", "00000000000000000000.log"} <= set(os.listdir(d.data_dir / created))
    subprocess.run(["bash", "-c", f"echo x >> {d / created / 'append'}"], check=True)
    assert d.stop() == 0
    d.start()
    assert sorted(os.listdir(d.mount)) == sorted(["a-0", created])
    assert (d / created / "records").read_text() == "x\n"


def test_a_mkdir_failing_with_enospc_leaves_no_log(seglogd, tmp_path: Path) -> None:  # noqa: F811
    require_root_mounts("a small tmpfs data dir")
    data = tmp_path / "tiny"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(data)], check=True)
    try:
        d = seglogd(data_dir=data, logs={}, defaults={"segment.index.bytes": 65536})
        created = []
        for i in range(400):  # sparse indexes: a fresh log costs a few pages (its checkpoints)
            try:
                os.mkdir(d / f"m-{i}")
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                assert not (data / f"m-{i}").exists(), sorted(os.listdir(data / f"m-{i}"))
                break
            created.append(f"m-{i}")
        else:
            raise AssertionError("a 256 KiB disk never filled up")
        assert created
        assert sorted(os.listdir(d.mount)) == sorted(created)
        d.stop()
        d.start()
        assert sorted(os.listdir(d.mount)) == sorted(created)
        d.cleanup()
    finally:
        if subprocess.run(["umount", str(data)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(data)], check=False)


# ---------------------------------------------------------------------------------- SIGTERM under load

LINE_WRITER = textwrap.dedent("""
    import os, sys
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
    name = sys.argv[2].encode()
    print("ready", flush=True)
    i = 0
    try:
        while True:
            os.write(fd, b"%s-%d\\n" % (name, i))  # one record per call
            i += 1
    except OSError as exc:
        print(i, exc.errno, flush=True)  # writes 0..i-1 succeeded, write i failed
""")


def test_sigterm_under_load_answers_every_write_truthfully(seglogd) -> None:  # noqa: F811
    """Requests in flight when SIGTERM arrives are served and answered before the FUSE session ends,
    and requests the daemon never served fail: a write that returned is in the log exactly once
    (after a restart), a write that failed is not in it at all. Two writers share a log (the kernel
    serialises their writes) and two have a log each (their writes are in flight side by side)."""
    targets = {"w0": "shared-0", "w1": "shared-0", "w2": "w2-0", "w3": "w3-0"}
    d = seglogd(defaults={"segment.bytes": "64KiB"}, logs={log: {} for log in targets.values()})
    writers = {
        name: subprocess.Popen([sys.executable, "-c", LINE_WRITER, str(d / log / "append"), name],
                               stdout=subprocess.PIPE, text=True)
        for name, log in targets.items()
    }
    outcomes: dict[str, tuple[int, int]] = {}
    try:
        for writer in writers.values():
            assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        logs = sorted(set(targets.values()))
        assert wait_for(lambda: all(info(d.mount, log)["end_offset"] >= 300 for log in logs), 60)
        assert d.stop(signal.SIGTERM) == 0, d.stderr()
        for name, writer in writers.items():
            out, _ = writer.communicate(timeout=30)
            succeeded, errno_value = map(int, out.split())
            outcomes[name] = (succeeded, errno_value)
    finally:
        for writer in writers.values():
            if writer.poll() is None:
                writer.kill()
                writer.wait()
    d.start()
    records = [(d / log / "records").read_text() for log in set(targets.values())]
    counts = Counter(line for text in records for line in text.split())
    for name, (succeeded, errno_value) in outcomes.items():
        assert succeeded > 0 and errno_value in (errno.ENOTCONN, errno.ECONNABORTED), outcomes
        not_once = [f"{name}-{i}" for i in range(succeeded) if counts[f"{name}-{i}"] != 1]
        assert not not_once, f"{name}: acknowledged writes not in the log exactly once: {not_once[:5]}"
        assert counts[f"{name}-{succeeded}"] == 0, (
            f"{name}: write {succeeded} failed with errno {errno_value} but its record was appended"
        )
    assert sum(counts.values()) == sum(succeeded for succeeded, _ in outcomes.values())
    assert "Traceback" not in d.stderr()


# ---------------------------------------------------------------------------------- hostile config


def test_alias_bomb_on_reload_is_refused_at_once_and_the_daemon_serves(seglogd) -> None:  # noqa: F811
    d = seglogd()
    settings = {key: value for key, value in d.settings.items() if key != "defaults"}
    d.config_path.write_text(yaml.safe_dump(settings) + alias_bomb())  # minutes of validation unbounded
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: "config reload refused" in d.stderr(), 20), d.stderr()
    assert "YAML aliases expand" in d.stderr() and "Traceback" not in d.stderr()
    (d / "events-0" / "append").write_text("still serving\n")
    assert (d / "events-0" / "by-offset" / "0").read_text() == "still serving"
    assert info(d.mount, "events-0")["config"]["segment.bytes"] == 1 << 20  # the running config stays
    assert d.stop() == 0


def test_symlinks_planted_at_the_data_dir_tmp_files_are_never_followed(seglogd, tmp_path: Path) -> None:  # noqa: F811
    """``<data_dir>/<checkpoint>.tmp -> /outside/victim``: start, append, stop must leave the victim as it
    was (the checkpoints and the marker are written beside, never through, the symlink)."""
    d = seglogd(start=False)
    d.data_dir.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    names = [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        ".kafka_cleanshutdown",
    ]
    for name in names:
        (outside / name).write_text("precious\n")
        (d.data_dir / f"{name}.tmp").symlink_to(outside / name)
    (d.data_dir / "events-0").mkdir()
    (d.data_dir / "events-0" / "partition.metadata.tmp").symlink_to(outside / "dangling")
    d.start()
    (d / "events-0" / "append").write_text("one\ntwo\n")
    assert (d / "events-0" / "by-offset" / "1").read_text() == "two"
    assert d.stop() == 0, d.stderr()
    assert "Traceback" not in d.stderr(), d.stderr()
    assert {p.name: p.read_text() for p in outside.iterdir()} == {name: "precious\n" for name in names}
    assert (d.data_dir / ".kafka_cleanshutdown").is_file()
    assert "events 0 2" in (d.data_dir / "recovery-point-offset-checkpoint").read_text()
    d.start()
    assert (d / "events-0" / "by-offset" / "0").read_text() == "one"


def _catches(pid: int, sig: int) -> bool:
    """True once process ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (sig - 1) & 1)


def test_sigterm_at_the_first_moment_seglogd_can_catch_it_is_a_clean_stop(seglogd) -> None:  # noqa: F811
    """SIGTERM during start-up (config, imports, opening logs) ends seglogd cleanly (exit 0) without
    mounting; it used to die of the default disposition (143) until libfuse installed its handler."""
    d = seglogd(start=False)
    before_mount = 0
    for round_ in range(3):
        d.start(wait=False)
        assert d.proc is not None
        deadline = time.monotonic() + 30
        while not _catches(d.proc.pid, signal.SIGTERM):  # no sleep: send it the moment it can be caught
            assert d.proc.poll() is None and time.monotonic() < deadline, (round_, d.stderr())
        d.proc.send_signal(signal.SIGTERM)
        code = d.proc.wait(30)
        assert code == 0, (round_, code, d.stderr())
        assert not mounted(d.mount), round_
        assert "Traceback" not in d.stderr(), d.stderr()
        before_mount += "stop requested before mounting" in d.stderr()
    assert before_mount > 0, "every SIGTERM arrived after the mount: start-up never caught it"
    d.start()
    (d / "events-0" / "append").write_text("after\n")
    assert (d / "events-0" / "records").read_text() == "after\n"
    assert d.stop() == 0

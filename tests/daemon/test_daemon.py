"""seglogd as a process: restart, kill -9 recovery, sd_notify, config reload, read-only Kafka data."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.mount_fixture import mounted, require_root_mounts, seglogd  # noqa: F401  (fixture)
from support.testdata import KAFKA_LOG_DIR

pytestmark = [pytest.mark.fuse]

KAFKA_DATA = KAFKA_LOG_DIR


def info(mount: Path, log: str) -> dict:
    return json.loads((mount / log / "info").read_text())


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.1) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def test_restart_keeps_every_record(seglogd) -> None:  # noqa: F811
    d = seglogd()
    (d / "events-0" / "append").write_text("".join(f"r{i}\n" for i in range(1000)))
    assert d.stop() == 0
    assert not mounted(d.mount)
    assert (d.data_dir / ".kafka_cleanshutdown").exists()
    assert "stopped" in d.stderr()
    d.start()
    assert (d / "events-0" / "records").read_text() == "".join(f"r{i}\n" for i in range(1000))
    (d / "events-0" / "append").write_text("after\n")
    assert (d / "events-0" / "by-offset" / "1000").read_text() == "after"
    assert d.stop(signal.SIGINT) == 0


def test_hints_for_newcomers_on_stderr(seglogd) -> None:  # noqa: F811
    d = seglogd()
    assert wait_for(lambda: "is mounted. Try:" in d.stderr(), 5)
    assert f"echo hello >> {d.mount}/events-0/append" in d.stderr()


WRITER = textwrap.dedent("""
    import os, sys
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
    i = 0
    try:
        while True:
            os.write(fd, b"".join(b"k%08d\\n" % (i + j) for j in range(100)))
            os.fsync(fd)
            i += 100
            print(i, flush=True)
    except OSError as exc:
        print("error", exc.errno, flush=True)
""")


def test_kill_9_mid_append_then_recover(seglogd) -> None:  # noqa: F811
    d = seglogd(defaults={"segment.bytes": "64KiB"})
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(d / "events-0" / "append")],
                              stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    d.kill()
    out, _ = writer.communicate(timeout=30)
    lines = out.split()
    confirmed = max((int(x) for x in lines if x.isdigit()), default=0)
    assert confirmed > 0
    with pytest.raises(OSError) as stale:
        os.statvfs(d.mount)
    assert stale.value.errno == errno.ENOTCONN  # what a killed FUSE daemon leaves behind
    d.start()
    assert "stale mount" in d.stderr()
    values = (d / "events-0" / "records").read_text().split()
    assert values[:confirmed] == [f"k{i:08d}" for i in range(confirmed)]  # every fsync'd record
    assert d.stop() == 0
    cli = Path(sys.executable).with_name("seglogfs")
    verify = subprocess.run([str(cli), "verify", str(d.data_dir)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_sd_notify_ready_watchdog_stopping(seglogd, tmp_path: Path) -> None:  # noqa: F811
    path = str(tmp_path / "notify.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.setblocking(False)
    messages: list[str] = []

    def drain() -> None:
        try:
            while True:
                messages.append(server.recv(4096).decode())
        except BlockingIOError:
            pass

    try:
        d = seglogd(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "300000"})
        assert wait_for(lambda: (drain(), sum("WATCHDOG=1" in m for m in messages) >= 2)[1], 10)
        ready = [m for m in messages if "READY=1" in m]
        assert len(ready) == 1 and "STATUS=serving 1 log(s)" in ready[0]
        assert d.stop() == 0
        drain()
        assert any("STOPPING=1" in m for m in messages)
    finally:
        server.close()


def test_reload_on_file_change_and_sighup(seglogd) -> None:  # noqa: F811
    d = seglogd()
    assert info(d.mount, "events-0")["config"]["segment.bytes"] == 1 << 20
    d.write_config(logs={"events-0": {"segment.bytes": "2MiB"}, "added-0": {}})
    assert wait_for(lambda: info(d.mount, "events-0")["config"]["segment.bytes"] == 2 << 20)
    assert wait_for(lambda: (d.mount / "added-0").is_dir())
    # an invalid config is refused with the ConfigError message; the running one stays
    d.write_config(logs={"events-0": {"segment.bytes": "lots"}})
    assert wait_for(lambda: "config reload refused" in d.stderr())
    assert "segment.bytes" in d.stderr() and "'lots'" in d.stderr()
    assert info(d.mount, "events-0")["config"]["segment.bytes"] == 2 << 20
    # SIGHUP reloads too (and does not stop the daemon, as libfuse's default handler would)
    d.settings["logs"] = {"events-0": {"retention.ms": "1d"}}
    d.config_path.write_text(json.dumps(d.settings))  # JSON is YAML
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: info(d.mount, "events-0")["config"]["retention.ms"] == 86_400_000)
    assert d.proc.poll() is None and mounted(d.mount)


def test_invalid_config_at_start_exits_non_zero(seglogd) -> None:  # noqa: F811
    d = seglogd(start=False, defaults={"retention.ms": "forever"})
    d.start(wait=False)
    assert d.proc is not None
    assert d.proc.wait(30) != 0
    assert "retention.ms" in d.stderr() and "forever" in d.stderr()
    assert not mounted(d.mount)


def test_external_unmount_exits_zero(seglogd) -> None:  # noqa: F811
    d = seglogd()
    for _ in range(50):  # EBUSY while another program (an indexer, a shell) has just looked inside
        unmount = subprocess.run(["fusermount3", "-u", str(d.mount)], capture_output=True, text=True)
        if unmount.returncode == 0 or "busy" not in unmount.stderr:
            break
        time.sleep(0.1)
    assert unmount.returncode == 0, unmount.stderr
    assert d.proc is not None and d.proc.wait(30) == 0
    assert (d.data_dir / ".kafka_cleanshutdown").exists()


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_read_only_mount_of_a_real_kafka_data_dir(seglogd, tmp_path: Path) -> None:  # noqa: F811
    copy = tmp_path / "kafka-data"
    shutil.copytree(KAFKA_DATA, copy)
    before = _tree_digest(copy)
    d = seglogd(data_dir=copy, read_only=True, logs={})
    partitions = sorted(p.name for p in copy.iterdir() if p.is_dir())
    assert sorted(os.listdir(d.mount)) == partitions
    offsets = d / "__consumer_offsets-15"
    assert info(d.mount, "__consumer_offsets-15")["end_offset"] > 0
    first = info(d.mount, "__consumer_offsets-15")["start_offset"]
    assert os.getxattr(offsets / "by-offset" / str(first), "user.seglog.offset") == str(first).encode()
    assert len((offsets / "records").read_bytes().split(b"\n")) > 1
    assert (offsets / "segments" / "00000000000000000000.log").read_bytes() == (
        copy / "__consumer_offsets-15" / "00000000000000000000.log").read_bytes()
    for attempt in (
        lambda: os.open(offsets / "append", os.O_WRONLY | os.O_APPEND),
        lambda: os.open(offsets / "append.jsonl", os.O_WRONLY),
        lambda: os.mkdir(d.mount / "new-0"),
        lambda: os.unlink(offsets / "by-offset" / str(first)),
    ):
        with pytest.raises(OSError) as exc:
            attempt()
        assert exc.value.errno == errno.EROFS
    result = subprocess.run(["bash", "-c", f"echo x >> {offsets}/append"], capture_output=True, text=True,
                            check=False)
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    assert d.stop() == 0
    assert _tree_digest(copy) == before  # nothing written


def test_enospc_when_the_disk_is_full(seglogd, tmp_path: Path) -> None:  # noqa: F811
    require_root_mounts("a small tmpfs data dir")
    data = tmp_path / "tiny"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(data)], check=True)
    d = None
    try:
        d = seglogd(data_dir=data, defaults={"segment.index.bytes": 4096})
        chunk = b"".join(b"%099d\n" % i for i in range(1000))  # 100 KB: one batch
        fd = os.open(d / "events-0" / "append", os.O_WRONLY | os.O_APPEND)
        try:
            for _ in range(20):
                before = info(d.mount, "events-0")["end_offset"]
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
            else:
                raise AssertionError("a 1 MiB disk never filled up")
        finally:
            os.close(fd)
        assert info(d.mount, "events-0")["end_offset"] == before  # nothing of the failed write
        assert before > 0
        assert d.proc is not None and d.proc.poll() is None
    finally:
        if d is not None:
            d.cleanup()
        if subprocess.run(["umount", str(data)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(data)], check=False)


# --- compaction (issue 10) ---------------------------------------------------------------------------


def test_reload_of_cleaner_and_compaction_settings(seglogd) -> None:  # noqa: F811
    """Per-log compaction settings apply live; an invalid cleaner setting is refused naming key and
    value (the running config stays); a valid change of one is logged as needing a restart."""
    d = seglogd(defaults={"segment.bytes": "1MiB", "log.cleaner.backoff.ms": "1s"},
                logs={"users-0": {"cleanup.policy": "compact", "fs.append.key.separator": ":"}})
    subprocess.run(["bash", "-c", f"echo 'k:v' >> {d.mount / 'users-0' / 'append'}"], check=True)
    d.write_config(logs={"users-0": {"cleanup.policy": "compact", "fs.append.key.separator": "=",
                                     "min.cleanable.dirty.ratio": 0.1}})
    assert wait_for(lambda: info(d.mount, "users-0")["config"]["min.cleanable.dirty.ratio"] == 0.1)
    assert info(d.mount, "users-0")["config"]["fs.append.key.separator"] == "="
    subprocess.run(["bash", "-c", f"echo 'k=w' >> {d.mount / 'users-0' / 'append'}"], check=True)
    assert os.getxattr(d.mount / "users-0" / "by-offset" / "1", "user.seglog.key") == b"k"
    d.write_config(defaults={"segment.bytes": "1MiB", "log.cleaner.backoff.ms": "soon"})
    assert wait_for(lambda: "config reload refused" in d.stderr())
    assert "defaults.log.cleaner.backoff.ms" in d.stderr() and "'soon'" in d.stderr()
    assert info(d.mount, "users-0")["config"]["min.cleanable.dirty.ratio"] == 0.1  # kept
    d.write_config(defaults={"segment.bytes": "1MiB", "log.cleaner.backoff.ms": "2s"})
    assert wait_for(lambda: "log.cleaner.backoff.ms=2000 (was 1000) changed" in d.stderr()), d.stderr()
    assert d.proc is not None and d.proc.poll() is None


def test_invalid_cleaner_setting_at_start_exits_non_zero(seglogd) -> None:  # noqa: F811
    d = seglogd(start=False, defaults={"log.cleaner.threads": -3})
    d.start(wait=False)
    assert d.proc is not None and d.proc.wait(30) != 0
    assert "defaults.log.cleaner.threads" in d.stderr() and "-3" in d.stderr()
    assert not mounted(d.mount)


def test_the_daemon_compacts_a_log(seglogd) -> None:  # noqa: F811
    """A compacted log with small segments and a short backoff: within seconds the records of
    overwritten keys are gone from by-offset (ENOENT) and from records; the latest value of each key
    stays at its offset, and the daemon logs the clean."""
    d = seglogd(defaults={"log.cleaner.backoff.ms": "100ms"},
                logs={"users-0": {"cleanup.policy": "compact", "fs.append.key.separator": ":",
                                  "segment.bytes": 200, "min.cleanable.dirty.ratio": 0.01}})
    append = d.mount / "users-0" / "append"
    rounds = 5
    for r in range(rounds):  # one write (one batch of 10 records, over 200 bytes) per round: one segment
        with open(append, "ab") as out:
            subprocess.run(["/usr/bin/printf", "".join(f"user{k}:v{r}\n" for k in range(10))], stdout=out,
                           check=True)
    subprocess.run(["bash", "-c", f"echo 'last:end' >> {append}"], check=True)  # seals the last round
    latest = {f"user{k}": (10 * (rounds - 1) + k, f"v{rounds - 1}") for k in range(10)}

    def gone(offset: int) -> bool:
        # open, not stat: whether the kernel's cached entry of a cleaned offset is invalidated is
        # tests/fs' business; here the daemon must answer ENOENT
        try:
            (d.mount / "users-0" / "by-offset" / str(offset)).read_bytes()
        except FileNotFoundError:
            return True
        return False

    def cleaned() -> bool:  # cleans may come while rounds are written: wait for all of them
        return all(gone(n) for n in range(10 * (rounds - 1)))

    assert wait_for(cleaned, timeout=20), d.stderr()
    for key, (offset, value) in latest.items():
        path = d.mount / "users-0" / "by-offset" / str(offset)
        assert path.read_bytes() == value.encode()
        assert os.getxattr(path, "user.seglog.key") == key.encode()
    expected = [f"v{rounds - 1}"] * 10 + ["end"]
    assert wait_for(lambda: (d.mount / "users-0" / "records").read_text().splitlines() == expected)
    assert info(d.mount, "users-0")["end_offset"] == 10 * rounds + 1  # the log end never moves
    assert "cleaned log users-0: offsets [0, " in d.stderr()  # the daemon logs each clean


def test_no_cleaning_with_log_cleaner_enable_false(seglogd) -> None:  # noqa: F811
    """``log.cleaner.enable: false``: the same log as above keeps every record."""
    d = seglogd(defaults={"log.cleaner.backoff.ms": "100ms", "log.cleaner.enable": False},
                logs={"users-0": {"cleanup.policy": "compact", "fs.append.key.separator": ":",
                                  "segment.bytes": 200, "min.cleanable.dirty.ratio": 0.01}})
    append = d.mount / "users-0" / "append"
    for r in range(3):
        lines = f"k:{r}\\n" * 5
        subprocess.run(["bash", "-c", f"/usr/bin/printf '{lines}' >> {append}"], check=True)
    time.sleep(2)  # twenty backoffs of a running cleaner
    assert (d.mount / "users-0" / "by-offset" / "0").read_bytes() == b"0"
    assert "cleaned log" not in d.stderr()


def test_long_lived_objects_are_frozen_at_start_and_after_a_reload(seglogd) -> None:  # noqa: F811
    """The objects of the start and of each reload are kept out of the garbage collector's full
    passes (each walks every object with the GIL held: 60-130 ms for a daemon of 100,000 objects)."""
    d = seglogd(env={"SEGLOGD_LOG_LEVEL": "DEBUG"})
    frozen = "objects frozen out of the collector's passes"
    # a full collection before the mount serves; once serving, the young generations only
    assert wait_for(lambda: d.stderr().count(frozen) == 2)
    assert d.stderr().count("(full collection)") == 1
    d.write_config(logs={"events-0": {}, "added-0": {}})
    assert wait_for(lambda: (d.mount / "added-0").is_dir())
    assert wait_for(lambda: d.stderr().count(frozen) == 3)
    assert d.stderr().count("(full collection)") == 1

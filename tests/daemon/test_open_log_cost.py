"""An open log costs what it holds: index files are sparse as Kafka's (a 4 MiB disk runs a log with
the default 10 MiB indexes), and a data dir of thousands of logs runs under ``ulimit -n 1024`` with
the daemon's descriptors bounded."""

from __future__ import annotations

import random
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.mount_fixture import Seglogd, require_root_mounts, seglogd, small_tmpfs  # noqa: F401  (fixture)

MIB = 1024 * 1024
INDEX_BYTES = 10 * MIB  # segment.index.bytes by default
NOFILE = 1024


def sh(script: str, timeout: float = 120) -> str:
    """Run ``script`` with sh; its stdout (fails with its stderr)."""
    done = subprocess.run(["sh", "-ec", script], capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def open_fds(pid: int) -> int:
    """The descriptors ``pid`` holds, as ``ls /proc/PID/fd`` lists them."""
    return len(sh(f"ls /proc/{pid}/fd").split())


def index_blocks(data: Path) -> int:
    """Bytes allocated to every .index and .timeindex under ``data`` (st_blocks, what du counts)."""
    files = [*data.glob("*/*.index"), *data.glob("*/*.timeindex")]
    return sum(p.stat().st_blocks * 512 for p in files)


def no_traceback(d: Seglogd) -> None:
    assert "Traceback" not in d.stderr(), d.stderr()[-4000:]


def test_a_4_mib_tmpfs_runs_a_log_with_the_default_config(tmp_path: Path, seglogd) -> None:  # noqa: F811
    """Each active segment's indexes are 10 MiB long, sparse: a 4 MiB disk serves a log with the
    default config (the daemon used to refuse to start: "cannot reserve 10485760 bytes"), and one
    that rolls every 16 KiB: append, read, roll, restart."""
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        data = disk / "data"
        d = seglogd(data_dir=data, defaults={}, logs={"events-0": {}, "small-0": {"segment.bytes": "16KiB"}})
        try:
            index = data / "events-0" / "00000000000000000000.index"
            assert index.stat().st_size == INDEX_BYTES  # preallocated as Kafka does, but not allocated
            lines = [f"line-{i:05d}-{'x' * 200}" for i in range(400)]  # ~84 KB: 5 rolls of small-0
            text = "".join(f"{line}\n" for line in lines)
            (tmp_path / "lines.txt").write_text(text)
            # one batch for events-0; one write, so one batch, a line for small-0
            sh(f"cat {tmp_path}/lines.txt > {d.mount}/events-0/append; while read -r line; "
               f"do echo \"$line\"; done < {tmp_path}/lines.txt > {d.mount}/small-0/append")
            segments = sorted((data / "small-0").glob("*.log"))
            assert len(segments) >= 5
            for sealed in segments[:-1]:  # trimmed on roll; the active one preallocated
                assert sealed.with_suffix(".index").stat().st_size < INDEX_BYTES
            assert segments[-1].with_suffix(".index").stat().st_size == INDEX_BYTES
            assert index_blocks(data) < 64 * 1024
            for name in ("events-0", "small-0"):
                assert sh(f"cat {d.mount}/{name}/records") == text
                assert sh(f"cat {d.mount}/{name}/by-offset/399") == lines[399]
            assert d.stop() == 0, d.stderr()[-3000:]
            no_traceback(d)
            assert index.stat().st_size < INDEX_BYTES  # trimmed on the clean close
            d.start()
            sh(f"echo after >> {d.mount}/small-0/append")
            assert sh(f"cat {d.mount}/small-0/records") == text + "after\n"
            assert sh(f"cat {d.mount}/events-0/by-offset/0") == lines[0]
            assert d.stop() == 0, d.stderr()[-3000:]
            no_traceback(d)
        finally:
            d.cleanup()  # before the tmpfs goes


def test_fresh_logs_indexes_cost_what_kafkas_sparse_files_cost(tmp_path: Path, seglogd) -> None:  # noqa: F811
    """100 logs made with mkdir, one record each: their index files are as long as Kafka's (10 MiB,
    rounded down to the entry size) and hold no entry, so Kafka's sparse files use no block; ours
    use at most 64 KiB a log (they used 20 MiB a log, allocated for real)."""
    d = seglogd(defaults={}, logs={})
    names = [f"fresh{i}-0" for i in range(100)]
    sh(" && ".join(f"mkdir {d.mount}/{name} && echo one >> {d.mount}/{name}/append" for name in names))
    for name in names[::10]:
        assert (d.data_dir / name / "00000000000000000000.index").stat().st_size == INDEX_BYTES
        assert (d.data_dir / name / "00000000000000000000.timeindex").stat().st_size == INDEX_BYTES - 4
        assert sh(f"cat {d.mount}/{name}/records") == "one\n"
    kafka_sparse = 0  # no entry written: setLength allocates nothing
    assert index_blocks(d.data_dir) <= kafka_sparse + 64 * 1024 * len(names)
    assert d.stop() == 0, d.stderr()[-3000:]
    no_traceback(d)


_MAKE_LOGS = textwrap.dedent("""
    import sys
    from seglogfs.log_manager import LogManager
    with LogManager(sys.argv[1]) as manager:
        for i in range(int(sys.argv[2])):
            manager.create_log(f"many{i}-0")
""")


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def test_2000_logs_under_ulimit_n_1024(tmp_path: Path, seglogd) -> None:  # noqa: F811
    """2000 logs, soft and hard RLIMIT_NOFILE 1024: seglogd starts (it used to die with EMFILE), logs
    never touched before append and read back through the mount, and the daemon's descriptors stay
    within half the limit plus what FUSE and the daemon itself hold."""
    count = 2000
    with small_tmpfs(tmp_path / "disk", "256m") as disk:  # tmpfs: making 2000 logs costs no fsync
        data = disk / "data"
        subprocess.run([sys.executable, "-c", _MAKE_LOGS, str(data), str(count)], check=True, timeout=300)
        d = seglogd(data_dir=data, defaults={}, logs={}, start=False)
        d.extra["preexec_fn"] = _limit_open_files
        try:
            d.start(timeout=120)
            assert d.proc is not None
            started_with = open_fds(d.proc.pid)
            sample = sorted({*random.Random(7).sample(range(count), 150), count - 1})
            names = [f"many{i}-0" for i in sample] + [f"new{i}-0" for i in range(20)]
            script = " && ".join(
                (f"mkdir {d.mount}/{name} && " if name.startswith("new") else "")
                + f"echo {name}-a >> {d.mount}/{name}/append && echo {name}-b >> {d.mount}/{name}/append"
                for name in names
            )
            sh(script, timeout=300)
            most = open_fds(d.proc.pid)
            reads = sh(" && ".join(f"cat {d.mount}/{name}/records" for name in names), timeout=300)
            assert reads == "".join(f"{name}-a\n{name}-b\n" for name in names)
            most = max(most, open_fds(d.proc.pid))
            assert most <= NOFILE // 2 + 64, (started_with, most)
            assert sh(f"cat {d.mount}/many0-0/info").count('"offline"') <= 1
            assert "Too many open files" not in d.stderr(), d.stderr()[-3000:]
            assert d.stop() == 0, d.stderr()[-3000:]
            no_traceback(d)
        finally:
            d.cleanup()


@pytest.mark.parametrize("limit", [64])
def test_a_limit_too_low_for_the_daemon_is_a_clear_message_not_a_traceback(
    tmp_path: Path, seglogd, limit: int  # noqa: F811
) -> None:
    """With 200 logs and a limit that leaves no room for FUSE and the daemon, seglogd either serves
    or stops with a message; never a traceback."""
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-c", _MAKE_LOGS, str(data), "200"], check=True, timeout=300)
    d = seglogd(data_dir=data, defaults={}, logs={}, start=False)
    d.extra["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    try:
        d.start(wait=False)
        assert d.proc is not None
        try:
            d.wait_mounted(60)
        except AssertionError:
            assert d.proc.poll() is not None, d.stderr()[-3000:]
        else:
            sh(f"echo x >> {d.mount}/many5-0/append && cat {d.mount}/many5-0/records")
            d.stop()
        no_traceback(d)
    finally:
        d.cleanup()

"""The mount, driven by real programs (echo, cat, tail -f, getfattr...) against a real seglogd."""

from __future__ import annotations

import errno
import json
import os
import re
import select
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from support.mount_fixture import (
    Seglogd,
    end_offset,
    fuse_required,
    make_seglogd,
    seglogd,  # noqa: F401  (fixture)
    sh,
    wait_end,
)
from support.mount_fixture import log_info as info

pytestmark = [pytest.mark.fuse, fuse_required]

LOGS = {
    "events-0": {},
    "small-0": {"max.message.bytes": 2000, "fs.listing.limit": 5},
    "conc-0": {"segment.bytes": "256KiB"},
    "rolled-0": {"segment.bytes": 4096},
}


@pytest.fixture(scope="module")
def mnt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    """One daemon for the whole module (starting one per test would cost a second each)."""
    daemon = make_seglogd(tmp_path_factory.mktemp("fs"), logs=LOGS)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.cleanup()


def records(mnt: Seglogd, log: str) -> list[bytes]:
    return (mnt / log / "records").read_bytes().split(b"\n")[:-1]


def write_fd(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND)


def errno_of(func, *args) -> int:  # type: ignore[no-untyped-def]
    try:
        func(*args)
    except OSError as exc:
        return exc.errno
    raise AssertionError(f"{func.__name__}{args} did not fail")


# ---------------------------------------------------------------- appending with shell tools
def test_echo_printf_cat_append(mnt: Seglogd, tmp_path: Path) -> None:
    log = mnt / "events-0"
    start = end_offset(mnt, "events-0")
    sh(f"echo hello >> {log}/append", check=True)
    # the last line has no newline: committed at close
    sh(f"printf 'one\\ntwo\\nthree' >> {log}/append", check=True)
    wait_end(mnt, "events-0", start + 4)  # ... at release, which the kernel sends after close returns
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line {i}\n" for i in range(5000)))
    sh(f"cat {lines} > {log}/append", check=True)  # O_TRUNC is ignored
    sh(f"cat {lines} > {log}/append", check=True)
    values = records(mnt, "events-0")[start:]
    expected = [b"hello", b"one", b"two", b"three"] + [f"line {i}".encode() for i in range(5000)] * 2
    assert values == expected
    assert sh(f"wc -l < {log}/records").stdout.strip() == str(start + len(expected))
    assert sh(f"grep -c '^line 4999$' {log}/records").stdout.strip() == "2"
    assert sh(f"head -n {start + 1} {log}/records | tail -n 1").stdout == "hello\n"


def test_partial_line_waits_for_next_write_or_close(mnt: Seglogd) -> None:
    path = mnt / "events-0" / "append"
    start = end_offset(mnt, "events-0")
    fd = write_fd(path)
    try:
        os.write(fd, b"abc")
        assert end_offset(mnt, "events-0") == start
        os.write(fd, b"def\nxy")
        assert end_offset(mnt, "events-0") == start + 1
        os.fsync(fd)  # durable up to the last complete line
    finally:
        os.close(fd)
    wait_end(mnt, "events-0", start + 2)
    assert records(mnt, "events-0")[start:] == [b"abcdef", b"xy"]


def test_one_write_is_one_batch_kafka_python_parses_it(mnt: Seglogd) -> None:
    log = mnt / "rolled-0"
    fd = write_fd(log / "append")
    try:
        os.write(fd, b"a1\na2\na3\n")
        os.write(fd, b"b1\n")
    finally:
        os.close(fd)
    batches = []
    for seg in sorted((log / "segments").glob("*.log")):
        mem = MemoryRecords(seg.read_bytes())
        while (batch := mem.next_batch()) is not None:
            batches.append([r.value for r in batch])
    assert batches[-2:] == [[b"a1", b"a2", b"a3"], [b"b1"]]


def test_append_jsonl_and_raw(mnt: Seglogd) -> None:
    log = mnt / "events-0"
    start = end_offset(mnt, "events-0")
    lines = [
        {"value": "j1", "key": "k1", "headers": [["h", "v"], ["n", None]], "timestamp": 1_600_000_000_000},
        {"value_b64": "AP8=", "headers": {"x": "y"}},
    ]
    (log / "append.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (log / "append.raw").write_bytes(b"multi\nline\nbody")
    wait_end(mnt, "events-0", start + 3)
    assert (log / "by-offset" / str(start)).read_bytes() == b"j1"
    assert (log / "by-offset" / str(start + 1)).read_bytes() == b"\x00\xff"
    assert (log / "by-offset" / str(start + 2)).read_bytes() == b"multi\nline\nbody"
    xattrs = sh(f"getfattr -d --absolute-names {log}/by-offset/{start}").stdout
    assert 'user.seglog.key="k1"' in xattrs
    assert 'user.seglog.timestamp="1600000000000"' in xattrs
    assert 'user.seglog.timestamp_type="CreateTime"' in xattrs
    assert f'user.seglog.offset="{start}"' in xattrs
    assert "user.seglog.headers=" in xattrs
    headers = os.getxattr(log / "by-offset" / str(start), "user.seglog.headers")
    assert json.loads(headers) == [["h", "v"], ["n", None]]


# ---------------------------------------------------------------- reading
def test_by_offset_stat_cat_and_xattr_errors(mnt: Seglogd) -> None:
    log = mnt / "events-0"
    fd = write_fd(log / "append")
    os.write(fd, b"stat me\n")
    os.close(fd)
    n = end_offset(mnt, "events-0") - 1
    path = log / "by-offset" / str(n)
    assert sh(f"cat {path}").stdout == "stat me"
    st = os.stat(path)
    assert st.st_size == len(b"stat me")
    assert st.st_mode & 0o777 == 0o444
    ts = int(os.getxattr(path, "user.seglog.timestamp"))
    assert st.st_mtime_ns == ts * 1_000_000
    assert sh(f"stat -c %s {path}").stdout.strip() == "7"
    assert errno_of(os.getxattr, path, "user.seglog.key") == errno.ENODATA  # no key: ENODATA, not ENOSYS
    assert errno_of(os.getxattr, path, "user.other") == errno.ENODATA
    assert set(os.listxattr(path)) == {"user.seglog.offset", "user.seglog.timestamp",
                                       "user.seglog.timestamp_type"}


def test_by_time_symlinks(mnt: Seglogd) -> None:
    log = mnt / "events-0"
    now_ms = int(time.time() * 1000)
    time.sleep(0.01)
    (log / "append").write_bytes(b"timed\n")
    n = end_offset(mnt, "events-0") - 1
    ts = int(os.getxattr(log / "by-offset" / str(n), "user.seglog.timestamp"))
    assert sh(f"readlink {log}/by-time/{now_ms}").stdout.strip() == f"../by-offset/{n}"
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts / 1000)) + f".{ts % 1000:03d}Z"
    assert os.readlink(log / "by-time" / iso) == f"../by-offset/{n}"
    assert (log / "by-time" / str(ts)).read_bytes() == b"timed"  # open follows the link
    assert os.path.islink(log / "by-time" / str(ts))


def test_ls_by_offset_respects_listing_limit(mnt: Seglogd) -> None:
    log = mnt / "small-0"
    (log / "append").write_text("".join(f"s{i}\n" for i in range(12)))
    end = end_offset(mnt, "small-0")
    listed = sh(f"ls {log}/by-offset").stdout.split()
    assert sorted(map(int, listed)) == list(range(end - 5, end))
    assert (log / "by-offset" / "0").read_bytes() == b"s0"  # unlisted offsets still resolve
    assert len(os.listdir(mnt / "events-0" / "by-offset")) == end_offset(mnt, "events-0")


def test_info_and_ls(mnt: Seglogd) -> None:
    assert set(os.listdir(mnt.mount)) == set(LOGS)
    assert sorted(os.listdir(mnt / "events-0")) == sorted(
        ["append", "append.jsonl", "append.raw", "by-offset", "by-time", "from", "info", "records",
         "records.jsonl", "segments"])
    data = info(mnt, "events-0")
    assert data["end_offset"] >= data["start_offset"] == 0
    for key in ("segments", "bytes", "first_timestamp", "last_timestamp", "config"):
        assert key in data
    assert data["config"]["segment.bytes"] == 1 << 20
    found = sh(f"find {mnt.mount} -name '*.log'").stdout.split()
    assert any(p.endswith("events-0/segments/00000000000000000000.log") for p in found)


def test_tar_of_an_idle_mount_succeeds_and_info_mtime_moves_with_its_content(seglogd) -> None:  # noqa: F811
    """``info``'s times change only with its content: a backup of an idle mount finds no file changed
    as it read it (the append files are write-only: no one can read them, tar included)."""
    d = seglogd(logs={"a-0": {}, "b-0": {}})
    sh(f"echo x >> {d.mount}/a-0/append", check=True)
    tar = sh(f"tar cf - --exclude='append*' -C {d.mount} . | cat > /dev/null; exit ${{PIPESTATUS[0]}}")
    assert tar.returncode == 0, tar.stderr
    before = os.stat(d / "a-0" / "info").st_mtime_ns
    sh(f"echo y >> {d.mount}/a-0/append", check=True)
    deadline = time.monotonic() + 5  # the notifier invalidates the cached attributes
    while os.stat(d / "a-0" / "info").st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.05)
    after = os.stat(d / "a-0" / "info")
    assert after.st_mtime_ns > before and after.st_ctime_ns == after.st_mtime_ns
    assert os.stat(d / "b-0" / "info").st_mtime_ns <= before  # its content did not change


def test_records_size_is_honest_and_tail_f_follows(mnt: Seglogd) -> None:
    path = mnt / "events-0" / "records"
    assert os.stat(path).st_size == len(path.read_bytes())
    tail = subprocess.Popen(["tail", "-n", "0", "-s", "0.2", "-f", str(path)], stdout=subprocess.PIPE)
    try:
        time.sleep(0.5)  # let tail reach the end first
        (mnt / "events-0" / "append").write_bytes(b"followed by tail\n")
        got = b""
        deadline = time.monotonic() + 10
        while b"followed by tail\n" not in got and time.monotonic() < deadline:
            ready, _, _ = select.select([tail.stdout], [], [], 0.5)
            if ready:
                got += os.read(tail.stdout.fileno(), 4096)
        assert b"followed by tail\n" in got
    finally:
        tail.kill()
        tail.wait()


def test_segments_are_the_real_files(mnt: Seglogd, tmp_path: Path) -> None:
    log = mnt / "rolled-0"
    fd = write_fd(log / "append")
    for chunk in range(15):  # one write, one batch: 2 KB batches in 4 KB segments
        os.write(fd, "".join(f"{chunk:02d}{i:03d} " + "x" * 90 + "\n" for i in range(20)).encode())
    os.close(fd)
    assert info(mnt, "rolled-0")["segments"] > 3
    sh(f"cp -r {log}/segments {tmp_path}/copy", check=True)
    real = mnt.data_dir / "rolled-0"
    copied = sorted(p.name for p in (tmp_path / "copy").iterdir())
    assert copied == sorted(p.name for p in real.iterdir() if p.is_file() and not p.name.startswith("."))
    for name in copied:
        if name.endswith(".log"):
            assert (tmp_path / "copy" / name).read_bytes() == (real / name).read_bytes()


def test_dump_cli_reads_segments_through_the_mount(mnt: Seglogd) -> None:
    (mnt / "events-0" / "append").write_bytes(b"dump me\n")
    seg = sorted((mnt / "events-0" / "segments").glob("*.log"))[-1]
    cli = Path(sys.executable).with_name("seglogfs")
    result = subprocess.run([str(cli), "dump", "--files", str(seg), "--print-data-log"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "baseOffset: " in result.stdout
    assert "payload: dump me" in result.stdout


# ---------------------------------------------------------------- concurrency
WRITER = textwrap.dedent("""
    import os, random, sys
    path, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(w)
    data = b"".join(b"w%d-%06d-%s\\n" % (w, i, b"x" * rng.randrange(0, 80)) for i in range(n))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    pos = 0
    while pos < len(data):
        step = rng.choice((1, 7, 100, 4096, 65536, 300000))
        pos += os.write(fd, data[pos:pos + step])
    os.close(fd)
""")


def test_concurrent_writers_never_interleave(mnt: Seglogd) -> None:
    writers, lines = 8, 20_000
    path = mnt / "conc-0" / "append"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w), str(lines)])
             for w in range(writers)]
    for proc in procs:
        assert proc.wait(120) == 0
    got = records(mnt, "conc-0")
    assert len(got) == writers * lines
    pattern = re.compile(rb"^w(\d)-(\d{6})-x*$")
    seen: Counter = Counter()
    last = [-1] * writers
    for value in got:
        match = pattern.match(value)
        assert match, f"interleaved or torn line: {value[:100]!r}"
        w, i = int(match.group(1)), int(match.group(2))
        assert i == last[w] + 1, "a writer's lines are in its order"
        last[w] = i
        seen[(w, i)] += 1
    assert len(seen) == writers * lines and set(seen.values()) == {1}


# ---------------------------------------------------------------- errnos (docs/mount.md section 4)
def test_enoent(mnt: Seglogd) -> None:
    log = mnt / "events-0"
    end = end_offset(mnt, "events-0")
    assert errno_of(os.stat, log / "by-offset" / str(end)) == errno.ENOENT
    assert errno_of(os.stat, log / "by-offset" / str(end + 1000)) == errno.ENOENT
    assert errno_of(os.stat, log / "by-offset" / "abc") == errno.ENOENT
    assert errno_of(os.readlink, log / "by-time" / str(int(time.time() * 1000) + 3_600_000)) == errno.ENOENT
    assert errno_of(os.readlink, log / "by-time" / "not-a-time") == errno.ENOENT
    assert errno_of(os.stat, mnt / "no-such-log") == errno.ENOENT
    assert sh(f"cat {log}/by-offset/{end + 5}", check=False).returncode == 1


def test_efbig(mnt: Seglogd) -> None:
    log = mnt / "small-0"
    start = end_offset(mnt, "small-0")
    fd = write_fd(log / "append")
    try:
        assert errno_of(os.write, fd, b"ok\n" + b"x" * 3000 + b"\n") == errno.EFBIG
    finally:
        os.close(fd)
    assert end_offset(mnt, "small-0") == start  # nothing of that write
    fd = write_fd(log / "append.raw")
    try:
        assert errno_of(os.write, fd, b"y" * 3000) == errno.EFBIG
    finally:
        os.close(fd)
    fd = write_fd(log / "append")
    try:
        os.write(fd, b"p" * 1500)  # a partial line may wait...
        assert errno_of(os.write, fd, b"p" * 1500) == errno.EFBIG  # ...but not grow past the limit
    finally:
        os.close(fd)  # the line is discarded whole, the 1500 bytes accepted before too
    assert end_offset(mnt, "small-0") == start
    # many small records over max.message.bytes in total are not "a record too large"
    (log / "append").write_text("".join(f"{i:04d}" + "z" * 50 + "\n" for i in range(200)))
    assert end_offset(mnt, "small-0") == start + 200


def test_erofs_for_read_only_paths(mnt: Seglogd) -> None:
    log = mnt / "events-0"
    for path in (log / "records", log / "info", log / "by-offset" / "0",
                 next((log / "segments").glob("*.log"))):
        assert errno_of(os.open, path, os.O_WRONLY) == errno.EROFS, path
    assert errno_of(os.truncate, log / "by-offset" / "0", 0) == errno.EROFS


def test_eperm_for_unlink_rename_rmdir(mnt: Seglogd) -> None:
    log = mnt / "events-0"
    assert errno_of(os.unlink, log / "by-offset" / "0") == errno.EPERM
    assert errno_of(os.unlink, log / "append") == errno.EPERM
    assert errno_of(os.rename, log / "by-offset" / "0", log / "by-offset" / "1") == errno.EPERM
    assert errno_of(os.rename, log, mnt / "renamed-0") == errno.EPERM
    assert errno_of(os.rmdir, log) == errno.EPERM
    assert sh(f"rm -rf {log}", check=False).returncode != 0
    assert (log / "by-offset" / "0").exists()


def test_einval_for_bad_json_and_bad_log_names(mnt: Seglogd) -> None:
    log = mnt / "events-0"
    start = end_offset(mnt, "events-0")
    fd = write_fd(log / "append.jsonl")
    try:
        batch = b'{"value": "good"}\n{"value": oops}\n{"value": "good2"}\n'
        assert errno_of(os.write, fd, batch) == errno.EINVAL
    finally:
        os.close(fd)
    assert end_offset(mnt, "events-0") == start  # nothing of that write was appended
    assert errno_of(os.mkdir, mnt / "bad name!") == errno.EINVAL
    assert errno_of(os.mkdir, mnt / ("x" * 250)) in (errno.EINVAL, errno.ENAMETOOLONG)
    os.mkdir(mnt / "made-0")
    (mnt / "made-0" / "append").write_bytes(b"in a new log\n")
    assert records(mnt, "made-0") == [b"in a new log"]
    assert errno_of(os.mkdir, mnt / "events-0" / "sub") == errno.EPERM


def test_eio_for_a_corrupt_batch(mnt: Seglogd) -> None:
    log = mnt / "rolled-0"
    fd = write_fd(log / "append")
    for chunk in range(12):
        os.write(fd, "".join(f"c{chunk:02d}{i:02d}" + "y" * 200 + "\n" for i in range(10)).encode())
    os.close(fd)
    segments = sorted((mnt.data_dir / "rolled-0").glob("*.log"))
    target = segments[-3]  # sealed, and not read by this daemon yet
    base = int(target.stem)
    with open(target, "r+b") as f:
        f.seek(120)  # inside the first batch's records
        byte = f.read(1)
        f.seek(120)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert errno_of((log / "by-offset" / str(base)).read_bytes) == errno.EIO
    assert errno_of((log / "by-offset" / str(base)).read_bytes) == errno.EIO
    time.sleep(0.2)
    assert f"{target}" in mnt.stderr() and "position 0" in mnt.stderr()
    assert mnt.proc is not None and mnt.proc.poll() is None  # the daemon lives on
    with open(target, "r+b") as f:  # put it back for later tests
        f.seek(120)
        f.write(byte)


def test_unexpected_paths_and_modes(mnt: Seglogd) -> None:
    log = mnt / "events-0"
    assert errno_of(os.open, log / "append", os.O_RDONLY) == errno.EACCES  # write-only
    assert errno_of(os.open, log / "new-file", os.O_WRONLY | os.O_CREAT) == errno.EPERM
    assert errno_of(os.open, log / "by-offset" / "new", os.O_WRONLY | os.O_CREAT) == errno.EPERM
    os.utime(log / "append")  # `touch append` works
    os.truncate(log / "append", 0)  # and truncating it does nothing
    assert errno_of(os.listdir, log / "info") == errno.ENOTDIR
    assert os.listdir(log / "by-time") == []

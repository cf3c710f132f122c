"""The mount under hour-long kernel timeouts: what grows or goes away is invalidated, the rest is kept.

The mount lets the kernel keep lookups, attributes and pages for an hour (seglogfs.fs.mount), so every
test here first makes the kernel cache a path (stat, open), then changes the log behind it, and checks
that the kernel's answer follows within a bound: without seglogfs.fs.invalidation each would stay
stale for the hour.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import subprocess
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from support.mount_fixture import Seglogd, fuse_required, make_seglogd

pytestmark = [pytest.mark.fuse, fuse_required]

#: the notifier polls every 0.25 s; a stat must follow a change well within this
FOLLOW_S = 3.0
LOGS = {
    "grow-0": {"segment.bytes": 4096},
    # retention deletes everything but the active segment and its predecessor, within a second
    "retained-0": {"segment.bytes": 4096, "retention.bytes": 4096, "file.delete.delay.ms": 0},
}


@pytest.fixture(scope="module")
def mnt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    daemon = make_seglogd(tmp_path_factory.mktemp("caching"), logs=LOGS)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.cleanup()


def eventually(condition: Callable[[], bool], what: str, timeout: float = FOLLOW_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def append(path: Path, lines: list[str]) -> None:
    with open(path, "w") as f:
        f.write("".join(f"{line}\n" for line in lines))


def size(path: Path) -> int:
    return os.stat(path).st_size


def missing(path: Path) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    return False


def test_stat_follows_growth_of_records_info_and_the_active_segment(mnt: Seglogd) -> None:
    log = mnt / "grow-0"
    append(log / "append", ["first"])
    active = sorted(n for n in os.listdir(log / "segments") if n.endswith(".log"))[-1]
    data_file = mnt.data_dir / "grow-0" / active
    # cache all three in the kernel, and read the info once: its size is the JSON's length
    before = {name: size(log / name) for name in ("records", "info", f"segments/{active}")}
    (log / "info").read_bytes()
    append(log / "append", ["second"])
    eventually(lambda: size(log / "records") == before["records"] + len("second\n"), "records grew")
    eventually(lambda: size(log / f"segments/{active}") == data_file.stat().st_size, "active .log grew")
    eventually(lambda: size(log / "info") == len((log / "info").read_bytes()), "info's size is current")
    assert (log / "records").read_text().endswith("first\nsecond\n")


def read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line from ``stream`` (a pipe), or what came before ``timeout`` ran out."""
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            break
        byte = os.read(stream.fileno(), 1)
        if not byte:
            break
        line += byte
    return line


def test_tail_f_records_follows_each_append(mnt: Seglogd) -> None:
    log = mnt / "grow-0"
    tail = subprocess.Popen(["tail", "-n", "0", "-f", str(log / "records")], stdout=subprocess.PIPE)
    assert tail.stdout is not None
    try:
        time.sleep(0.5)  # tail has read to the end and polls fstat now
        for i in range(3):
            append(log / "append", [f"followed-{i}"])
            # tail polls once a second; the notifier adds at most its interval
            assert read_line(tail.stdout, FOLLOW_S) == f"followed-{i}\n".encode()
    finally:
        tail.kill()
        tail.wait()


def test_a_roll_shows_in_segments_and_the_sealed_index_shrinks(mnt: Seglogd) -> None:
    log = mnt / "grow-0"
    names_before = set(os.listdir(log / "segments"))
    active_index = sorted(n for n in names_before if n.endswith(".index"))[-1]
    preallocated = size(log / "segments" / active_index)  # cached: the index as preallocated
    append(log / "append", [f"{i:0100d}" for i in range(100)])  # > 4 KiB: rolls
    eventually(lambda: set(os.listdir(log / "segments")) > names_before, "a new segment is listed")
    on_disk = (mnt.data_dir / "grow-0" / active_index).stat().st_size
    assert on_disk < preallocated  # sealed: trimmed to its entries
    eventually(lambda: size(log / "segments" / active_index) == on_disk, "the sealed index's size")
    sealed = log / "segments" / active_index.replace(".index", ".log")
    direct = mnt.data_dir / "grow-0" / sealed.name
    for _ in range(2):  # the second read comes from the pages the kernel kept
        assert sealed.read_bytes() == direct.read_bytes()


def test_retention_removes_segments_and_offsets(mnt: Seglogd) -> None:
    log = mnt / "retained-0"
    append(log / "append", [f"{i:0100d}" for i in range(30)])
    first_log = sorted(n for n in os.listdir(log / "segments") if n.endswith(".log"))[0]
    assert size(log / "by-offset" / "0") == 100  # both cached in the kernel now
    assert size(log / "segments" / first_log) > 0
    with open(log / "by-offset" / "0", "rb") as f:
        assert f.read() == b"%0100d" % 0
    append(log / "append", [f"{i:0100d}" for i in range(30, 200)])  # several rolls; retention follows
    eventually(lambda: first_log not in os.listdir(log / "segments"), "retention deleted a segment", 10)
    eventually(lambda: missing(log / "by-offset" / "0"), "by-offset/0 is ENOENT")
    eventually(lambda: missing(log / "segments" / first_log), "the deleted segment's stat is ENOENT")
    with pytest.raises(FileNotFoundError):
        (log / "by-offset" / "0").read_bytes()


def test_retention_makes_every_spelling_of_a_removed_offset_enoent(mnt: Seglogd) -> None:
    """The kernel caches `by-offset/0001` apart from `by-offset/1`: both must go when 1 does."""
    log = mnt / "retained-0"
    first = int(json.loads((log / "info").read_text())["end_offset"])
    append(log / "append", [f"{i:0100d}" for i in range(5)])
    spellings = [log / "by-offset" / name for name in (f"{first + 1}", f"000{first + 1}", f"0{first + 2}")]
    assert all(size(path) == 100 for path in spellings)  # cached in the kernel now
    append(log / "append", [f"{i:0100d}" for i in range(200)])  # rolls; retention passes them
    for path in spellings:
        eventually(lambda path=path: missing(path), f"{path.name} is ENOENT", 10)


def test_tail_f_from_n_keeps_following_when_retention_passes_n(mnt: Seglogd, tmp_path: Path) -> None:
    """An open from/<n> keeps its stream (fstat answers through the open file), as records does."""
    log = mnt / "retained-0"
    n = int(json.loads((log / "info").read_text())["end_offset"])
    append(log / "append", [f"{i:0100d}" for i in range(3)])
    out = tmp_path / "tail.out"
    with open(out, "wb") as sink:
        tail = subprocess.Popen(["tail", "-c", "+1", "-f", str(log / "from" / str(n))], stdout=sink,
                                stderr=subprocess.STDOUT)
        try:
            eventually(lambda: out.read_bytes().count(b"\n") >= 3, "tail printed the first lines")
            for k in range(6):  # several rolls: retention removes offset n meanwhile
                append(log / "append", [f"{i:0100d}" for i in range(3 + 30 * k, 3 + 30 * (k + 1))])
            eventually(lambda: json.loads((log / "info").read_text())["start_offset"] > n,
                       "retention passed n", 10)
            last = b"%0100d\n" % 182
            eventually(lambda: out.read_bytes().endswith(last), "tail followed to the last append", 10)
            assert tail.poll() is None, out.read_text()[-300:]
        finally:
            tail.kill()
            tail.wait()
    # Retention may overtake the reader between records (it then goes on from the new log start,
    # as a reader of `records` does): in order, never repeated or torn.
    values = [int(line) for line in out.read_bytes().split(b"\n")[:-1]]
    assert values[:3] == [0, 1, 2] and values == sorted(set(values)) and values[-1] == 182
    eventually(lambda: missing(log / "from" / str(n)), "once closed, from/<n> below the start is gone")


def test_buffered_open_and_ioctl_answer_enotty(mnt: Seglogd) -> None:
    path = mnt / "grow-0" / "by-offset" / "0"
    with open(path, "rb") as f:  # buffered open() asks isatty() first
        assert not f.isatty()
        assert f.read() == b"first"
        with pytest.raises(OSError) as raised:
            fcntl.ioctl(f.fileno(), termios.TCGETS, bytes(64))
    assert raised.value.errno == errno.ENOTTY


def test_no_max_threads_warning_from_libfuse(tmp_path: Path) -> None:
    daemon = make_seglogd(tmp_path)
    try:
        daemon.start()
        append(daemon / "events-0" / "append", ["x"])
        assert (daemon / "events-0" / "records").read_text() == "x\n"
        assert daemon.stop() == 0
    finally:
        daemon.cleanup()
    stderr = daemon.stderr()
    assert "serving 1 log(s)" in stderr  # the daemon's own lines are there
    assert "max threads" not in stderr

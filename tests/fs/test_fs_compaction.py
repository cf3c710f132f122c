"""Every read path of a compacted log while the log cleaner replaces its segments (issue 10): the
streams behind ``records``/``from/<n>`` in process, then the real mount driven by real programs."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cleaner_helpers import compact_config, kafka_python_records, open_manager
from support.engine_helpers import ManualClock
from support.mount_fixture import Seglogd, fuse_required, read_stdout_until
from support.mount_fixture import seglogd as seglogd  # the fixture

from seglogfs.errors import OffsetOutOfRangeError
from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord
from seglogfs.views import value_stream
from seglogfs.views.value_stream import ValueStream

BIG = 1 << 24


def keyed(lg: Log, first: int, count: int, keys: int = 10) -> list[bytes]:
    """``count`` records, one batch each, keys ``k0``.. cycling; their values."""
    values = []
    for n in range(first, first + count):
        value = b"v%05d" % n
        lg.append([ProducerRecord(key=b"k%d" % (n % keys), value=value)])
        values.append(value)
    return values


def lines(values: list[bytes]) -> bytes:
    return b"".join(v + b"\n" for v in values)


def surviving(lg: Log) -> bytes:
    return lines([r.value for r in lg.iter_records()])


def clean_all(manager) -> int:
    rounds = 0
    while manager.clean_once() is not None:
        rounds += 1
    return rounds


@contextlib.contextmanager
def streamed_log(
    tmp_path: Path, clock: ManualClock
) -> Iterator[tuple[LogManager, Log, list[bytes], ValueStream]]:
    """A compacted log of 60 keyed records over 400-byte segments, replaced files kept 60 s, and its
    records stream."""
    cfg = compact_config(file_delete_delay_ms=60_000, segment_bytes=400)
    with open_manager(tmp_path, cfg, clock) as manager:
        lg = manager.create_log("t-0")
        written = keyed(lg, 0, 60)
        yield manager, lg, written, ValueStream(lg)


def test_a_stream_keeps_its_positions_across_a_clean_then_begins_afresh(tmp_path: Path, monkeypatch) -> None:
    clock = ManualClock()
    with streamed_log(tmp_path, clock) as (manager, lg, written, stream):
        reader = stream.reader()
        before = reader.read(0, BIG)
        assert before == lines(written) and stream.size() == len(before)
        assert clean_all(manager) > 0
        assert len(surviving(lg)) < len(before), "the cleaner removed nothing: the test proves nothing"
        # the replaced segments are still read from their .deleted files; nothing counted twice
        assert stream.size() == len(before)
        assert reader.read(0, BIG) == before
        more = keyed(lg, 60, 5)
        assert stream.size() == len(before) + len(lines(more))
        assert reader.read(len(before), BIG) == lines(more)
        # a fresh stream shows the compacted log, not the replaced files still on disk
        assert lg.deleted_segments and ValueStream(lg).read(0, BIG) == surviving(lg)
        # purged: the replaced bytes become the hole; the size still never shrinks
        clock.advance(61_000)
        lg.delete_old_segments()
        assert not lg.deleted_segments
        assert stream.size() == len(before) + len(lines(more))
        with pytest.raises(OffsetOutOfRangeError):
            stream.read(0, 10)
        assert stream.read(len(before), BIG) == lines(more)
        # a fresh stream shows the compacted log
        assert ValueStream(lg).read(0, BIG) == surviving(lg)
        # and so does this one once nobody reads it for a while
        reader.close()
        monkeypatch.setattr(value_stream, "QUIET_BEFORE_REBASE_S", 0.0)
        assert stream.size() == len(surviving(lg))
        assert stream.read(0, BIG) == surviving(lg) and stream.rebases == 1


def test_a_new_reader_during_a_clean_reads_the_pre_clean_records_whole(tmp_path: Path, monkeypatch) -> None:
    with streamed_log(tmp_path, ManualClock()) as (manager, lg, written, stream):
        holder = stream.reader()  # keeps the stream from beginning afresh
        assert holder.read(0, BIG) == lines(written)
        clean_all(manager)
        late = stream.reader()
        assert late.read(0, BIG) == lines(written)  # never a gap in what it reads, never a line twice
        late.close()
        holder.close()
        # nobody reads: it begins afresh with the cleaned segments, the replaced ones still on disk
        monkeypatch.setattr(value_stream, "QUIET_BEFORE_REBASE_S", 0.0)
        assert lg.deleted_segments and stream.size() == len(surviving(lg))
        assert stream.reader().read(0, BIG) == surviving(lg)


def test_records_appended_after_the_last_look_and_cleaned_before_the_next_are_counted_once(
    tmp_path: Path,
) -> None:
    """The segment a stream counted part of is grouped into a cleaned one and purged before the
    stream looks again: of the replacement, only the records after the last one counted are new."""
    clock = ManualClock()
    cfg = compact_config(file_delete_delay_ms=0, segment_bytes=4000)
    with open_manager(tmp_path, cfg, clock) as manager:
        lg = manager.create_log("t-0")
        for first in (0, 10, 20):  # small segments, which the cleaner groups into one
            keyed(lg, first, 10)
            if first < 20:
                lg.roll()
        stream = ValueStream(lg)
        reader = stream.reader()
        seen = reader.read(0, BIG)
        counted_to, partly_counted = lg.end_offset, lg.active_segment.base_offset
        for n in range(3):
            lg.append([ProducerRecord(key=b"new%d" % n, value=b"late%d" % n)])
        lg.roll()
        clean_all(manager)
        lg.delete_old_segments()  # purges what the cleaner replaced (file.delete.delay.ms 0)
        bases = [s.base_offset for s in lg.segments]
        assert partly_counted not in bases and bases[-1] == counted_to + 3, f"not grouped: {bases}"
        size = stream.size()
        tail = reader.read(len(seen), BIG)
        assert tail == b"late0\nlate1\nlate2\n", tail
        assert size == len(seen) + len(tail)


# ---------------------------------------------------------------------------------------------- mount
USERS = {
    "cleanup.policy": "compact",
    "fs.append.key.separator": ":",
    "segment.bytes": 600,
    "min.cleanable.dirty.ratio": 0.01,
    "file.delete.delay.ms": 3000,
}
WRITERS, WRITES, KEYS = 2, 150, 12
LINE = re.compile(rb"^w(\d)-(\d+)$")


def _writer(append: Path, w: int) -> subprocess.Popen:
    """A shell appending ``k<i % KEYS>:w<w>-<i>`` lines one `echo` at a time."""
    script = f'for i in $(seq 0 {WRITES - 1}); do echo "k$((i % {KEYS})):w{w}-$i" >> {append}; done'
    return subprocess.Popen(["bash", "-c", script])


def _read_offsets(by_offset: Path, stop: threading.Event, seen: dict[int, bytes], errors: list) -> None:
    """Open by-offset/<n> of offsets 0.. over and over: each read a whole value or ENOENT (cleaned)."""
    while not stop.is_set():
        for n in range(WRITERS * WRITES):
            try:
                value = (by_offset / str(n)).read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                errors.append((n, exc))
                continue
            if seen.setdefault(n, value) != value:
                errors.append((n, seen[n], value))


def _records_sizes(records: Path, stop: threading.Event, sizes: list[tuple[float, int]]) -> None:
    while not stop.is_set():
        sizes.append((time.monotonic(), os.stat(records).st_size))
        time.sleep(0.01)


def _shrinks(sizes: list[tuple[float, int]], settle_s: float = 0.3) -> list[tuple[float, int, int]]:
    """Each (time, size) sample smaller than one taken ``settle_s`` or more before it. Closer samples
    may go back by one append: the kernel keeps the attributes of whichever of two concurrent
    GETATTRs (ours, tail's fstat) it got last, while each caller is answered with its own reply."""
    out, best, j = [], 0, 0
    for t, size in sizes:
        while j < len(sizes) and sizes[j][0] <= t - settle_s:
            best = max(best, sizes[j][1])
            j += 1
        if size < best:
            out.append((t, size, best))
    return out


def _settled_info(info: Path, timeout: float = 60.0) -> dict:
    """``info`` once the cleaner has nothing left to clean (two looks 0.5 s apart agree)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        data = json.loads(info.read_text())
        if last is not None and not data["cleaner"]["cleanable"] and data["cleaner"] == last["cleaner"]:
            return data
        last = data
        time.sleep(0.5)
    raise AssertionError(f"the cleaner did not settle: {last}")


@pytest.mark.fuse
@fuse_required
def test_compaction_while_writers_append_and_readers_follow(seglogd) -> None:
    mnt: Seglogd = seglogd(defaults={"log.cleaner.backoff.ms": "50ms"}, logs={"users-0": USERS})
    log = mnt / "users-0"
    tail = subprocess.Popen(["tail", "-s", "0.05", "-c", "+1", "-f", str(log / "records")],
                            stdout=subprocess.PIPE)
    stop, seen, errors, sizes = threading.Event(), {}, [], []
    threads = [threading.Thread(target=_read_offsets, args=(log / "by-offset", stop, seen, errors)),
               threading.Thread(target=_records_sizes, args=(log / "records", stop, sizes))]
    try:
        for thread in threads:
            thread.start()
        writers = [_writer(log / "append", 0)]
        deadline = time.monotonic() + 30
        while len(seen) < KEYS and time.monotonic() < deadline:  # offsets read before they are cleaned
            time.sleep(0.01)
        writers += [_writer(log / "append", w) for w in range(1, WRITERS)]
        assert all(p.wait(120) == 0 for p in writers)
        (log / "append").write_bytes(b"end:last\n")
        info = _settled_info(log / "info")
        stop.set()
        for thread in threads:
            thread.join(60)
        got = read_stdout_until(tail, lambda out: out.endswith(b"last\n"))
    finally:
        stop.set()
        tail.kill()
        tail.wait()
    survivors = kafka_python_records(mnt.data_dir / "users-0")
    offsets = [offset for offset, _, _ in survivors]
    cleaner = info["cleaner"]
    assert cleaner["compacted"] and cleaner["passes"] >= 1 and cleaner["records_removed"] > 0, cleaner
    assert info["records"] == len(survivors) < info["end_offset"] == WRITERS * WRITES + 1
    # tail -f: no line twice, none torn, each writer's lines in order, every survivor among them
    lines = got.split(b"\n")[:-1]
    assert lines[-1] == b"last" and len(set(lines)) == len(lines)
    parsed = [LINE.match(line) for line in lines[:-1]]
    assert all(parsed), [line for line, m in zip(lines, parsed, strict=False) if not m][:5]
    for w in range(WRITERS):
        numbers = [int(m[2]) for m in parsed if int(m[1]) == w]
        assert numbers == sorted(numbers)
    assert {value for _, _, value in survivors} <= set(lines)
    # stat of records never shrank while tail had it open
    assert len(sizes) > 10 and not _shrinks(sizes)
    # by-offset: every survivor reads as itself, every cleaned offset is ENOENT (even those read before)
    assert not errors, errors[:5]
    for offset, _, value in survivors:
        assert (log / "by-offset" / str(offset)).read_bytes() == value
        assert seen.get(offset, value) == value
    cleaned = sorted(set(range(info["start_offset"], info["end_offset"])) - set(offsets))
    assert {n for n in cleaned if n in seen}, "no by-offset read happened before a clean"
    for n in cleaned:
        # another spelling of the same offset is a name the kernel never cached: the daemon's own answer
        daemon_says = (log / "by-offset" / f"0{n}").exists()
        assert not (log / "by-offset" / str(n)).exists(), f"{n} (the daemon says it exists: {daemon_says})"
        with pytest.raises(FileNotFoundError):
            (log / "by-offset" / str(n)).read_bytes()
    assert sorted(int(name) for name in os.listdir(log / "by-offset")) == offsets
    # once nobody has read or stat'ed it for a while, records begins afresh: the compacted log
    time.sleep(value_stream.QUIET_BEFORE_REBASE_S + 0.5)
    assert (log / "records").read_bytes() == b"".join(value + b"\n" for _, _, value in survivors)


@pytest.mark.fuse
@fuse_required
def test_a_segment_file_read_across_its_swap_never_mixes_old_and_new_bytes(seglogd) -> None:
    """``segments/<base>.log`` keeps its name when the cleaner swaps in the cleaned file. A reader that
    opened the old one and reads on after the swap must not put the old file's bytes into the page
    cache the kernel keeps for that name (sealed segments are opened keep_cache): a later ``cat`` would
    get the new file's head and the old file's tail, bytes no file on disk holds. Its reads fail with
    ESTALE instead (or, answered by the kernel, the new file's bytes); a new reader gets the file
    on disk."""
    settings = {**USERS, "segment.bytes": 200_000, "min.cleanable.dirty.ratio": 0.99,
                "file.delete.delay.ms": 60_000}
    mnt: Seglogd = seglogd(defaults={"log.cleaner.backoff.ms": "50ms"}, logs={"users-0": settings})
    log = mnt / "users-0"
    with open(log / "append", "ab", buffering=0) as append:
        for r in range(30):  # 30 batches of 150 records over 50 keys: two segments, the first sealed
            append.write(b"".join(b"k%d:%s\n" % (i % 50, b"r%d-%d-" % (r, i) * 10) for i in range(150)))
    name = sorted(n for n in os.listdir(log / "segments") if n.endswith(".log"))[0]
    path = log / "segments" / name
    old = os.open(path, os.O_RDONLY)
    try:
        assert len(os.pread(old, 4096, 0)) == 4096
        mnt.write_config(logs={"users-0": {**settings, "min.cleanable.dirty.ratio": 0.01}})
        mnt.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while not json.loads((log / "info").read_text())["cleaner"]["passes"]:
            assert time.monotonic() < deadline, mnt.stderr()
            time.sleep(0.1)
        on_disk = (mnt.data_dir / "users-0" / name).read_bytes()
        assert len(on_disk) < 4096 * 2, "the clean did not shrink the segment: the test proves nothing"
        # the notifier drops the kernel's attributes and pages of the path together: once a stat shows
        # the new size, the old file's cached pages are gone too (a loaded machine may take a while)
        while os.stat(path).st_size != len(on_disk):
            assert time.monotonic() < deadline, "the notifier never invalidated the swapped file"
            time.sleep(0.05)
        try:
            got = os.pread(old, 1 << 20, 4096)
        except OSError as exc:
            assert exc.errno == errno.ESTALE  # the read reached the daemon: the old file is not read
        else:
            # the kernel answered from the path's pages (some kernels refill them from the new file
            # at the attribute change): the new file's bytes, never the old file's
            assert got == on_disk[4096:], "a read of the old file after its swap"
    finally:
        os.close(old)
    assert path.read_bytes() == on_disk
    assert subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout == on_disk

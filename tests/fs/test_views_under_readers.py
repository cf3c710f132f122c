"""The stream views stay exact for every new open while other readers keep them busy: a poller that
reopens ``records`` every 0.1-0.5 s (what ``watch cat`` does) and a ``tail -f`` that never closes it
must not keep compaction or retention from the next ``cat`` (docs/mount.md section 7)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.cleaner_helpers import compact_config, open_manager
from support.engine_helpers import ManualClock
from support.mount_fixture import Seglogd, fuse_required, read_stdout_until, seglogd  # noqa: F401

from seglogfs.fs.stream_views import StreamViews
from seglogfs.records import ProducerRecord
from seglogfs.stream_format import JSON_LINES, VALUES, StreamFormat
from seglogfs.views import value_stream
from seglogfs.views.value_stream import ValueStream

ROUNDS, KEYS = 40, 50
BIG = 1 << 24

COMPACTED = {
    "cleanup.policy": "compact",
    "fs.append.key.separator": ":",
    "segment.bytes": 4096,
    "min.cleanable.dirty.ratio": 0.01,
    "min.compaction.lag.ms": 0,
    "delete.retention.ms": 0,
    "file.delete.delay.ms": 5000,
}


Samples = list[tuple[float, float, bytes]]


def _poll(path: Path, interval: float, stop: threading.Event, samples: Samples) -> None:
    """``cat path`` every ``interval`` s until ``stop``: (start, end, output) of each."""
    while not stop.is_set():
        started = time.monotonic()
        out = subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout
        samples.append((started, time.monotonic(), out))
        time.sleep(interval)


def _log_values(log: Path) -> list[bytes]:
    """The log's record values in offset order, through ``by-offset`` (which is exact)."""
    offsets = sorted(int(name) for name in os.listdir(log / "by-offset"))
    return [(log / "by-offset" / str(n)).read_bytes() for n in offsets]


def _wait_until(what, timeout: float = 60.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("first", [None, 10], ids=["records", "from-10"])
@pytest.mark.parametrize("fmt", [VALUES, JSON_LINES], ids=["values", "jsonl"])
def test_after_a_clean_a_new_open_gets_a_generation_ending_where_the_held_one_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: int | None, fmt: StreamFormat
) -> None:
    cfg = compact_config(file_delete_delay_ms=0, segment_bytes=400)
    with open_manager(tmp_path, cfg, ManualClock()) as manager:
        lg = manager.create_log("t-0")

        def append(start: int, count: int) -> None:
            for n in range(start, start + count):
                lg.append([ProducerRecord(key=b"k%d" % (n % 10), value=b"v%05d" % n)])

        def as_it_is() -> bytes:
            """What a stream made now shows (no replaced file is left on disk)."""
            return ValueStream(lg, first_offset=first, fmt=fmt).read(0, BIG)

        append(0, 60)
        views = StreamViews()
        held = views.reader(lg, first, fmt)  # tail -f
        seen = held.read(0, BIG)
        assert seen == as_it_is()
        while manager.clean_once() is not None:
            pass
        lg.delete_old_segments()  # file.delete.delay.ms 0: the replaced files go at once
        compacted = as_it_is()
        assert len(compacted) < len(seen), "the cleaner removed nothing: the test proves nothing"
        assert views.size(lg, first, fmt) == len(seen)  # one size, right for the held reader
        fresh = views.reader(lg, first, fmt)
        assert fresh.read(0, BIG) == compacted  # the log as it is, from the hole's end
        # tail -n of a new open seeks back from st_size: its own generation's last bytes
        tailer = views.reader(lg, first, fmt)
        assert tailer.read(len(seen) - 7, BIG) == compacted[-7:]
        tailer.close()
        append(60, 3)
        added = as_it_is()[len(compacted):]
        assert added and views.size(lg, first, fmt) == len(seen) + len(added)
        assert held.read(len(seen), BIG) == added  # the held reader goes on, nothing twice
        assert fresh.read(len(compacted), BIG) == added  # its positions: the hole skipped
        # every reader gone and the path quiet: the hole goes, and the size says so
        held.close()
        fresh.close()
        rebases = views.rebases("t-0")
        monkeypatch.setattr(value_stream, "QUIET_BEFORE_REBASE_S", 0.0)
        assert views.rebases("t-0") > rebases  # due: the notifier invalidates the cached size
        assert views.size(lg, first, fmt) == len(compacted) + len(added)
        assert views.reader(lg, first, fmt).read(0, BIG) == compacted + added


def test_a_held_reader_finishes_a_replaced_segment_whose_name_a_later_clean_took(tmp_path: Path) -> None:
    # Two cleans of the same base offset within file.delete.delay.ms: the second renames its segment
    # to the .deleted name of the one the first replaced, which a held reader has not finished.
    cfg = compact_config(file_delete_delay_ms=60_000, segment_bytes=400)
    with open_manager(tmp_path, cfg, ManualClock()) as manager:
        lg = manager.create_log("t-0")

        def append(start: int, count: int) -> None:
            for n in range(start, start + count):
                lg.append([ProducerRecord(key=b"k%d" % (n % 10), value=b"v%05d" % n)])

        append(0, 40)
        held = StreamViews().reader(lg, None, VALUES)  # tail -f, which has read what there was
        seen = held.read(0, BIG)
        append(40, 40)
        whole = ValueStream(lg).read(0, BIG)  # what the held reader has yet to read
        assert whole.startswith(seen) and held.stream.size() == len(whole)
        for _ in range(2):
            while manager.clean_once() is not None:
                pass
            for segment in lg.deleted_segments:
                segment.release_files()  # idle: the descriptor budget closes them
            append(80, 20)
        assert len({s.base_offset for s in lg.deleted_segments}) < len(lg.deleted_segments)
        # the reader goes on from where it was, with the records as they were when it began
        assert held.read(len(seen), len(whole) - len(seen)) == whole[len(seen):]
        held.close()
        lg.delete_old_segments(2**62)  # every replaced segment purged: the live ones stay whole
        assert ValueStream(lg).read(0, BIG).endswith(b"v00099\n")


@pytest.mark.fuse
@fuse_required
def test_a_compacted_records_is_exact_for_each_new_open_under_steady_readers(seglogd) -> None:  # noqa: F811
    mnt: Seglogd = seglogd(defaults={"log.cleaner.backoff.ms": "50ms"}, logs={"users-0": COMPACTED})
    log = mnt / "users-0"
    records = log / "records"
    tail = subprocess.Popen(["tail", "-s", "0.1", "-c", "+1", "-f", str(records)], stdout=subprocess.PIPE)
    stop = threading.Event()
    samples: dict[float, list[tuple[float, float, bytes]]] = {0.1: [], 0.5: []}
    pollers = [threading.Thread(target=_poll, args=(records, i, stop, s)) for i, s in samples.items()]
    try:
        for poller in pollers:
            poller.start()
        for j in range(ROUNDS):
            lines = "".join(f"k{i}:r{j}k{i}\n" for i in range(KEYS))
            (log / "append").write_text(lines)  # one write: one batch of KEYS records
            time.sleep(0.01)
        for i in range(10):
            (log / "append").write_text(f"big{i}:{str(i) * 1000}\n")
        (log / "append").write_text("end:last\n")
        written = time.monotonic()

        def settled() -> bool:
            info = json.loads((log / "info").read_text())
            gone = not any(name.endswith(".deleted") for name in os.listdir(mnt.data_dir / "users-0"))
            return info["cleaner"]["passes"] >= 1 and not info["cleaner"]["cleanable"] and gone

        _wait_until(settled)
        values = _log_values(log)
        assert len(values) < ROUNDS * KEYS + 11  # the cleaner removed records
        settled_at = time.monotonic()
        # a second for every new open to show it, then a sample of each poller begun after that (on a
        # loaded machine one `cat` may take seconds)
        _wait_until(lambda: all(any(started > settled_at + 1.0 for started, _, _ in taken)
                                for taken in samples.values()), interval=0.1)
        stop.set()
        for poller in pollers:
            poller.join(30)
        followed = read_stdout_until(tail, lambda out: out.endswith(b"last\n"), timeout=10)
        expected = b"".join(value + b"\n" for value in values)
        # tail -f still holds the old generation: a new `tail -n` seeks back from st_size into its own
        tail_n = subprocess.run(["tail", "-n", "5", str(records)], capture_output=True, check=True).stdout
        assert tail_n == b"".join(value + b"\n" for value in values[-5:])
        assert os.stat(records).st_size >= len(expected)
    finally:
        stop.set()
        tail.kill()
        tail.wait()
    # nobody holds the path: once it has been quiet, its size is the log's bytes again
    time.sleep(2.0)
    assert records.read_bytes() == expected
    _wait_until(lambda: os.stat(records).st_size == len(expected), timeout=5, interval=0.05)
    survivors = set(values)
    for interval, taken in samples.items():
        late = [out for started, _, out in taken if started > settled_at + 1.0]
        assert late, f"no sample of the {interval} s poller after the log settled"
        for out in late:
            assert out == expected, (interval, len(out.splitlines()), len(values))
        for started, _, out in taken:
            lines = out.splitlines()
            assert len(set(lines)) == len(lines), f"a record twice in one open ({interval} s poller)"
            if started > written:  # every record of the final log existed when this open began
                assert survivors <= set(lines), (interval, len(lines), len(values))
    # tail -f: every line whole, none twice, every survivor among them, the last one last
    lines = followed.split(b"\n")
    assert lines[-1] == b"" and lines[-2] == b"last"
    lines = lines[:-1]
    assert len(set(lines)) == len(lines)
    assert survivors <= set(lines)
    whole = {f"r{j}k{i}".encode() for j in range(ROUNDS) for i in range(KEYS)}
    whole |= {str(i).encode() * 1000 for i in range(10)} | {b"last"}
    assert set(lines) <= whole, sorted(set(lines) - whole)[:3]


@pytest.mark.fuse
@fuse_required
def test_retention_is_exact_for_each_new_open_under_a_steady_poller(seglogd) -> None:  # noqa: F811
    settings = {"segment.bytes": 2048, "retention.bytes": 8192, "file.delete.delay.ms": 1000}
    mnt: Seglogd = seglogd(logs={"events-0": settings})
    log = mnt / "events-0"
    records = log / "records"
    stop = threading.Event()
    taken: list[tuple[float, float, bytes]] = []
    poller = threading.Thread(target=_poll, args=(records, 0.1, stop, taken))
    try:
        poller.start()
        for j in range(60):
            (log / "append").write_text("".join(f"line-{j}-{i:02d}\n" for i in range(20)))
            time.sleep(0.02)
        time.sleep(0.3)
        # retention runs once a second; then the renamed files go after file.delete.delay.ms
        _wait_until(lambda: json.loads((log / "info").read_text())["start_offset"] > 0, timeout=30)
        _wait_until(lambda: not any(n.endswith(".deleted") for n in os.listdir(mnt.data_dir / "events-0")),
                    timeout=30)
        values = _log_values(log)
        settled_at = time.monotonic()
        _wait_until(lambda: any(started > settled_at + 1.0 for started, _, _ in taken), interval=0.1)
        stop.set()
        poller.join(30)
    finally:
        stop.set()
    expected = b"".join(value + b"\n" for value in values)
    late = [out for started, _, out in taken if started > settled_at + 1.0]
    assert late and all(out == expected for out in late), [len(out.splitlines()) for out in late]
    for _, _, out in taken:
        lines = out.splitlines()
        assert len(set(lines)) == len(lines)


@pytest.mark.fuse
@fuse_required
def test_tail_n_after_the_reader_of_a_compacted_records_left_shows_its_last_lines(seglogd) -> None:  # noqa: F811
    """The hole a held reader kept goes in a getattr, never at an open: `tail -n` opens, then takes
    the size the kernel cached and seeks back from it, so an open that moved the positions would
    send it past the end (it printed nothing)."""
    mnt: Seglogd = seglogd(defaults={"log.cleaner.backoff.ms": "50ms"},
                           logs={"u-0": {**COMPACTED, "file.delete.delay.ms": 0}})
    log = mnt / "u-0"
    records = log / "records"
    with open(records, "rb") as held:
        for j in range(60):
            (log / "append").write_text("".join(f"k{i}:r{j}k{i}-{'x' * 50}\n" for i in range(KEYS)))
            os.stat(records)
            held.read()
        _wait_until(lambda: json.loads((log / "info").read_text())["cleaner"]["passes"] >= 1)
        _wait_until(lambda: not json.loads((log / "info").read_text())["cleaner"]["cleanable"])
        time.sleep(1.5)  # the replaced files purged: nothing changes any more, the kernel keeps the size
        values = _log_values(log)
        assert os.stat(records).st_size > sum(len(v) + 1 for v in values)  # the held reader's hole
    time.sleep(value_stream.QUIET_BEFORE_REBASE_S + 1.0)
    out = subprocess.run(["tail", "-n", "3", str(records)], capture_output=True, check=True).stdout
    assert out == b"".join(value + b"\n" for value in values[-3:])
    _wait_until(lambda: os.stat(records).st_size == sum(len(v) + 1 for v in values), timeout=5, interval=0.05)

"""View sizes from the engine's totals: no stat walks the log, sizes equal what ``cat`` reads, the
totals survive a clean restart and are recounted when their file is damaged, stale or missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from support.engine_helpers import config
from support.mount_fixture import (  # noqa: F401 (fixture)
    fuse_required,
    log_info,
    make_seglogd,
    read_stdout_until,
    seglogd,
)
from support.testdata import KAFKA_LOG_DIR

from seglogfs.log_manager import LogManager
from seglogfs.totals_file import TOTALS_SUFFIX

pytestmark = fuse_required
VIEWS = ("records", "records.jsonl")


def totals_files(log_dir: Path) -> list[Path]:
    """The segments' totals files of a log dir."""
    return sorted(log_dir.glob(f".*{TOTALS_SUFFIX}"))


def run(*argv: str) -> bytes:
    return subprocess.run(argv, capture_output=True, check=True, timeout=120).stdout


def views_of(log_dir: Path, end: int) -> list[Path]:
    """Every kind of view of a log with ``end`` records: whole-log and from the middle."""
    n = end // 2 + 1
    return [log_dir / v for v in VIEWS] + [log_dir / "from" / str(n), log_dir / "from" / f"{n}.jsonl"]


def assert_sizes_are_what_cat_reads(log_dir: Path) -> None:
    end = log_info(log_dir.parent, log_dir.name)["end_offset"]
    for view in views_of(log_dir, end):
        data = run("cat", str(view))
        assert os.stat(view).st_size == len(data), view
        assert int(run("wc", "-c", str(view)).split()[0]) == len(data), view
        assert run("tail", "-n", "3", str(view)) == b"".join(data.splitlines(keepends=True)[-3:]), view


def write_log(data_dir: Path, name: str, records: int, per_batch: int, **cfg: object) -> None:
    """``records`` values in batches of ``per_batch``, written by the engine, closed cleanly."""
    with LogManager(data_dir, config(**cfg)) as manager:
        lg = manager.create_log(name)
        for first in range(0, records, per_batch):
            lg.append_values([b"value-%08d" % i for i in range(first, min(first + per_batch, records))])


class OtherWriter:
    """Appends a line to another log every 5 ms (as the users' writer did) while a test runs."""

    def __init__(self, append: Path) -> None:
        self.append, self.stop = append, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            with open(self.append, "ab") as f:
                f.write(b"tick\n")
            time.sleep(0.005)

    def __enter__(self) -> OtherWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def first_stats(log_dir: Path, end: int) -> float:
    """Seconds for a first `ls -l` of the log dir and the first stat of each view, plus the least of
    three rounds of first stats of 20 new from/<n> paths (each round's paths never asked before)."""
    started = time.perf_counter()
    run("ls", "-l", str(log_dir))  # stats records and records.jsonl, as the users' `ls -l` did
    for path in views_of(log_dir, end):
        os.stat(path)
    whole = time.perf_counter() - started
    rounds = []
    for r in range(3):
        firsts = [end * k // 10 + r for k in range(10)]
        paths = [log_dir / "from" / f"{n}{suffix}" for n in firsts for suffix in ("", ".jsonl")]
        started = time.perf_counter()
        for path in paths:
            os.stat(path)
        rounds.append(time.perf_counter() - started)
    return whole + min(rounds)


def test_first_stats_do_not_grow_with_the_log(tmp_path: Path) -> None:
    """10x the records (large batches, and one-record batches) does not make first stats 10x slower;
    sizes are exact and another log's writer keeps appending meanwhile."""
    shapes = {"big-0": (20_000, 1000), "ones-0": (2_000, 1)}
    timings: dict[str, list[float]] = {}
    for scale in (1, 10):
        data_dir = tmp_path / f"data{scale}"
        for name, (records, per_batch) in shapes.items():
            write_log(data_dir, name, records * scale, per_batch)
        logs = {name: {} for name in shapes} | {"other-0": {}}
        daemon = make_seglogd(tmp_path, name=f"run{scale}", data_dir=data_dir, logs=logs)
        try:
            daemon.start()
            with OtherWriter(daemon / "other-0" / "append"):
                for name, (records, _) in shapes.items():
                    timings.setdefault(name, []).append(first_stats(daemon / name, records * scale))
                    assert_sizes_are_what_cat_reads(daemon / name)
            assert log_info(daemon.mount, "other-0")["end_offset"] > 0
        finally:
            daemon.cleanup()
    for name, (small, big) in timings.items():
        assert big < 3 * small, (name, small, big)


def test_sizes_are_what_cat_reads_through_rolls_restarts_and_kill_9(seglogd) -> None:  # noqa: F811
    daemon = seglogd(defaults={"segment.bytes": 4000, "index.interval.bytes": 256})
    log_dir = daemon / "events-0"
    for first in range(0, 500, 25):
        (log_dir / "append").write_bytes(b"".join(b"line %d\n" % i for i in range(first, first + 25)))
    assert len(os.listdir(log_dir / "segments")) > 6
    assert_sizes_are_what_cat_reads(log_dir)
    assert daemon.stop() == 0
    segments = sorted((daemon.data_dir / "events-0").glob("*.log"))
    assert len(totals_files(daemon.data_dir / "events-0")) == len(segments) > 2
    daemon.start()
    assert_sizes_are_what_cat_reads(log_dir)
    for first in range(0, 300, 25):
        (log_dir / "append").write_bytes(b"".join(b"more %d\n" % i for i in range(first, first + 25)))
    assert_sizes_are_what_cat_reads(log_dir)
    daemon.kill()
    daemon.start()
    assert_sizes_are_what_cat_reads(log_dir)


def test_a_damaged_stale_or_missing_totals_file_is_recounted(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_log(data_dir, "t-0", 3000, 7, segment_bytes=8000)
    log_dir = data_dir / "t-0"
    good = {path: path.read_bytes() for path in totals_files(log_dir)}
    assert len(good) > 3
    daemon = make_seglogd(tmp_path, data_dir=data_dir, logs={"t-0": {}}, defaults={"segment.bytes": 8000})
    try:
        daemon.start()
        assert_sizes_are_what_cat_reads(daemon / "t-0")
        # stale: the files of the first close, whose active segment has grown since (and rolled)
        (daemon / "t-0" / "append").write_bytes(b"".join(b"late %d\n" % i for i in range(400)))
        assert daemon.stop() == 0
        for path, data in good.items():
            path.write_bytes(data)
        daemon.start()
        assert_sizes_are_what_cat_reads(daemon / "t-0")
        assert daemon.stop() == 0
        # damaged: one byte of each file flipped (its checksum no longer holds)
        for path in totals_files(log_dir):
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        daemon.start()
        assert_sizes_are_what_cat_reads(daemon / "t-0")
        assert daemon.stop() == 0
        # another file's totals under a segment's name: a valid checksum, the wrong .log
        files = totals_files(log_dir)
        files[1].write_bytes(files[0].read_bytes())
        daemon.start()
        assert_sizes_are_what_cat_reads(daemon / "t-0")
        assert daemon.stop() == 0
        for path in totals_files(log_dir):
            path.unlink()
        daemon.start()
        assert_sizes_are_what_cat_reads(daemon / "t-0")
    finally:
        daemon.cleanup()


def test_a_log_counted_in_the_background_reads_exactly_meanwhile(tmp_path: Path) -> None:
    """No totals files (data seglogfs did not write, as far as it knows; compressed, so the count takes
    a while): the mount is up at once; until the count is done st_size is exact or a lower bound that
    is a multiple of 4096, `cat` and `wc -c` read every byte, `tail -f` follows without a truncation;
    once counted, st_size is exact (the kernel's cached size is invalidated)."""
    data_dir = tmp_path / "data"
    write_log(data_dir, "zstd-0", 120_000, 3, compression_type="zstd")
    for path in totals_files(data_dir / "zstd-0"):
        path.unlink()
    expected = b"".join(b"value-%08d\n" % i for i in range(120_000))
    daemon = make_seglogd(tmp_path, data_dir=data_dir, logs={"zstd-0": {}})
    try:
        daemon.start()
        records = daemon / "zstd-0" / "records"
        follower = subprocess.Popen(
            ["tail", "-f", str(records)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            jsonl = daemon / "zstd-0" / "records.jsonl"
            size, jsonl_size = os.stat(records).st_size, os.stat(jsonl).st_size
            assert size == len(expected) or (size <= len(expected) and size % 4096 == 0), size
            assert run("cat", str(records)) == expected
            assert int(run("wc", "-c", str(records)).split()[0]) == len(expected)
            deadline = time.monotonic() + 60
            while log_info(daemon.mount, "zstd-0")["view_totals"]["counting"] and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # the notifier's next look invalidates the size the kernel cached
            assert os.stat(records).st_size == len(expected)
            assert os.stat(jsonl).st_size == len(run("cat", str(jsonl))) >= jsonl_size
            (daemon / "zstd-0" / "append").write_bytes(b"the last line\n")
            got = read_stdout_until(follower, lambda out: out.endswith(b"the last line\n"))
            assert got.endswith(b"the last line\n"), got[-200:]
        finally:
            follower.kill()
            _, err = follower.communicate()
        assert b"truncated" not in err, err
        assert_sizes_are_what_cat_reads(daemon / "zstd-0")
    finally:
        daemon.cleanup()


def test_a_read_only_copy_of_a_brokers_dir(tmp_path: Path) -> None:
    copy = tmp_path / "kafka"
    shutil.copytree(KAFKA_LOG_DIR, copy)
    daemon = make_seglogd(tmp_path, data_dir=copy, read_only=True, logs={})
    try:
        daemon.start()
        for name in ("demo-topic-0", "__consumer_offsets-15"):
            assert_sizes_are_what_cat_reads(daemon / name)
        assert not totals_files(copy / "demo-topic-0")  # a read-only mount writes nothing
    finally:
        daemon.cleanup()

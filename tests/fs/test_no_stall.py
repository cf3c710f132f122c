"""One slow request never holds the other clients (docs/mount.md section 7): while an fsync of a large
write runs, or retention removes many segments, appends to another log go on. Asserted as progress
made meanwhile and as a ratio of two times measured in one run, never as an absolute time."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from support.mount_fixture import Seglogd, fuse_required, seglogd  # noqa: F401

MIB = 1 << 20
LINE = b"x" * 99 + b"\n"


class Appender(threading.Thread):
    """Appends one line at a time to ``append`` until stopped; (start, end) of each write."""

    def __init__(self, append: Path) -> None:
        super().__init__(daemon=True)
        self.fd = os.open(append, os.O_WRONLY)
        self.times: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.perf_counter()
            os.write(self.fd, LINE)
            self.times.append((began, time.perf_counter()))
            time.sleep(0.0005)

    def finish(self) -> list[tuple[float, float]]:
        self.stop.set()
        self.join(30)
        os.close(self.fd)
        return self.times


def _within(times: list[tuple[float, float]], began: float, ended: float) -> list[float]:
    """The latencies of the writes that both began and ended inside [began, ended]."""
    return [end - start for start, end in times if start >= began and end <= ended]


def _started_within(times: list[tuple[float, float]], began: float, ended: float) -> list[float]:
    return [end - start for start, end in times if began <= start <= ended]


@pytest.mark.fuse
@fuse_required
def test_appends_to_another_log_go_on_while_an_fsync_of_a_large_write_runs(seglogd) -> None:  # noqa: F811
    mnt: Seglogd = seglogd(logs={"other-0": {}, "sync-0": {"segment.bytes": "1GiB"}})
    chunk = (b"s" * 1023 + b"\n") * 512
    fd = os.open(mnt / "sync-0" / "append", os.O_WRONLY)
    appender = Appender(mnt / "other-0" / "append")
    try:
        mib = 64
        while True:  # a write big enough that its fsync takes a while on this disk
            for _ in range(mib * 2):
                os.write(fd, chunk)
            appender.times.clear()
            if not appender.is_alive():
                appender.start()
            time.sleep(0.2)
            began = time.perf_counter()
            os.fsync(fd)
            ended = time.perf_counter()
            if ended - began >= 0.04 or mib >= 512:
                break
            mib *= 2
    finally:
        times = appender.finish()
        os.close(fd)
    fsync = ended - began
    idle = [end - start for start, end in times if end < began]
    inside = _within(times, began, ended)
    started = _started_within(times, began, ended)
    # one request at a time would finish none of them before the fsync (at most one slipped in first)
    assert len(inside) >= 3, (fsync, len(inside), len(started))
    assert max(started) < max(fsync / 2, 2 * max(idle)), (fsync, max(started), max(idle))


@pytest.mark.fuse
@fuse_required
def test_appends_to_another_log_go_on_while_retention_removes_many_segments(seglogd) -> None:  # noqa: F811
    retained = {"segment.bytes": 4096, "file.delete.delay.ms": 0}
    mnt: Seglogd = seglogd(logs={"other-0": {}, "ret-0": retained})
    segments = 400
    with open(mnt / "ret-0" / "append", "wb", buffering=0) as f:
        for _ in range(segments):
            f.write(b"r" * 3000 + b"\n")  # a segment each (segment.bytes 4096)
    log_dir = mnt.data_dir / "ret-0"
    assert len(os.listdir(log_dir)) > 3 * segments
    appender = Appender(mnt / "other-0" / "append")
    try:
        appender.start()
        time.sleep(0.5)
        idle = [end - start for start, end in appender.times]
        logs = dict(mnt.settings["logs"])
        logs["ret-0"] = {**retained, "retention.bytes": 4096}
        mnt.write_config(logs=logs)  # the daemon reloads on the change; retention runs within a second
        deadline = time.monotonic() + 60
        while (log_dir / "00000000000000000000.log").exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        began = time.perf_counter()
        while len(os.listdir(log_dir)) > 20 and time.monotonic() < deadline:
            time.sleep(0.005)
        ended = time.perf_counter()
        time.sleep(0.1)
    finally:
        times = appender.finish()
    info = json.loads((mnt / "ret-0" / "info").read_text())
    assert info["segments"] < 10 and info["start_offset"] > segments - 10
    removal = ended - began
    during = _started_within(times, began, ended)
    assert idle and during, (len(idle), removal)
    # appends went on while the segments were removed, none waiting for much of the removal
    assert len(_within(times, began, ended)) >= min(3, len(during)), (removal, len(during))
    assert max(during) < max(removal / 2, 2 * max(idle)), (removal, max(during), max(idle))

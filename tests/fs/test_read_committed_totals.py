"""read_committed view sizes from the engine's totals minus the aborted transactions' bytes
(seglogfs/hidden_totals.py): the first `stat` of `records` does not walk the log, and is exact."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from support.mount_fixture import fuse_required, log_info, make_seglogd
from support.transactions import write_txn_log

pytestmark = fuse_required
NAME = "txn-0"
def run(*argv: str) -> bytes:
    return subprocess.run(argv, capture_output=True, check=True, timeout=120).stdout


def test_first_stat_of_read_committed_views_is_exact_and_does_not_grow_with_the_log(tmp_path: Path) -> None:
    """10x the batches does not make the first `ls -l` and stats of read_committed views 10x slower
    (once the background count is done); their sizes are what cat reads."""
    timings = []
    for scale in (1, 10):
        data_dir = tmp_path / f"data{scale}"
        expected = write_txn_log(data_dir / NAME, 2_000 * scale)
        logs = {NAME: {"fs.isolation.level": "read_committed", "retention.ms": -1}}
        daemon = make_seglogd(tmp_path, name=f"run{scale}", data_dir=data_dir, logs=logs)
        try:
            daemon.start()
            deadline = time.monotonic() + 60
            while log_info(daemon.mount, NAME)["view_totals"]["counting"]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            log_dir = daemon / NAME
            started = time.perf_counter()
            run("ls", "-l", str(log_dir))
            sizes = [os.stat(log_dir / view).st_size for view in ("records", "records.jsonl")]
            timings.append(time.perf_counter() - started)
            assert sizes[0] == len(expected)
            assert run("cat", str(log_dir / "records")) == expected
            assert sizes[1] == len(run("cat", str(log_dir / "records.jsonl")))
            assert int(run("wc", "-c", str(log_dir / "records")).split()[0]) == len(expected)
            tail = b"".join(expected.splitlines(keepends=True)[-3:])
            assert run("tail", "-n", "3", str(log_dir / "records")) == tail
        finally:
            daemon.cleanup()
    small, big = timings
    assert big < 3 * small, (small, big)


def test_read_committed_views_read_exactly_while_counted_in_the_background(tmp_path: Path) -> None:
    """Right after the mount (the count of the aborted transactions' bytes may still run): st_size is
    exact or a lower bound that is a multiple of 4096, cat and wc -c read every byte; once counted,
    exact."""
    data_dir = tmp_path / "data"
    expected = write_txn_log(data_dir / NAME, 10_000)
    logs = {NAME: {"fs.isolation.level": "read_committed", "retention.ms": -1}}
    daemon = make_seglogd(tmp_path, data_dir=data_dir, logs=logs)
    try:
        daemon.start()
        records = daemon / NAME / "records"
        size = os.stat(records).st_size
        assert size == len(expected) or (size <= len(expected) and size % 4096 == 0), size
        assert int(run("wc", "-c", str(records)).split()[0]) == len(expected)
        assert run("cat", str(records)) == expected
        deadline = time.monotonic() + 60
        while log_info(daemon.mount, NAME)["view_totals"]["counting"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)  # the notifier's next look invalidates the size the kernel cached
        assert os.stat(records).st_size == len(expected)
        middle = daemon / NAME / "from" / "20000"
        assert os.stat(middle).st_size == len(run("cat", str(middle)))
    finally:
        daemon.cleanup()

"""Compaction benchmark, side by side in one run (this machine is shared: compare the ratio to cp).

    .venv/bin/python bench/compaction.py [--records 10000000] [--keys 100000] [--batch 1000] [--dir /tmp/x]

Writes ``--records`` records of 100-byte values over ``--keys`` keys (batches of ``--batch``, each
key rewritten in turn; ``--batch 1`` is the shape of ``echo >> append``, one line a write) to a
compacted log, then in one run: copies the sealed segments with ``cp`` (the same bytes, page cache
warm for both), and cleans the log once with ``LogManager.clean_once``.
Prints cleaning MB/s (bytes of the segments cleaned, over the clean's wall time), the ratio to cp's
MB/s, records removed, and the cleaner's peak memory (tracemalloc: numpy buffers included, measured
in a second clean of an uncleaned copy, since tracing slows the clean) against
``log.cleaner.dedupe.buffer.size``, which holds the offset map and the windows' working memory.
Then the mount row: a copy of the uncleaned log served by ``seglogd`` (its cleaner on, backoff 100 ms)
while one reader opens and reads random ``by-offset/<n>`` files until the daemon logs the clean: the
read latency p50/p99 (a cleaned offset's ENOENT is a sample too; target p99 < 50 ms).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from seglogfs.cleaner import Cleaner
from seglogfs.cleaner_config import CleanerConfig
from seglogfs.config import LogConfig
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord

FUSERMOUNT = shutil.which("fusermount3") or "/usr/bin/fusermount3"

VALUE = 100


def build(data_dir: Path, records: int, keys: int, cfg: LogConfig, batch_size: int = 1000) -> int:
    """The log, rolled so that every record is in a sealed segment; returns its sealed bytes."""
    with LogManager(data_dir, cfg) as manager:
        lg = manager.create_log("bench-0")
        value = b"v" * VALUE
        for start in range(0, records, batch_size):
            batch = [
                ProducerRecord(key=b"key-%08d" % (i % keys), value=value)
                for i in range(start, min(start + batch_size, records))
            ]
            lg.append(batch)
        lg.roll()
        return sum(s.size for s in lg.segments[:-1])


def copy_with_cp(log_dir: Path, target: Path) -> float:
    """Seconds cp takes to copy the .log files."""
    target.mkdir()
    files = sorted(str(p) for p in log_dir.glob("*.log"))
    start = time.perf_counter()
    subprocess.run(["cp", *files, str(target)], check=True)
    subprocess.run(["sync", "-f", str(target)], check=True)
    return time.perf_counter() - start


def _mounted(mount: Path) -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == str(mount) for line in f)


def mount_latency(
    data_dir: Path, root: Path, records: int, timeout_s: float = 600.0
) -> tuple[list[float], int]:
    """By-offset read latencies (s) through a seglogd mount of ``data_dir`` while its cleaner cleans
    the log, and how many of the reads were ENOENT (cleaned offsets)."""
    import yaml

    mount = root / "mnt"
    mount.mkdir()
    config = root / "seglogd.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": str(data_dir), "mount_point": str(mount),
        "defaults": {"log.cleaner.backoff.ms": "100ms"},
        "logs": {"bench-0": {"cleanup.policy": "compact", "segment.bytes": "256MiB"}},
    }))
    stderr = root / "seglogd.stderr"
    with open(stderr, "wb") as err:
        daemon = subprocess.Popen([sys.executable, "-m", "seglogd", "--config", str(config)],
                                  stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    latencies: list[float] = []
    missing = 0
    try:
        deadline = time.monotonic() + 60
        while not _mounted(mount) and time.monotonic() < deadline:
            time.sleep(0.05)
        by_offset = mount / "bench-0" / "by-offset"
        rng = random.Random(7)
        deadline = time.monotonic() + timeout_s
        while b"cleaned log bench-0" not in stderr.read_bytes() and time.monotonic() < deadline:
            path = by_offset / str(rng.randrange(records))
            start = time.perf_counter()
            try:
                with open(path, "rb") as f:
                    f.read()
            except FileNotFoundError:
                missing += 1
            latencies.append(time.perf_counter() - start)
    finally:
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        if _mounted(mount):
            subprocess.run([FUSERMOUNT, "-uz", str(mount)], check=False)
    return latencies, missing


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="records per appended batch")
    parser.add_argument("--dedupe-buffer", default="128MiB")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir))
    cfg = LogConfig.from_mapping({"cleanup.policy": "compact", "segment.bytes": "256MiB"})
    cleaner = CleanerConfig.from_mapping({"log.cleaner.dedupe.buffer.size": args.dedupe_buffer})
    try:
        data_dir = root / "data"
        size = build(data_dir, args.records, args.keys, cfg, args.batch)
        cp_s = copy_with_cp(data_dir / "bench-0", root / "cp")
        served, traced = root / "served", root / "traced"
        shutil.copytree(data_dir, served)  # uncleaned, for the mount row
        shutil.copytree(data_dir, traced)  # uncleaned, for the memory row
        with LogManager(data_dir, cfg, cleaner_config=cleaner) as manager:
            start = time.perf_counter()
            result = manager.clean_once()
            clean_s = time.perf_counter() - start
        # The same clean again on a copy, traced: tracemalloc slows every allocation, so the timed
        # clean above runs without it.
        with LogManager(traced, cfg, cleaner_config=cleaner) as manager:
            tracemalloc.start()
            start = time.perf_counter()
            manager.clean_once()
            traced_s = time.perf_counter() - start
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            map_bytes = manager.cleaner.peak_map_bytes
        shutil.rmtree(traced)
        assert result is not None
        mb = size / 1e6
        print(f"records {args.records:,} over {args.keys:,} keys, {mb:,.1f} MB in sealed segments")
        print(f"cp:        {cp_s:7.2f} s  {mb / cp_s:8.1f} MB/s")
        print(f"clean:     {clean_s:7.2f} s  {mb / clean_s:8.1f} MB/s  = {cp_s / clean_s:.2f}x cp")
        print(
            f"result:    {result.segments_in} segments -> {result.segments_out}, "
            f"{result.bytes_in:,} -> {result.bytes_out:,} bytes, {result.records_removed:,} records removed"
        )
        budget = cleaner.dedupe_buffer_size / 2**20
        windows = Cleaner(cleaner.map_bytes_per_thread, io_buffer_size=cleaner.io_buffer_size)
        print(
            f"memory:    budget (log.cleaner.dedupe.buffer.size) {budget:,.1f} MiB = offset map "
            f"{windows.map_memory / 2**20:,.1f} MiB + windows {windows.window_memory / 2**20:,.1f} MiB "
            f"({windows.window_bytes / 2**20:g} MiB windows)"
        )
        print(
            f"           peak traced during the same clean of a copy {peak / 2**20:,.1f} MiB = "
            f"{peak / 2**20 / budget:.0%} of the budget; map table {map_bytes / 2**20:,.1f} MiB + the rest "
            f"{(peak - map_bytes) / 2**20:,.1f} MiB (that clean, traced: {traced_s:.2f} s)"
        )
        latencies, missing = mount_latency(served, root, args.records)
        ms = sorted(x * 1000 for x in latencies)
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else float("nan")
        print(
            f"mount:     by-offset reads while seglogd's cleaner runs: {len(ms):,} reads "
            f"({missing:,} ENOENT), p50 {statistics.median(ms) if ms else float('nan'):.2f} ms, "
            f"p99 {p99:.2f} ms, max {ms[-1] if ms else float('nan'):.2f} ms (target p99 < 50 ms)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

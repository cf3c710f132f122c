"""Daemon memory with many segments (docs/performance.md section 4: < 150 MB RSS with 1000 segments).

    .venv/bin/python bench/daemon_memory.py [--segments 1000]

Builds a log of N segments with the engine, starts a real seglogd on it, then uses the mount the way
people do (ls of every directory, `records` size, random by-offset reads across all segments, the
`info` file, reading every segment file) and prints the daemon's RSS and peak RSS next to the same
daemon on an empty data dir. Always unmounts and stops the daemon.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuse import start_daemon, stop_daemon

from seglogfs.config import LogConfig
from seglogfs.log import Log

SEGMENT_BYTES = 64 * 1024


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of ``pid`` in MB, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def build_log(directory: Path, segments: int) -> int:
    cfg = LogConfig.from_mapping({"segment.bytes": SEGMENT_BYTES})
    log = Log.open(directory, cfg, create=True)
    values = [b"%099d" % i for i in range(500)]  # ~53 KB a batch: one batch a segment
    while len(log.segments) < segments:
        log.append_values(values)
    end = log.end_offset
    log.close()
    return end


def exercise(mount: Path, end: int) -> None:
    log_dir = mount / "bench-0"
    for sub in ("", "by-offset", "segments"):
        os.listdir(log_dir / sub)
    os.stat(log_dir / "records")
    (log_dir / "info").read_bytes()
    rng = random.Random(7)
    for _ in range(5000):
        (log_dir / "by-offset" / str(rng.randrange(end))).read_bytes()
    for name in os.listdir(log_dir / "segments"):
        if name.endswith(".log"):
            (log_dir / "segments" / name).read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--segments", type=int, default=1000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="seglog-mem-") as tmp:
        empty = Path(tmp) / "empty"
        empty.mkdir()
        proc, mount = start_daemon(empty, f"{SEGMENT_BYTES}")
        try:
            rows.append(("seglogd, one empty log", *rss_mb(proc.pid)))
        finally:
            stop_daemon(proc, mount)

        base = Path(tmp) / "full"
        (base / "data").mkdir(parents=True)
        end = build_log(base / "data" / "bench-0", args.segments)
        proc, mount = start_daemon(base, f"{SEGMENT_BYTES}")
        try:
            rows.append((f"seglogd, {args.segments} segments, after start", *rss_mb(proc.pid)))
            exercise(mount, end)
            rows.append((f"seglogd, {args.segments} segments, after using every file", *rss_mb(proc.pid)))
        finally:
            stop_daemon(proc, mount)
    width = max(len(r[0]) for r in rows)
    print("seglogd memory (target: < 150 MB RSS with 1000 segments)")
    for name, rss, peak in rows:
        print(f"  {name:<{width}}  RSS {rss:6.1f} MB   peak {peak:6.1f} MB")


if __name__ == "__main__":
    main()

"""Engine benchmark, side by side in one run (this machine is noisy: compare ratios, not absolutes).

    .venv/bin/python bench/engine.py [--records 10000000] [--reopen-gb 10] [--dir /tmp/x]

Prints: append records/s and MB/s (100-byte values, batches of 1000) next to writing the same bytes
to a plain file; random offset lookups/s at 10^4, 10^6 and 10^7 records (locating the batch, and
reading the record); time lookups/s; the reopen time of a cleanly closed multi-GB log; peak RSS.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import tempfile
import time
from pathlib import Path

from seglogfs.config import LogConfig
from seglogfs.log import Log
from seglogfs.log_manager import LogManager

BATCH = 1000
VALUE = 100


def timed(fn, repeat: int) -> float:
    """Calls per second of fn over ``repeat`` calls."""
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return repeat / (time.perf_counter() - start)


def bench_append(directory: Path, batches: int) -> tuple[float, float, float]:
    """(engine records/s, engine MB/s, plain-file MB/s) for the same bytes."""
    values = [bytes([65 + i % 26]) * VALUE for i in range(BATCH)]
    log = Log.open(directory / "append-0", LogConfig(), create=True)
    start = time.perf_counter()
    for _ in range(batches):
        log.append_values(values)
    engine_s = time.perf_counter() - start
    size = log.size_bytes
    log.close()
    payload = b"".join(values)
    start = time.perf_counter()
    with open(directory / "plain.bin", "wb", buffering=0) as f:
        for _ in range(batches):
            f.write(payload)
    plain_s = time.perf_counter() - start
    records = batches * BATCH
    return records / engine_s, size / engine_s / 1e6, len(payload) * batches / plain_s / 1e6


def bench_lookups(log: Log, probes: int) -> tuple[float, float, float]:
    """(batch lookups/s, record reads/s, time lookups/s) at random offsets / timestamps."""
    rng = random.Random(1)
    end = log.end_offset
    offsets = [rng.randrange(end) for _ in range(probes)]
    it = iter(offsets)
    locate = timed(lambda: log.lookup(next(it)), probes)
    it = iter(offsets)
    read = timed(lambda: log.read(next(it)), probes)
    first, last = log.segments[0].rolling_based_timestamp, log.last_timestamp or 0
    stamps = iter([rng.randrange(first, last + 1) for _ in range(probes)])
    by_time = timed(lambda: log.offset_for_timestamp(next(stamps)), probes)
    return locate, read, by_time


# Over 60 lines on purpose: one linear script of measurements, printed in the order it runs them.
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000, help="largest log for lookups")
    parser.add_argument("--reopen-gb", type=float, default=10.0, help="size of the log reopened cleanly")
    parser.add_argument("--probes", type=int, default=20_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="seglog-bench-", dir=args.dir))
    rows: list[tuple[str, str]] = []
    try:
        rec_s, mb_s, plain_mb_s = bench_append(root, batches=2000)
        rows += [
            ("append, 100 B values, batches of 1000", f"{rec_s:,.0f} records/s  ({mb_s:,.0f} MB/s)"),
            (
                "plain file write of the same values",
                f"{plain_mb_s:,.0f} MB/s  (engine = {mb_s / plain_mb_s:.0%})",
            ),
        ]
        shutil.rmtree(root / "append-0")
        (root / "plain.bin").unlink()

        # One log grown to 10^4, 10^6, 10^7 records, measured at each size (4 KiB index interval).
        manager = LogManager(root / "data", LogConfig())
        log = manager.create_log("lookups-0")
        values = [b"%099d" % i for i in range(BATCH)]
        results = {}
        ts = 1_700_000_000_000
        for target in (10_000, 1_000_000, args.records):
            while log.end_offset < target:
                log.append_values(values, timestamp_ms=ts)
                ts += 10
            log._invalidate_cache()  # every size starts with a cold record cache
            results[target] = bench_lookups(log, args.probes)
        base = results[10_000]
        for target, (locate, read, by_time) in results.items():
            rows.append(
                (
                    f"random offset lookups at {target:,} records",
                    f"{locate:,.0f}/s locate batch ({base[0] / locate:.2f}x the time at 10^4); "
                    f"{read:,.0f}/s read record; {by_time:,.0f}/s by timestamp",
                )
            )

        # Grow to the reopen size with large segments, close cleanly, reopen.
        big = [b"x" * 1000] * 1000
        target_bytes = int(args.reopen_gb * 1e9)
        while log.size_bytes < target_bytes:
            log.append_values(big, timestamp_ms=ts)
            ts += 10
        size, segments = log.size_bytes, len(log.segments)
        manager.close()
        start = time.perf_counter()
        manager = LogManager(root / "data", LogConfig())
        reopen_s = time.perf_counter() - start
        reopened = manager.get("lookups-0")
        assert reopened.size_bytes == size
        rows.append((f"clean reopen of {size / 1e9:.1f} GB ({segments} segments)", f"{reopen_s:.3f} s"))
        manager.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows.append(("peak RSS of this process", f"{rss_mb:,.0f} MB"))
    width = max(len(r[0]) for r in rows)
    print(f"seglogfs engine benchmark ({os.cpu_count()} cores)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    main()

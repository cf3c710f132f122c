"""Engine benchmark, side by side in one run (this machine is noisy: compare ratios, not absolutes).

    .venv/bin/python bench/engine.py [--records 10000000] [--reopen-gb 10] [--dir /tmp/x]

Prints: append records/s and MB/s (100-byte values, batches of 1000) next to writing the same bytes
to a plain file; random offset lookups/s at 10^4, 10^6 and 10^7 records (locating the batch, and
reading the record); time lookups/s, beside the same search without its damage checks; the reopen
time of a cleanly closed multi-GB log;
``Log.iter_records`` under read_committed against read_uncommitted over a log of ``--txn-records``
records with 1% of them in aborted transactions (docs/performance.md section 1); peak RSS.
"""

from __future__ import annotations

import argparse
import functools
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
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED
from seglogfs.records import ProducerRecord, encode_batch, encode_values
from seglogfs.records.batch_header import stamp_v2_crc
from seglogfs.timestamp_search import _first_at_or_after

BATCH = 1000
VALUE = 100


def timed(fn, repeat: int) -> float:
    """Calls per second of fn over ``repeat`` calls."""
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return repeat / (time.perf_counter() - start)


def timed_over(fn, args: list) -> float:
    """Calls per second of fn over one call per item of ``args``."""
    start = time.perf_counter()
    for arg in args:
        fn(arg)
    return len(args) / (time.perf_counter() - start)


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


def unchecked_offset_for_timestamp(log: Log, timestamp_ms: int) -> int:
    """The time lookup without its damage checks (no time-index entry confirmed against its batch,
    no answer confirmed by a second lookup): Kafka's search, what the checks are weighed against."""
    for segment in log.segments:
        if segment.max_timestamp < timestamp_ms and segment is not log.segments[-1]:
            continue
        _, indexed = segment.time_index.lookup(timestamp_ms - 1)
        header = segment.find_batch(max(indexed, log.start_offset, segment.base_offset))
        if header is None:
            continue
        for batch in segment.iter_intact_headers(header.position):
            if batch.max_timestamp < timestamp_ms or batch.is_control:
                continue
            found = _first_at_or_after(segment, batch, timestamp_ms, log.start_offset, log._batch_cache)
            if found is not None:
                return found
    raise LookupError(timestamp_ms)


def bench_lookups(log: Log, probes: int) -> tuple[float, float, float, float]:
    """(batch lookups/s, record reads/s, time lookups/s, time lookups/s without the damage checks) at
    random offsets / timestamps."""
    rng = random.Random(1)
    end = log.end_offset
    offsets = [rng.randrange(end) for _ in range(probes)]
    it = iter(offsets)
    locate = timed(lambda: log.lookup(next(it)), probes)
    it = iter(offsets)
    read = timed(lambda: log.read(next(it)), probes)
    first, last = log.segments[0].rolling_based_timestamp, log.last_timestamp or 0
    targets = [rng.randrange(first, last + 1) for _ in range(probes)]
    assert all(log.offset_for_timestamp(t) == unchecked_offset_for_timestamp(log, t) for t in targets[:200])
    by_time = unchecked = 0.0
    checked_search = functools.partial(log.offset_for_timestamp)
    unchecked_search = functools.partial(unchecked_offset_for_timestamp, log)
    for _ in range(2):  # alternating, best of two each: neither runs on a colder cache
        by_time = max(by_time, timed_over(checked_search, targets))
        unchecked = max(unchecked, timed_over(unchecked_search, targets))
    return locate, read, by_time, unchecked


TRANSACTIONAL, CONTROL = 0x10, 0x20  # batch attribute bits
V2_HEADER = 61  # bytes of a v2 batch header; producerId at 43, epoch at 51, baseSequence at 53


def _as_producer_batch(batch: bytes, base_offset: int, producer_id: int, attributes: int) -> bytes:
    """``batch`` moved to ``base_offset``, given a producer id and attribute bits, CRC restamped."""
    out = bytearray(batch)
    out[0:8] = base_offset.to_bytes(8, "big", signed=True)
    out[21:23] = (int.from_bytes(out[21:23], "big") | attributes).to_bytes(2, "big")
    out[43:51] = producer_id.to_bytes(8, "big", signed=True)
    out[51:53] = (0).to_bytes(2, "big")
    header = bytearray(out[:V2_HEADER])
    stamp_v2_crc(header, bytes(out[V2_HEADER:]))
    return bytes(header + out[V2_HEADER:])


def build_aborted_log(directory: Path, records: int) -> int:
    """A broker-shaped log of ``records`` 100-byte records in batches of 1000: every 100th batch is a
    transaction that an ABORT marker ends (1% of the records aborted). Written as one
    segment file, then recovered (an unclean open), which builds its indexes and ``.txnindex``."""
    directory.mkdir(parents=True)
    template = encode_values([b"%099d" % i for i in range(BATCH)], 0, 1_700_000_000_000)
    abort = ProducerRecord(key=b"\0\0\0\0", value=b"\0\0\0\0\0\0")  # key: version 0, type ABORT
    marker = encode_batch([abort], 0, now_ms=1_700_000_000_000)
    offset, aborted = 0, 0
    with open(directory / f"{0:020d}.log", "wb") as out:
        for i in range(records // BATCH):
            if i % 100 == 99:
                pid = 1000 + i
                out.write(_as_producer_batch(template, offset, pid, TRANSACTIONAL))
                out.write(_as_producer_batch(marker, offset + BATCH, pid, TRANSACTIONAL | CONTROL))
                offset += BATCH + 1
                aborted += BATCH
            else:
                out.write(bytes(offset.to_bytes(8, "big")) + template[8:])
                offset += BATCH
    Log.open(directory, LogConfig()).close()  # no clean-shutdown marker: recovery builds the rest
    return aborted


def bench_read_committed(root: Path, records: int) -> tuple[str, str]:
    """Records/s of iter_records under read_committed and read_uncommitted, best of 2 each, alternating."""
    aborted = build_aborted_log(root / "txn-0", records)
    log = Log.open(root / "txn-0", LogConfig(), clean_shutdown=True)
    try:
        best = {READ_UNCOMMITTED: 0.0, READ_COMMITTED: 0.0}
        counts = {}
        for _ in range(2):
            for isolation in best:
                start = time.perf_counter()
                counts[isolation] = sum(1 for _ in log.iter_records(isolation=isolation))
                best[isolation] = max(best[isolation], counts[isolation] / (time.perf_counter() - start))
        assert counts[READ_UNCOMMITTED] - counts[READ_COMMITTED] == aborted
    finally:
        log.close()
    ratio = best[READ_COMMITTED] / best[READ_UNCOMMITTED]
    return (
        f"iter_records over {records:,} records, 1% in aborted transactions",
        f"read_committed {best[READ_COMMITTED]:,.0f}/s, read_uncommitted {best[READ_UNCOMMITTED]:,.0f}/s "
        f"= {ratio:.2f}x (target >= 0.8x)",
    )


# Over 60 lines on purpose: one linear script of measurements, printed in the order it runs them.
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000, help="largest log for lookups")
    parser.add_argument("--reopen-gb", type=float, default=10.0, help="size of the log reopened cleanly")
    parser.add_argument("--probes", type=int, default=20_000)
    parser.add_argument("--txn-records", type=int, default=10_000_000, help="log for read_committed")
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
        for target, (locate, read, by_time, unchecked) in results.items():
            rows.append(
                (
                    f"random offset lookups at {target:,} records",
                    f"{locate:,.0f}/s locate batch ({base[0] / locate:.2f}x the time at 10^4); "
                    f"{read:,.0f}/s read record; {by_time:,.0f}/s by timestamp "
                    f"({by_time / unchecked:.2f}x of {unchecked:,.0f}/s without the damage checks)",
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
        shutil.rmtree(root / "data")
        rows.append(bench_read_committed(root, args.txn_records))
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

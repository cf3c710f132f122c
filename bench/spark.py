"""Spark batch read throughput: the ``seglog`` source vs Spark's JSON-lines reader vs the engine.

    python bench/spark.py [--records 10000000] [--value-bytes 100] [--master local[2]] [--dir DIR]

One run on ``local[2]`` (by default) over the same N records:

1. ``seglog``: ``spark.read.format("seglog").load(log_dir)``;
2. JSON lines: ``spark.read.schema(...).json(file)`` over the same records, one per line, in the
   ``append.jsonl`` format (value text + timestamp);
3. the engine's single-process iterator ``Log.iter_records`` (no Spark).

Both Spark queries compute ``count(*), sum(length(value))``, so every value is really read (a bare
``count()`` lets the JSON reader skip parsing). Each Spark reader gets one small warm-up query first
(the session's first Python data source query pays a few seconds of worker start-up). Targets:
seglog >= 1,000,000 records/s and >= 2x the JSON-lines read. Prints a table and returns the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET_RATE = 1_000_000
TARGET_RATIO = 2.0
BATCH = 1000
T0 = 1_700_000_000_000


def _values(start: int, count: int, size: int) -> list[bytes]:
    filler = b"x" * max(size - 12, 0)
    return [(b"%012d" % i + filler)[:size] for i in range(start, start + count)]


def build_inputs(root: Path, records: int, value_bytes: int) -> tuple[Path, Path]:
    """The log (engine appends of 1000-record batches) and the equivalent JSON-lines file."""
    from seglogfs.config import LogConfig
    from seglogfs.log import Log

    log_dir = root / "data" / "bench-0"
    jsonl = root / "records.jsonl"
    marker = root / f"ready-{records}-{value_bytes}"
    if marker.exists():
        return log_dir, jsonl
    shutil.rmtree(root / "data", ignore_errors=True)
    started = time.perf_counter()
    with (
        Log.open(log_dir, LogConfig.from_mapping({"segment.bytes": "256MiB"}), create=True) as log,
        open(jsonl, "wb") as out,
    ):
        for start in range(0, records, BATCH):
            n = min(BATCH, records - start)
            values = _values(start, n, value_bytes)
            ts = T0 + start
            log.append_values(values, timestamp_ms=ts)
            out.write(b"".join(b'{"value":"%s","timestamp":%d}\n' % (v, ts) for v in values))
    marker.touch()
    print(f"built {records:,} records in {time.perf_counter() - started:.1f} s under {root}", file=sys.stderr)
    return log_dir, jsonl


def time_engine(log_dir: Path) -> tuple[float, int]:
    """Seconds and records for Log.iter_records over the whole log, in this process."""
    from seglogfs.log import Log

    with Log.open(log_dir, read_only=True) as log:
        started = time.perf_counter()
        n = 0
        for _ in log.iter_records():
            n += 1
        return time.perf_counter() - started, n


# Over 60 lines on purpose: each measurement side by side with its baseline, in the order printed.
def run(
    records: int = 10_000_000,
    value_bytes: int = 100,
    master: str = "local[2]",
    directory: str | None = None,
    min_partitions: int | None = None,
) -> dict[str, float]:
    """Build the inputs, time the three readers, print a table; returns the measured figures."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = Path(directory) if directory else Path(tempfile.gettempdir()) / "seglogfs-bench-spark"
    root.mkdir(parents=True, exist_ok=True)
    log_dir, jsonl = build_inputs(root, records, value_bytes)

    from pyspark.sql import SparkSession

    import seglogfs.spark

    jvm_flags = "-XX:+UseParallelGC"
    spark = (
        SparkSession.builder.master(master)
        .appName("seglogfs-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.extraJavaOptions", jvm_flags)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    seglogfs.spark.register(spark)
    cores = spark.sparkContext.defaultParallelism
    parts = str(min_partitions or cores * 4)
    query = ("count(*) as n", "sum(length(value)) as bytes")
    try:
        # warm-ups: start the Python workers and the JVM code paths of both readers
        spark.read.format("seglog").option("endingOffsets", '{"bench-0": 10000}').load(
            str(log_dir)
        ).selectExpr(*query).collect()
        schema = "value string, timestamp long"
        spark.read.schema(schema).json(str(jsonl)).limit(10000).selectExpr(*query).collect()

        started = time.perf_counter()
        row = (
            spark.read.format("seglog")
            .option("minPartitions", parts)
            .load(str(log_dir))
            .selectExpr(*query)
            .collect()[0]
        )
        seglog_s = time.perf_counter() - started
        assert row.n == records and row.bytes == records * value_bytes, row

        started = time.perf_counter()
        row = spark.read.schema(schema).json(str(jsonl)).selectExpr(*query).collect()[0]
        json_s = time.perf_counter() - started
        assert row.n == records and row.bytes == records * value_bytes, row
    finally:
        spark.stop()
    engine_s, n = time_engine(log_dir)
    assert n == records

    figures = {
        "records": float(records),
        "seglog_seconds": seglog_s,
        "seglog_records_per_s": records / seglog_s,
        "jsonl_seconds": json_s,
        "jsonl_records_per_s": records / json_s,
        "engine_seconds": engine_s,
        "engine_records_per_s": records / engine_s,
        "seglog_vs_jsonl": json_s / seglog_s,
    }
    rows = [
        ("seglog source (Spark, " + master + ")", seglog_s, records / seglog_s),
        ("JSON lines (Spark, " + master + ")", json_s, records / json_s),
        ("engine Log.iter_records (1 process)", engine_s, records / engine_s),
    ]
    print(f"\nSpark batch read of {records:,} records of {value_bytes} bytes")
    print(f"{'reader':<40} {'seconds':>9} {'records/s':>14}")
    for name, secs, rate in rows:
        print(f"{name:<40} {secs:>9.2f} {rate:>14,.0f}")
    ok_rate = figures["seglog_records_per_s"] >= TARGET_RATE
    ok_ratio = figures["seglog_vs_jsonl"] >= TARGET_RATIO
    print(
        f"\nseglog / JSON lines: {figures['seglog_vs_jsonl']:.2f}x (target >= {TARGET_RATIO}x: "
        f"{'met' if ok_ratio else 'NOT met'}); seglog rate target >= {TARGET_RATE:,}/s: "
        f"{'met' if ok_rate else 'NOT met'}"
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", "-n", type=int, default=10_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", help="where to build (and cache) the inputs (default: $TMPDIR)")
    parser.add_argument("--min-partitions", type=int, help="seglog tasks (default: 4 per core)")
    parser.add_argument("--json", help="write the figures to this JSON file too")
    args = parser.parse_args(argv)
    figures = run(args.records, args.value_bytes, args.master, args.dir, args.min_partitions)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

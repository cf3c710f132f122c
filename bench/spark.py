"""Spark batch read throughput of the ``seglog`` source, side by side with its baselines, in one run.

    python bench/spark.py [--records 10000000] [--value-bytes 100] [--master local[2]] [--dir DIR]
                          [--repeat 1] [--json FILE]

Over the same N records (engine appends of 1000-record batches; value i is ``%012d`` of i padded with
``x``), every row runs one query, ``selectExpr("count(*)", "sum(length(value))")`` (a count and the
total value bytes in one job, so every value is really produced; a bare ``count()`` would let the JSON
reader skip parsing):

1. no-op floor: a Python data source (in this file) that yields one prebuilt 65,536-row Arrow batch
   of the full Kafka schema over and over, in as many tasks as ``seglog`` plans: the floor of any
   Python source;
2. JSON lines: ``spark.read.schema("value string, timestamp long").json(file)`` over the same records;
3. ``seglog``, full Kafka schema: ``spark.read.format("seglog").load(log)``;
4. ``seglog`` pruned: the same with ``.schema("offset bigint, value binary")``;
5. ``seglog`` with ``startingTimestamp`` at the last 1% of the records (full schema, no
   ``minPartitions``), with the bytes its planned tasks scan (their byte ranges) next to the full
   scan's.

Rows 3 and 4 use ``minPartitions`` = 4 per core (``--min-partitions``). Two more no-op rows give the
floors of rows 4 and 5: the no-op source with the pruned schema, and with 1% of the records in as
many tasks as row 5.

Each reader gets one small warm-up query first (a session's first Python-source query pays seconds of
worker start-up); with ``--repeat k`` each figure is the best of k runs. Prints a table and the
issue's targets, met or not; returns the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BATCH = 1000
T0 = 1_700_000_000_000
NOOP_BATCH_ROWS = 65_536
QUERY = ("count(*) as n", "sum(length(value)) as bytes")
PRUNED = "offset bigint, value binary"
JSON_SCHEMA = "value string, timestamp long"


def _values(start: int, count: int, size: int) -> list[bytes]:
    filler = b"x" * max(size - 12, 0)
    return [(b"%012d" % i + filler)[:size] for i in range(start, start + count)]


def build_inputs(root: Path, records: int, value_bytes: int) -> tuple[Path, Path]:
    """The log (engine appends of 1000-record batches) and the equivalent JSON-lines file.

    Batch b (records b*1000..) has timestamp T0 + b*1000 ms: record i is at about T0 + i ms.
    """
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


def noop_source_class():  # -> type[DataSource], defined late: pyspark is imported after PYSPARK_PYTHON
    """A Python source yielding one prebuilt full-Kafka-schema batch over and over (the floor)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class NoopReader(DataSourceReader):
        def __init__(self, options: dict[str, str], names: list[str]) -> None:
            self.names = names
            self.records = int(options["records"])
            self.tasks = int(options["tasks"])
            self.value_bytes = int(options["valuebytes"])

        def partitions(self) -> list[InputPartition]:
            share = -(-self.records // self.tasks)
            return [InputPartition(min(share, self.records - i * share)) for i in range(self.tasks)]

        def read(self, partition: InputPartition) -> Iterator:
            import pyarrow as pa

            from seglogfs.spark.schema import arrow_schema

            n = NOOP_BATCH_ROWS
            value = pa.array([b"v" * self.value_bytes] * n, pa.binary())
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.nulls(n, pa.binary()),
                    value,
                    pa.repeat(pa.scalar("bench", pa.string()), n),
                    pa.repeat(pa.scalar(0, pa.int32()), n),
                    pa.array(range(n), pa.int64()),
                    pa.array([T0 * 1000] * n, pa.int64()).view(pa.timestamp("us", tz="UTC")),
                    pa.repeat(pa.scalar(0, pa.int32()), n),
                ],
                schema=arrow_schema(False),
            ).select(self.names)
            left = partition.value
            while left > 0:
                yield batch if left >= n else batch.slice(0, left)
                left -= n

    class NoopSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "seglog_noop"

        def schema(self):
            from seglogfs.spark.schema import spark_schema

            return spark_schema(False)

        def reader(self, schema) -> DataSourceReader:
            return NoopReader(self.options, schema.names)

    return NoopSource


def planned_bytes(options: dict[str, str]) -> tuple[int, int]:
    """(tasks, bytes they scan) of a seglog batch read planned with ``options``: each task scans its
    segment from its position up to the next task's position in that file, else to the planned end."""
    from seglogfs.spark.source import SeglogDataSource

    source = SeglogDataSource({k.lower(): v for k, v in options.items()})
    tasks = source.reader(source.schema()).partitions()
    by_file: dict[str, list[tuple[int, int]]] = {}
    for t in tasks:
        by_file.setdefault(t.log_path, []).append((t.position, t.end_position))
    scanned = 0
    for spans in by_file.values():
        spans.sort()
        ends = [nxt for nxt, _ in spans[1:]] + [spans[-1][1]]
        scanned += sum(end - pos for (pos, _), end in zip(spans, ends, strict=True))
    return len(tasks), scanned


def _session(master: str):
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("seglogfs-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _best(repeat: int, query: Callable[[], object], check: Callable[[object], bool]) -> float:
    """The best wall time of ``repeat`` runs of ``query``; every result must pass ``check``."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        row = query()
        best = min(best, time.perf_counter() - started)
        assert check(row), row
    return best


# Over 60 lines on purpose: each measurement side by side with its baseline, in the order printed.
def run(
    records: int = 10_000_000,
    value_bytes: int = 100,
    master: str = "local[2]",
    directory: str | None = None,
    min_partitions: int | None = None,
    repeat: int = 1,
) -> dict[str, float]:
    """Build the inputs, time the five reads, print a table; returns the measured figures."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = Path(directory) if directory else Path(tempfile.gettempdir()) / "seglogfs-bench-spark"
    root.mkdir(parents=True, exist_ok=True)
    log_dir, jsonl = build_inputs(root, records, value_bytes)

    import seglogfs.spark

    spark = _session(master)
    seglogfs.spark.register(spark)
    spark.dataSource.register(noop_source_class())
    parts = str(min_partitions or spark.sparkContext.defaultParallelism * 4)
    full_opts = {"path": str(log_dir), "minPartitions": parts}
    # The tail as a user writes it: no minPartitions, which would cut its 1% into tasks of a few
    # thousand records, each paying a task's fixed cost.
    tail_opts = {"path": str(log_dir), "startingTimestamp": str(T0 + records * 99 // 100)}
    tasks, full_bytes = planned_bytes(full_opts)
    tail_tasks, tail_bytes = planned_bytes(tail_opts)
    tail_records = records - -(-(records * 99 // 100) // BATCH) * BATCH  # first batch at or after it

    def seglog(opts: dict[str, str], schema: str | None = None):
        reader = spark.read.format("seglog").options(**opts)
        reader = reader.schema(schema) if schema else reader
        return lambda: reader.load().selectExpr(*QUERY).collect()[0]

    every = lambda n: lambda row: row.n == n and row.bytes == n * value_bytes  # noqa: E731
    every_row = every(records)
    noop_opts = {"records": str(records), "tasks": str(tasks), "valueBytes": str(value_bytes)}

    def noop(n: int, schema: str | None = None, tasks: int = tasks):
        opts = {**noop_opts, "records": str(n), "tasks": str(tasks)}
        reader = spark.read.format("seglog_noop").options(**opts)
        reader = reader.schema(schema) if schema else reader
        return lambda: reader.load().selectExpr(*QUERY).collect()[0]

    json_read = lambda: spark.read.schema(JSON_SCHEMA).json(str(jsonl))  # noqa: E731
    try:
        # warm-ups: start the Python workers and the JVM code paths of each reader
        seglog({**full_opts, "endingOffsets": '{"bench-0": 10000}'})()
        noop(10_000)()
        json_read().limit(10_000).selectExpr(*QUERY).collect()
        times = {
            "noop": _best(repeat, noop(records), every_row),
            "noop_pruned": _best(repeat, noop(records, PRUNED), every_row),
            "noop_tail": _best(repeat, noop(tail_records, tasks=tail_tasks), every(tail_records)),
            "jsonl": _best(repeat, lambda: json_read().selectExpr(*QUERY).collect()[0], every(records)),
            "full": _best(repeat, seglog(full_opts), every(records)),
            "pruned": _best(repeat, seglog(full_opts, PRUNED), every(records)),
            "tail": _best(repeat, seglog(tail_opts), every(tail_records)),
        }
    finally:
        spark.stop()
    figures = {f"{k}_seconds": v for k, v in times.items()}
    figures |= {
        "records": float(records),
        "full_vs_jsonl": times["jsonl"] / times["full"],
        "full_vs_noop": times["full"] / times["noop"],
        "pruned_vs_jsonl": times["jsonl"] / times["pruned"],
        "pruned_vs_noop_pruned": times["pruned"] / times["noop_pruned"],
        "noop_pruned_vs_jsonl": times["jsonl"] / times["noop_pruned"],
        "tail_vs_noop_tail": times["tail"] / times["noop_tail"],
        "noop_tail_vs_full_time": times["noop_tail"] / times["full"],
        "tail_vs_full_time": times["tail"] / times["full"],
        "tail_vs_full_bytes": tail_bytes / full_bytes,
        "full_bytes": float(full_bytes),
        "tail_bytes": float(tail_bytes),
    }
    _print(figures, times, master, value_bytes, (tasks, tail_tasks))
    return figures


def _print(figures: dict[str, float], times: dict[str, float], master: str, value_bytes: int, tasks) -> None:
    records = int(figures["records"])
    names = {
        "noop": f"no-op Python source (floor), {tasks[0]} tasks",
        "noop_pruned": f'no-op Python source, .schema("{PRUNED}")',
        "noop_tail": f"no-op Python source, 1% of the records, {tasks[1]} tasks",
        "jsonl": "JSON lines (spark.read.json)",
        "full": f"seglog, full Kafka schema, {tasks[0]} tasks",
        "pruned": f'seglog, .schema("{PRUNED}")',
        "tail": f"seglog, startingTimestamp: last 1%, {tasks[1]} tasks",
    }
    print(f"\nSpark ({master}) count(*), sum(length(value)) over {records:,} records of {value_bytes} bytes")
    print(f"{'read':<62} {'seconds':>8} {'records/s':>12}")
    for key, name in names.items():
        n = records if "tail" not in key else records // 100
        print(f"{name:<62} {times[key]:>8.2f} {n / times[key]:>12,.0f}")
    tail_time = figures["tail_vs_full_time"]
    checks = [
        ("full >= 1.5x JSON lines", figures["full_vs_jsonl"], figures["full_vs_jsonl"] >= 1.5),
        ("full within 1.5x of the no-op floor", figures["full_vs_noop"], figures["full_vs_noop"] <= 1.5),
        ("pruned >= 2.5x JSON lines", figures["pruned_vs_jsonl"], figures["pruned_vs_jsonl"] >= 2.5),
        ("last 1%: < 0.1x the full scan's time", tail_time, tail_time < 0.1),
        ("last 1%: ~1% of the bytes", figures["tail_vs_full_bytes"], figures["tail_vs_full_bytes"] < 0.02),
    ]
    print(
        f"\nfloors: pruned {figures['pruned_vs_noop_pruned']:.2f}x its no-op floor (the floor itself is "
        f"{figures['noop_pruned_vs_jsonl']:.2f}x JSON lines); last 1% "
        f"{figures['tail_vs_noop_tail']:.2f}x its no-op floor (the floor itself is "
        f"{figures['noop_tail_vs_full_time']:.3f}x the full scan's time)"
    )
    print(f"bytes planned: full {figures['full_bytes']:,.0f}, last 1% {figures['tail_bytes']:,.0f}")
    for label, ratio, ok in checks:
        print(f"{label:<40} {ratio:6.3f}x  {'met' if ok else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", "-n", type=int, default=10_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", help="where to build (and cache) the inputs (default: $TMPDIR)")
    parser.add_argument("--min-partitions", type=int, help="seglog tasks (default: 4 per core)")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs per read")
    parser.add_argument("--json", help="write the figures to this JSON file too")
    args = parser.parse_args(argv)
    figures = run(args.records, args.value_bytes, args.master, args.dir, args.min_partitions, args.repeat)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

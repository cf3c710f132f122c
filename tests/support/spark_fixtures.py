"""One session-scoped local[2] SparkSession shared by every ``tests/test_spark*.py`` module.

Use it from a test module with ``pytest_plugins = ["support.spark_fixtures"]``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


def build_session(master: str = "local[2]"):  # -> pyspark.sql.SparkSession
    """A fast local SparkSession: no UI, UTC, serial GC + C1 JIT (quicker start on 2 cores)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from support.kafka_broker import spark_kafka_classpath

    jvm_flags = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    builder = SparkSession.builder
    kafka_jars = spark_kafka_classpath()
    if kafka_jars:  # Spark's own format("kafka") source, for tests/oracle/ (docs/oracle.md)
        builder = builder.config("spark.jars", kafka_jars.replace(":", ","))
    spark = (
        builder.master(master)
        .appName("seglogfs-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", jvm_flags)
        .config("spark.executor.extraJavaOptions", jvm_flags)
        .config("spark.sql.pyspark.jvmStacktrace.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """The shared SparkSession with the ``seglog`` source registered."""
    import seglogfs.spark

    session = build_session()
    seglogfs.spark.register(session)
    yield session
    session.stop()


# ------------------------------------------------------------------ engine-built test logs

CODECS = ("uncompressed", "gzip", "snappy", "lz4", "zstd")


def make_log(
    data_dir,
    name: str,
    *,
    codec: str = "uncompressed",
    batches: int = 40,
    per_batch: int = 25,
    segment_bytes: int = 8000,
    index_interval_bytes: int = 400,
    first_timestamp: int = 1_700_000_000_000,
    **config,
):
    """A log written through the engine: several segments, null keys, headers, increasing timestamps.

    Record i of batch b has timestamp first_timestamp + 1000*b + i.
    """
    from pathlib import Path

    from seglogfs.config import LogConfig
    from seglogfs.log import Log

    cfg = LogConfig.from_mapping(
        {
            "segment.bytes": segment_bytes,
            "index.interval.bytes": index_interval_bytes,
            "compression.type": codec,
            **config,
        }
    )
    log_dir = Path(data_dir) / name
    with Log.open(log_dir, cfg, create=True) as log:
        append_records(log, batches, per_batch, first_timestamp)
    return log_dir


def append_records(log, batches: int, per_batch: int, first_timestamp: int = 1_700_000_000_000) -> None:
    """Append ``batches`` batches of ``per_batch`` records to an open, writable Log."""
    from seglogfs.records import ProducerRecord

    for b in range(batches):
        base = log.end_offset
        records = [
            ProducerRecord(
                value=b"value-%d-" % (base + i) + b"x" * ((base + i) % 37),
                key=None if (base + i) % 3 == 0 else b"key-%d" % (base + i),
                headers=[("h1", b"a%d" % i), ("h2", None)] if (base + i) % 4 == 0 else (),
                timestamp=first_timestamp + 1000 * b + i,
            )
            for i in range(per_batch)
        ]
        log.append(records)


def engine_rows(log_dir, start=None, end=None) -> list[tuple]:
    """(offset, key, value, timestamp ms, headers or None) of the engine's own iterator."""
    from seglogfs.log import Log

    with Log.open(log_dir, read_only=True) as log:
        return [
            (r.offset, r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers] or None)
            for r in log.iter_records(start, end)
        ]


def row_tuple(row) -> tuple:
    """A source row (dict from Arrow or a Spark Row) in the shape of :func:`engine_rows`."""
    get = row.__getitem__
    headers = None
    try:
        raw = get("headers")
    except (KeyError, ValueError, IndexError):
        raw = None
    if raw:
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in raw]
    ts = get("timestamp")
    ms = round(ts.timestamp() * 1000)
    key, value = get("key"), get("value")
    return (
        get("offset"),
        None if key is None else bytes(key),
        None if value is None else bytes(value),
        ms,
        headers,
    )


def source_rows(options: dict, *, headers: bool = True) -> tuple[list, list[tuple]]:
    """(partitions, rows) of a batch read done without Spark: DataSource -> reader -> partitions/read."""
    from seglogfs.spark.source import SeglogDataSource

    opts = {k.lower(): str(v) for k, v in options.items()}
    if headers:
        opts.setdefault("includeheaders", "true")
    source = SeglogDataSource(opts)
    reader = source.reader(source.schema())
    parts = reader.partitions()
    rows = []
    for part in parts:
        for batch in reader.read(part):
            rows.extend(row_tuple(r) for r in batch.to_pylist())
    return parts, rows


def stream_to_parquet(stream, out, checkpoint, timeout: float = 120) -> None:
    """Run ``stream`` (a streaming DataFrame) once with Trigger.AvailableNow into Parquet at ``out``,
    checkpointed at ``checkpoint``; fails the test when the query fails."""
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout)
    assert query.exception() is None

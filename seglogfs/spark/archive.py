"""``seglogfs spark export PATH --output DIR --incremental``: keep a Parquet copy of every log current.

Each run is a structured-streaming query over the ``seglog`` source with ``Trigger.AvailableNow``:
it exports everything the logs hold when it starts and the previous runs did not, then stops.

- Where a run resumes: the stream offsets (log offsets, ``{"<log>": next_offset}``) in the
  checkpoint ``DIR/_checkpoint``. A fresh output starts at the earliest offset (or ``--start-time`` /
  ``--starting-offsets``); a log created after the first run starts at its earliest offset.
- Exactly once: Spark's file sink records the files of every committed micro-batch in
  ``DIR/_spark_metadata`` and skips a batch it already committed when a killed run's batch is replayed
  from the checkpoint. Spark reading ``DIR`` reads only those files. Files that a killed run wrote
  but never committed are deleted by the next run (before and after its query), so once a run has
  exited 0 every Parquet file under ``DIR`` is committed and any Parquet reader sees each record once.
- Layout: ``DIR/topic=<t>/partition=<p>/date=<yyyy-mm-dd>/part-*.parquet``, the date being the UTC day
  of the record timestamp, whatever the session time zone.
- One set of columns: the first run's ``--include-headers`` choice is kept in
  ``DIR/.seglogfs-export.json``; a later run that chooses otherwise is refused (its files would lack, or
  add, the ``headers`` column, and a plain ``spark.read.parquet(DIR)`` would drop it). An archive
  without that file takes the choice from its Parquet files.
- One run at a time: ``DIR/.seglogfs-export.lock`` (flock, dropped by the kernel when the holder dies).
  The driver JVM of a killed run outlives its Python process for a moment; its pid is kept in
  ``DIR/.seglogfs-export.jvm`` and the next run waits for it to be gone before touching ``DIR``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from seglogfs.errors import LogLockedError
from seglogfs.lock import LogLock

from . import session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

LOCK_FILE = ".seglogfs-export.lock"
JVM_PID_FILE = ".seglogfs-export.jvm"
#: the archive's settings that every run must share (``{"includeHeaders": true}``)
SETTINGS_FILE = ".seglogfs-export.json"
CHECKPOINT_DIR = "_checkpoint"
SINK_LOG_DIR = "_spark_metadata"
PARTITION_COLUMNS = ("topic", "partition", "date")
#: seconds a run waits for the driver JVM of a killed predecessor to exit
JVM_EXIT_WAIT = 60.0


@dataclass(frozen=True)
class IncrementalExport:
    """One run's request: the logs to read (``path`` and the ``seglog`` source's selections, as the
    ``seglogfs spark export`` options of the same names) and the archive ``output`` to keep current."""

    path: str
    output: str
    master: str = "local[*]"
    logs: str | None = None
    topics: str | None = None
    start_time: str | None = None  # epoch ms or ISO-8601, for a first run
    starting_offsets: str | None = None  # "earliest" or JSON, for a first run
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    isolation: str | None = None  # read_uncommitted (default) or read_committed
    include_headers: bool = False
    fail_on_data_loss: bool = True


class ExportError(RuntimeError):
    """An incremental export that cannot run as asked (the message says why and what to do)."""


# ------------------------------------------------------------------------------------ the output dir


def _jvm_alive(pid: int) -> bool:
    """True while ``pid`` is a running Spark driver JVM (a reused pid of another program is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"org.apache.spark.deploy.SparkSubmit" in cmdline


def wait_for_previous_jvm(output: Path, timeout: float = JVM_EXIT_WAIT) -> None:
    """Wait until the driver JVM recorded by an earlier run is gone; ExportError after ``timeout``."""
    try:
        text = (output / JVM_PID_FILE).read_text().strip()
    except OSError:
        return
    if not text.isdigit() or int(text) == _own_jvm_pid_hint():
        return
    deadline = time.monotonic() + timeout
    while _jvm_alive(int(text)):
        if time.monotonic() > deadline:
            raise ExportError(
                f"the Spark driver of an earlier export into {output} (pid {text}) is still running "
                f"after {timeout:.0f} s: stop it, then run again"
            )
        time.sleep(0.2)


def _own_jvm_pid_hint() -> int | None:
    """Our own driver's pid when this process already runs one (an in-process rerun reuses it)."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return None if sc is None else jvm_pid(sc)


def jvm_pid(sc: object) -> int:
    """The pid of the driver JVM behind a SparkContext."""
    return int(sc._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[attr-defined]


def check_output_is_ours(output: Path) -> None:
    """Refuse an output that holds something other than an incremental export's own files."""
    checkpoint = output / CHECKPOINT_DIR
    ours = {LOCK_FILE, JVM_PID_FILE, SETTINGS_FILE}
    others = sorted(p.name for p in output.iterdir() if p.name not in ours)
    if others and not checkpoint.is_dir():
        raise ExportError(
            f"--output {output} is not empty ({', '.join(others[:3])}...) and has no {CHECKPOINT_DIR}/: "
            "an incremental export needs a new or empty directory, or the output of an earlier one"
        )
    sink_log = output / SINK_LOG_DIR
    has_commits = sink_log.is_dir() and any(p.name[0].isdigit() for p in sink_log.iterdir())
    commits = checkpoint / "commits"
    if not has_commits and commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir()):
        # Every committed batch is in the sink log first: without it, every exported file would be
        # taken for an interrupted run's and deleted.
        raise ExportError(
            f"--output {output}: its checkpoint has committed batches but the sink log {sink_log} "
            "that lists their files is gone, so they cannot be told from an interrupted run's (nothing "
            f"was deleted): restore {SINK_LOG_DIR}/, or export into a new directory"
        )
    offsets = checkpoint / "offsets"
    if has_commits and not (offsets.is_dir() and any(offsets.iterdir())):
        raise ExportError(
            f"--output {output} holds exported batches ({SINK_LOG_DIR}/) but its checkpoint "
            f"{checkpoint} lost its offsets: resuming would skip or repeat records; export into a new "
            "directory"
        )


def _headers_in_files(output: Path) -> bool | None:
    """Whether the archive's Parquet files have a ``headers`` column (None: no file yet)."""
    import pyarrow.parquet as pq

    for top in sorted(output.iterdir()):
        if top.name.startswith(("_", ".")) or not top.is_dir():
            continue
        for path in sorted(top.rglob("part-*.parquet")):
            return "headers" in pq.read_schema(path).names
    return None


def check_same_columns(output: Path, include_headers: bool) -> None:
    """Refuse a run whose ``--include-headers`` differs from the archive's first run (recorded in
    :data:`SETTINGS_FILE`, or seen in its files); record the choice when nothing holds it yet."""
    settings = output / SETTINGS_FILE
    try:
        recorded = bool(json.loads(settings.read_text())["includeHeaders"])
    except FileNotFoundError:
        recorded = _headers_in_files(output)
    except (ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"--output {output}: {settings} is unreadable ({exc}); restore it") from None
    if recorded is not None and recorded != include_headers:
        started = "with" if recorded else "without"
        raise ExportError(
            f"--include-headers: the archive {output} was started {started} it, and every run of an "
            f"archive must write the same columns (else a Parquet reader drops headers); run {started} "
            "--include-headers, or export into a new directory"
        )
    if not settings.exists():
        tmp = settings.with_name(settings.name + ".tmp")
        tmp.write_text(json.dumps({"includeHeaders": include_headers}) + "\n")
        os.replace(tmp, settings)


def committed_files(spark: SparkSession, output: Path, schema: StructType) -> set[Path]:
    """The Parquet files that the file sink's log (``_spark_metadata``) lists as committed."""
    if not (output / SINK_LOG_DIR).is_dir():
        return set()
    # A given schema spares the (empty-log) inference; Spark lists files from the sink log.
    uris = spark.read.schema(schema).parquet(str(output)).inputFiles()
    files = {Path(unquote(urlparse(uri).path)) for uri in uris}
    roots = (output.absolute(), output.resolve())
    elsewhere = [path for path in files if not any(path.is_relative_to(root) for root in roots)]
    if elsewhere:  # never take the files here for uncommitted ones: that would delete the archive
        raise ExportError(
            f"--output {output}: its {SINK_LOG_DIR}/ lists files under another directory (such as "
            f"{elsewhere[0]}): the archive was copied or moved, and Spark's sink log keeps absolute "
            "paths, so it cannot be continued here; export into a new directory, or run at the old path"
        )
    return files


def remove_uncommitted(output: Path, committed: set[Path]) -> list[Path]:
    """Delete the data files (and their ``.crc`` twins) that no committed batch lists; return them."""
    removed: list[Path] = []
    for top in output.iterdir():
        if top.name.startswith(("_", ".")) or not top.is_dir():
            continue
        for root, _dirs, files in os.walk(top, topdown=False):
            for name in files:
                data_name = name[1:-4] if name.startswith(".") and name.endswith(".crc") else name
                path = Path(root) / name
                if data_name.startswith("part-") and Path(root) / data_name not in committed:
                    path.unlink()
                    removed.append(path)
            if not os.listdir(root):
                os.rmdir(root)
    return removed


# ------------------------------------------------------------------------------------ the query


def stream_options(job: IncrementalExport) -> dict[str, str]:
    """The ``seglog`` source options of an incremental export (``path`` apart)."""
    options = {
        "startingOffsets": job.starting_offsets or "earliest",
        "failOnDataLoss": str(bool(job.fail_on_data_loss)).lower(),
        "includeHeaders": str(job.include_headers).lower(),
    }
    for option, value in (
        ("logs", job.logs),
        ("topics", job.topics),
        ("startingTimestamp", job.start_time),
        ("startingOffsetsByTimestampStrategy", "latest" if job.start_time else None),
        ("minPartitions", job.min_partitions),
        ("maxOffsetsPerTrigger", job.max_offsets_per_trigger),
        ("kafka.isolation.level", job.isolation),
    ):
        if value is not None:
            options[option] = str(value)
    return options


def check_source(job: IncrementalExport, output: Path) -> None:
    """Raise the source's own error for a bad PATH, log selection or option now, on the driver, where
    the CLI prints it as one line (from inside the query Spark logs it with two stack traces first)."""
    from .options import lowered
    from .source import SeglogDataSource

    source = SeglogDataSource(lowered({**stream_options(job), "path": job.path}))
    reader = source.streamReader(source.schema())
    reader.reportLatestOffset()  # PATH and the logs selected
    offsets = output / CHECKPOINT_DIR / "offsets"
    if not (offsets.is_dir() and any(offsets.iterdir())):
        reader.initialOffset()  # where a first run starts (a later run resumes from its checkpoint)
        return
    committed = committed_stream_offsets(output)
    if committed is not None and job.fail_on_data_loss:
        reader.check_resume(committed)  # records retention removed before this run could export them


def committed_stream_offsets(output: Path) -> dict | None:
    """The stream offsets (``{"<log>": next offset}``) the checkpoint's last committed micro-batch
    ended at: where the next run starts, replaying any batch after it (None: nothing committed).
    Spark's offset log file: a version line, the batch's metadata, then one line per source."""
    checkpoint = output / CHECKPOINT_DIR
    commits = checkpoint / "commits"
    batches = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    if not batches:
        return None
    lines = (checkpoint / "offsets" / str(max(batches))).read_text().splitlines()
    return json.loads(lines[-1])


def incremental_stream(spark: SparkSession, job: IncrementalExport) -> DataFrame:
    """The seglog stream of ``job.path`` with the ``date`` partition column (UTC day)."""
    from pyspark.sql import functions as F

    stream = spark.readStream.format("seglog").options(**stream_options(job)).load(job.path)
    # From the epoch microseconds, not to_date(): that would use the session time zone.
    day = F.floor(F.unix_micros("timestamp") / F.lit(86_400_000_000)).cast("int")
    return stream.withColumn("date", F.date_from_unix_date(day))


def run_query(stream: DataFrame, output: Path) -> None:
    """Run the AvailableNow query into ``output``, printing each committed micro-batch to stderr."""
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(output / CHECKPOINT_DIR))
        .partitionBy(*PARTITION_COLUMNS)
        .trigger(availableNow=True)
        .queryName("seglogfs-export")
        .start()
    )
    last_batch = -1
    while not query.awaitTermination(1):
        last_batch = _print_progress(query, last_batch)
    _print_progress(query, last_batch)
    error = query.exception()
    if error is not None:
        raise ExportError(f"the export query failed: {error}")
    return query


def _print_progress(query: StreamingQuery, last_batch: int) -> int:
    progress = query.lastProgress
    # A trigger that found nothing new reports the next batch id with 0 rows and commits nothing.
    if progress and progress["batchId"] > last_batch and progress["numInputRows"]:
        print(
            f"[export] batch {progress['batchId']}: {progress['numInputRows']} records",
            file=sys.stderr,
            flush=True,
        )
        return int(progress["batchId"])
    return last_batch


def summarise_new_files(
    spark: SparkSession, output: Path, files: Iterable[Path], schema: StructType
) -> list[tuple]:
    """(topic, partition, records, first offset, last offset) over the given committed files."""
    from pyspark.sql import functions as F

    paths = sorted(str(p) for p in files)
    if not paths:
        return []
    # The schema keeps ``topic`` a string: inferred from the paths, topic=007 would read as 7.
    df = spark.read.schema(schema).option("basePath", str(output)).parquet(*paths)
    rows = (
        df.groupBy("topic", "partition")
        .agg(F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi"))
        .orderBy("topic", "partition")
        .collect()
    )
    return [(r.topic, r.partition, r.n, r.lo, r.hi) for r in rows]


def output_schema(include_headers: bool) -> StructType:
    """The archive's columns: the seglog schema plus the ``date`` partition column."""
    from .schema import spark_schema

    return spark_schema(include_headers).add("date", "date")


# ------------------------------------------------------------------------------------ the command


def run_incremental_export(job: IncrementalExport) -> int:
    """Export what earlier runs did not; print records per log; 0 on success."""
    output = Path(job.output).resolve()
    check_source(job, output)
    output.mkdir(parents=True, exist_ok=True)
    lock = LogLock(output, LOCK_FILE, "export output")
    try:
        lock.acquire()
    except LogLockedError as err:
        raise ExportError(f"another incremental export is running: {err}") from None
    try:
        wait_for_previous_jvm(output)
        check_output_is_ours(output)
        check_same_columns(output, job.include_headers)
        spark, owned = session.make_session(job.master, "seglogfs-export")
        try:
            (output / JVM_PID_FILE).write_text(f"{jvm_pid(spark.sparkContext)}\n")
            return _export(spark, job, output)
        finally:
            if owned:
                spark.stop()
    finally:
        lock.release()


def _export(spark: SparkSession, job: IncrementalExport, output: Path) -> int:
    started = time.monotonic()
    schema = output_schema(job.include_headers)
    before = committed_files(spark, output, schema)
    for path in remove_uncommitted(output, before):
        print(f"[export] removed {path}: written by an interrupted run, never committed", file=sys.stderr)
    run_query(incremental_stream(spark, job), output)
    after = committed_files(spark, output, schema)
    remove_uncommitted(output, after)
    summary = summarise_new_files(spark, output, after - before, schema)
    total = sum(row[2] for row in summary)
    print(f"exported {total} new records to {output} in {time.monotonic() - started:.1f} s")
    for topic, partition, count, first, last in summary:
        print(f"  {topic}-{partition}: {count} records, offsets {first}..{last}")
    if not summary:
        print("  nothing new since the last run")
    return 0

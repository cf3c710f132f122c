"""``seglogfs spark export|verify``: Spark pipeline jobs over seglogfs / Kafka data dirs.

    seglogfs spark export PATH --output DIR [--logs a,b] [--topics t] [--start-time T] [--end-time T]
                          [--starting-offsets JSON] [--ending-offsets JSON] [--include-headers]
                          [--min-partitions N] [--mode errorifexists|overwrite|append]
                          [--isolation read_uncommitted|read_committed]
                          [--no-fail-on-data-loss] [--master URL]
    seglogfs spark export PATH --output DIR --incremental [--max-offsets-per-trigger N] [...]
    seglogfs spark verify PATH... [--master URL] [--parallelism N]

``export`` writes the records of a log, a set of logs or a time range to Parquet, in the ``seglog``
schema (key, value, topic, partition, offset, timestamp, timestampType[, headers]), partitioned by
``topic`` and ``partition``; with ``--incremental`` only what earlier runs did not export, partitioned
by ``topic``, ``partition`` and UTC ``date`` (:mod:`seglogfs.spark.archive`).

``verify`` runs the engine's verifier (:mod:`seglogfs.verifier`: every
batch CRC, every record, every ``.index`` / ``.timeindex`` entry) over many logs in parallel (one
task per log), prints a summary table per log and every problem with its file and byte position,
and exits 1 when anything is wrong.

Both run on ``local[*]`` unless ``--master`` says otherwise, and print progress (tasks done per
stage) to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from seglogfs.verifier import VerifyReport

#: batch-export options that have no meaning for an incremental export
_NOT_INCREMENTAL = {
    "end_time": "--end-time",
    "ending_offsets": "--ending-offsets",
    "mode": "--mode",
}


# ------------------------------------------------------------------------------------ log checks


@dataclass
class LogReport:
    """What ``verify`` found in one log, or in one segment of it (the engine's ``seglogfs.verifier``)."""

    log: str
    path: str  # the log dir, or the segment file
    segments: int = 0
    bytes: int = 0
    batches: int = 0
    records: int = 0
    index_entries: int = 0
    time_index_entries: int = 0
    problems: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, log: str, path: str | Path, report: VerifyReport) -> LogReport:
        """From the verifier's report."""
        return cls(
            log,
            str(path),
            report.segments,
            report.bytes,
            report.batches,
            report.records,
            report.index_entries,
            report.time_index_entries,
            [str(p) for p in report.problems],
        )


def verify_log(paths: Sequence[str]) -> dict[str, Any]:
    """A Spark task: the engine verifier over one log (its dir, or some of its segment files), with
    every record decoded; the LogReport as a dict."""
    from seglogfs.verifier import verify_paths

    first = Path(paths[0])
    log_dir = first if first.is_dir() else first.parent
    report = verify_paths(paths, decode_records=True)
    return asdict(LogReport.of(log_dir.name, log_dir, report))


# ------------------------------------------------------------------------------------ Spark plumbing


class StageProgress:
    """Prints ``[job] stage S: done/total tasks`` to stderr whenever it changes (a daemon thread)."""

    def __init__(self, spark: SparkSession, label: str, interval: float = 0.5) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.label = label
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._last: dict[int, tuple[int, int]] = {}

    def __enter__(self) -> StageProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for stage_id in self.tracker.getActiveStageIds():
                    info = self.tracker.getStageInfo(stage_id)
                    if info is None:
                        continue
                    state = (info.numCompletedTasks, info.numTasks)
                    if self._last.get(stage_id) != state:
                        self._last[stage_id] = state
                        print(
                            f"[{self.label}] stage {stage_id}: {state[0]}/{state[1]} tasks, "
                            f"{info.numActiveTasks} running",
                            file=sys.stderr,
                            flush=True,
                        )
            except Exception:  # the tracker can race with a stopping context; progress is best effort
                pass


# ------------------------------------------------------------------------------------ commands


def check_output_outside(path: str, output: str) -> None:
    """Refuse an ``output`` inside the ``path`` read: the export, and seglogd opening the data dir,
    would take the Parquet directory for a log."""
    data, out = Path(path).resolve(), Path(output).resolve()
    if out.is_relative_to(data):
        raise ValueError(
            f"--output {output} is inside {path}, which is read: seglogd and later exports would take "
            "it for a log; write the Parquet files outside it"
        )


def run_export(args: argparse.Namespace) -> int:
    """Read with the seglog source, write Parquet (``--incremental``: :mod:`.archive`)."""
    check_output_outside(args.path, args.output)
    if args.incremental:
        return _run_incremental_export(args)
    if args.max_offsets_per_trigger is not None:
        raise ValueError("--max-offsets-per-trigger: only valid with --incremental")
    spark, owned = session.make_session(args.master, "seglogfs-export")
    try:
        # A time window over many logs: logs with no record that late contribute nothing.
        reader = (
            spark.read.format("seglog")
            .option("failOnDataLoss", str(not args.no_fail_on_data_loss).lower())
            .option("startingOffsetsByTimestampStrategy", "latest")
        )
        for option, value in (
            ("logs", args.logs),
            ("topics", args.topics),
            ("startingTimestamp", args.start_time),
            ("endingTimestamp", args.end_time),
            ("startingOffsets", args.starting_offsets),
            ("endingOffsets", args.ending_offsets),
            ("minPartitions", args.min_partitions),
            ("kafka.isolation.level", args.isolation),
        ):
            if value is not None:
                reader = reader.option(option, str(value))
        if args.include_headers:
            reader = reader.option("includeHeaders", "true")
        started = time.monotonic()
        df = reader.load(args.path)
        with StageProgress(spark, "export"):
            df.write.mode(args.mode or "errorifexists").partitionBy("topic", "partition").parquet(args.output)
        rows = spark.read.parquet(args.output).count()
        print(f"exported to {args.output}: {rows} records in parquet, {time.monotonic() - started:.1f} s")
        return 0
    finally:
        if owned:
            spark.stop()


def _run_incremental_export(args: argparse.Namespace) -> int:
    """``export --incremental`` (:mod:`.archive`), batch-only options refused."""
    from .archive import IncrementalExport, run_incremental_export

    for attr, flag in _NOT_INCREMENTAL.items():
        if getattr(args, attr) is not None:
            raise ValueError(f"{flag}: not valid with --incremental (each run exports all that is new)")
    return run_incremental_export(
        IncrementalExport(
            path=args.path,
            output=args.output,
            master=args.master,
            logs=args.logs,
            topics=args.topics,
            start_time=args.start_time,
            starting_offsets=args.starting_offsets,
            min_partitions=args.min_partitions,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            isolation=args.isolation,
            include_headers=bool(args.include_headers),
            fail_on_data_loss=not args.no_fail_on_data_loss,
        )
    )


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += [
        "  ".join(
            str(c).rjust(w) if c and str(c)[0].isdigit() else str(c).ljust(w)
            for c, w in zip(r, widths, strict=True)
        )
        for r in rows
    ]
    return "\n".join(out)


def summarise(reports: list[LogReport]) -> tuple[str, int]:
    """(printable summary table plus problems, number of problems)."""
    per_log: dict[str, list[LogReport]] = {}
    for r in reports:
        per_log.setdefault(r.log, []).append(r)
    rows = []
    problems = 0
    for name in sorted(per_log):
        rs = per_log[name]
        n_problems = sum(len(r.problems) for r in rs)
        problems += n_problems
        rows.append(
            [
                name,
                str(sum(r.segments for r in rs)),
                str(sum(r.batches for r in rs)),
                str(sum(r.records for r in rs)),
                str(sum(r.bytes for r in rs)),
                str(sum(r.index_entries + r.time_index_entries for r in rs)),
                str(n_problems),
                "OK" if n_problems == 0 else "FAIL",
            ]
        )
    text = _table(
        rows, ["log", "segments", "batches", "records", "bytes", "index entries", "problems", "status"]
    )
    details = [p for r in reports for p in r.problems]
    if details:
        text += "\n\nproblems:\n" + "\n".join(f"  {p}" for p in details)
    return text, problems


def run_verify(args: argparse.Namespace) -> int:
    """One Spark task per log, each running the engine verifier; summary table; exit 1 on any problem."""
    from seglogfs.verifier import find_segments

    for raw in args.paths:
        if not Path(raw).exists():
            raise FileNotFoundError(f"no such file or directory: {raw}")
    groups, bad_paths = find_segments(args.paths)
    if not groups:
        print("no segments found under " + " ".join(args.paths), file=sys.stderr)
        return 1
    spark, owned = session.make_session(args.master, "seglogfs-verify")
    try:
        sc = spark.sparkContext
        work = [[str(p) for p in group] for group in groups]
        slices = args.parallelism or min(len(work), max(sc.defaultParallelism * 4, 1))
        with StageProgress(spark, "verify"):
            reports = sc.parallelize(work, slices).map(verify_log).collect()
    finally:
        if owned:
            spark.stop()
    parsed = [LogReport(**r) for r in reports]
    text, problems = summarise(parsed)
    print(text)
    for problem in bad_paths:
        print(f"  {problem}")
    problems += len(bad_paths)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in parsed], indent=1))
    segments = sum(r.segments for r in parsed)
    print(f"\n{segments} segments checked in {len(parsed)} log(s), {problems} problem(s)")
    return 1 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    """The ``seglogfs spark`` argument parser."""
    parser = argparse.ArgumentParser(prog="seglogfs spark", description="Spark jobs over seglogfs logs.")
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="export logs (or a time / offset range) to Parquet")
    exp.add_argument("path", help="a data dir or a log dir")
    exp.add_argument("--output", "-o", required=True, help="Parquet output directory")
    exp.add_argument("--logs", help="comma-separated log names (default: all)")
    exp.add_argument("--topics", help="comma-separated topic names")
    exp.add_argument("--start-time", help="epoch ms or ISO-8601: first record timestamp >= this")
    exp.add_argument("--end-time", help="epoch ms or ISO-8601: stop before the first record >= this")
    exp.add_argument("--starting-offsets", help='earliest or JSON, e.g. {"events":{"0":100}}')
    exp.add_argument("--ending-offsets", help="latest or JSON")
    exp.add_argument("--min-partitions", type=int)
    exp.add_argument("--include-headers", action="store_true")
    exp.add_argument(
        "--mode",
        choices=["errorifexists", "overwrite", "append", "ignore"],
        help="when --output exists (default errorifexists; not with --incremental)",
    )
    exp.add_argument(
        "--incremental",
        action="store_true",
        help="export only what earlier runs did not (checkpoint in OUTPUT/_checkpoint), partitioned "
        "by topic, partition and UTC date; for cron or the seglogfs-export.timer",
    )
    exp.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        help="with --incremental: at most this many offsets per micro-batch (smaller commits)",
    )
    exp.add_argument(
        "--no-fail-on-data-loss",
        action="store_true",
        help="skip (with a warning) records removed by retention or corrupt",
    )
    exp.add_argument(
        "--isolation",
        choices=["read_uncommitted", "read_committed"],
        help="read_committed: leave out aborted transactions and stop at the last stable offset "
        "(Kafka's isolation.level; default read_uncommitted)",
    )
    exp.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    exp.set_defaults(func=run_export)
    ver = sub.add_parser("verify", help="check CRCs and indexes of many logs in parallel")
    ver.add_argument("paths", nargs="+", help="data dirs, log dirs or segment files")
    ver.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    ver.add_argument("--parallelism", type=int, help="number of Spark tasks (default: 4 per core)")
    ver.add_argument("--json", help="also write the per-segment reports to this JSON file")
    ver.set_defaults(func=run_verify)
    return parser


def _short_error(exc: BaseException) -> str:
    """The root cause line of an error that went through the JVM (its Python traceback is long)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines if "Error: " in line and not line.startswith("File ")]
    return causes[-1] if causes else (lines[0] if lines else type(exc).__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``seglogfs spark ...`` (``argv`` excludes the ``spark`` word).

    Exit codes: 0 success, 1 problems found by ``verify``, 2 the job failed (message on stderr).
    """
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    try:
        return int(args.func(args))
    except Exception as exc:
        print(f"seglogfs spark {args.command}: {_short_error(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

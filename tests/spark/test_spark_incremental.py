"""``seglogfs spark export --incremental``: every record exactly once across runs, kills and new logs."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support.spark_fixtures import append_records, engine_rows, make_log, row_tuple

from seglogfs.config import LogConfig
from seglogfs.log import Log
from seglogfs.spark import jobs, session
from seglogfs.spark.archive import (
    CHECKPOINT_DIR,
    JVM_PID_FILE,
    ExportError,
    wait_for_previous_jvm,
)

pytestmark = pytest.mark.spark
pytest_plugins = ["support.spark_fixtures"]

SEGLOGFS = Path(sys.executable).with_name("seglogfs")
#: 23:59:30 UTC: a log made with make_log's 1 s per batch crosses midnight after 30 batches
FAST_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
NEAR_MIDNIGHT = int(dt.datetime(2026, 11, 22, 23, 59, 30, tzinfo=dt.UTC).timestamp() * 1000)


def export(data: Path, out: Path, *extra: str) -> int:
    """One in-process run (it reuses the test session, as a notebook would)."""
    args = ["export", str(data), "--output", str(out), "--incremental", "--include-headers"]
    return jobs.main([*args, "--master", "local[2]", *extra])


def _hashable(record: tuple) -> tuple:
    """(key, value, timestamp ms, headers) of engine_rows / row_tuple, with headers as a tuple."""
    key, value, ms, headers = record
    return key, value, ms, None if headers is None else tuple(headers)


def expected_records(data: Path) -> Counter:
    """Every record of every log in ``data``, keyed by (topic, partition, offset)."""
    out: Counter = Counter()
    for log_dir in sorted(p for p in data.iterdir() if p.is_dir()):
        topic, _, partition = log_dir.name.rpartition("-")
        out.update(((topic, int(partition), r[0]), _hashable(r[1:])) for r in engine_rows(log_dir))
    return out


def archived_records(spark, out: Path) -> Counter:
    """The archive as Spark reads it (only committed files), keyed like :func:`expected_records`."""
    rows = spark.read.parquet(str(out)).collect()
    return Counter(((r.topic, r.partition, r.offset), _hashable(row_tuple(r)[1:])) for r in rows)


def test_three_runs_with_appends_and_a_new_log_export_every_record_once(spark, tmp_path, capsys) -> None:
    data, out = tmp_path / "data", tmp_path / "archive"
    make_log(data, "a-0", batches=40, per_batch=10, first_timestamp=NEAR_MIDNIGHT)
    make_log(data, "b-1", batches=4, per_batch=10)

    assert export(data, out) == 0
    assert archived_records(spark, out) == expected_records(data)
    assert "exported 440 new records" in capsys.readouterr().out

    with Log.open(data / "a-0") as log:
        append_records(log, 3, 10, NEAR_MIDNIGHT + 60_000)
    make_log(data, "c-0", batches=2, per_batch=10)  # a log created after the first run
    # The date partition is the UTC day whatever the session time zone says.
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        assert export(data, out, "--max-offsets-per-trigger", "25") == 0
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    text = capsys.readouterr().out
    assert "exported 50 new records" in text
    assert "a-0: 30 records, offsets 400..429" in text and "c-0: 20 records, offsets 0..19" in text
    assert "b-1" not in text

    with Log.open(data / "b-1") as log:
        append_records(log, 1, 5)
    assert export(data, out) == 0
    assert "b-1: 5 records, offsets 40..44" in capsys.readouterr().out
    expected = expected_records(data)
    assert sum(expected.values()) == 495
    assert archived_records(spark, out) == expected

    layout = {p.relative_to(out).parent.as_posix() for p in out.rglob("*.parquet")}
    assert layout == {
        "topic=a/partition=0/date=2026-11-22",
        "topic=a/partition=0/date=2026-11-23",
        "topic=b/partition=1/date=2023-11-14",
        "topic=c/partition=0/date=2023-11-14",
    }
    days = spark.read.parquet(str(out)).selectExpr("offset", "date", "unix_millis(timestamp) AS ms")
    for row in days.where("topic = 'a'").collect():
        assert row.date == dt.datetime.fromtimestamp(row.ms / 1000, dt.UTC).date(), row

    # A copy of the archive elsewhere: its sink log names the old paths, so none of its files may be
    # taken for an interrupted run's and deleted; the run is refused, naming the cause.
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    files = sorted(p.relative_to(moved) for p in moved.rglob("*.parquet"))
    capsys.readouterr()
    assert export(data, moved) == 2
    assert "copied or moved" in capsys.readouterr().err
    assert sorted(p.relative_to(moved) for p in moved.rglob("*.parquet")) == files


def test_bad_output_and_options_are_refused_clearly(tmp_path, capsys) -> None:
    data, out = tmp_path / "data", tmp_path / "archive"
    make_log(data, "a-0", batches=1)
    out.mkdir()
    (out / "report.csv").write_text("not ours\n")
    assert export(data, out) == 2
    assert "is not empty (report.csv" in capsys.readouterr().err
    assert export(data, tmp_path / "new", "--end-time", "1700000000000") == 2
    assert "--end-time: not valid with --incremental" in capsys.readouterr().err
    plain = ["export", str(data), "--output", str(tmp_path / "p"), "--max-offsets-per-trigger", "5"]
    assert jobs.main(plain) == 2
    assert "--max-offsets-per-trigger: only valid with --incremental" in capsys.readouterr().err


def test_a_run_waits_for_the_driver_of_a_killed_run(tmp_path) -> None:
    out = tmp_path / "archive"
    out.mkdir()
    (out / JVM_PID_FILE).write_text(f"{os.getpid()}\n")  # alive, but not a Spark driver
    wait_for_previous_jvm(out, timeout=0)
    # A process whose command line is a Spark driver's, as a killed run's JVM still running.
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)", "org.apache.spark.deploy.SparkSubmit"]
    driver = subprocess.Popen(sleeper)
    try:
        (out / JVM_PID_FILE).write_text(f"{driver.pid}\n")
        with pytest.raises(ExportError, match=f"pid {driver.pid}.* still running"):
            wait_for_previous_jvm(out, timeout=0.3)
    finally:
        driver.kill()
        driver.wait()
    wait_for_previous_jvm(out, timeout=0)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the CLI's spark-submit JVM and its Python workers)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [child, *_descendants(child)]
    return found


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


def test_a_killed_run_reruns_exactly_once_and_a_concurrent_run_is_refused(spark, tmp_path, capsys) -> None:
    import pyarrow.dataset as ds

    data, out = tmp_path / "data", tmp_path / "archive"
    make_log(data, "k-0", batches=100, per_batch=20)
    make_log(data, "k-1", batches=50, per_batch=20)
    cli = [str(SEGLOGFS), "spark", "export", str(data), "--output", str(out), "--incremental"]
    cli += ["--include-headers", "--max-offsets-per-trigger", "150", "--master", "local[1]"]
    # The session fixture's JVM flags (a quicker start on 2 cores), for the CLI's own JVM.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "JDK_JAVA_OPTIONS": FAST_JVM}
    log = tmp_path / "first-run.log"
    with log.open("wb") as sink:  # a file, not a pipe nobody drains
        proc = subprocess.Popen(cli, env=env, stdout=sink, stderr=subprocess.STDOUT)
    commits = out / CHECKPOINT_DIR / "commits"
    try:
        deadline = time.monotonic() + 300
        while not (commits / "0").exists():  # wait for the first committed micro-batch
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no batch committed in 300 s"
            time.sleep(0.1)

        assert export(data, out) == 2  # the running export holds the lock
        assert "another incremental export is running" in capsys.readouterr().err
        assert proc.poll() is None, "the run finished before it could be killed"
    finally:
        helpers = _descendants(proc.pid) if proc.poll() is None else []
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        _wait_gone(helpers, 60)  # the JVM exits when its Python parent's pipe closes
    done = len([p for p in commits.iterdir() if p.name.isdigit()])
    assert 1 <= done < 3000 // 150, f"{done} batches committed: the kill did not land mid-run"

    # A file a killed run wrote but never committed: a plain Parquet reader would count it twice.
    committed = sorted(out.rglob("part-*.parquet"))[0]
    shutil.copy(committed, committed.with_name("part-99999-never-committed.c000.snappy.parquet"))

    assert export(data, out) == 0
    assert "removed" in capsys.readouterr().err
    expected = expected_records(data)
    assert sum(expected.values()) == 3000
    assert archived_records(spark, out) == expected
    table = ds.dataset(str(out), format="parquet", partitioning="hive", exclude_invalid_files=True)
    assert table.count_rows() == 3000  # no uncommitted file left for readers that are not Spark


def test_a_deleted_log_is_reported_once_and_a_log_left_out_by_logs_keeps_its_place(
    spark, tmp_path, capsys
) -> None:
    data, out = tmp_path / "data", tmp_path / "archive"
    for name in ("a-0", "b-0", "c-0"):
        make_log(data, name, batches=5, per_batch=10)
    assert export(data, out) == 0
    exported_c = {key: n for key, n in archived_records(spark, out).items() if key[0][0] == "c"}

    # --logs narrowed for a run: the log left out is no data loss; selected again, it resumes.
    with Log.open(data / "a-0") as log:
        append_records(log, 1, 10)
    capsys.readouterr()
    assert export(data, out, "--logs", "b-0,c-0") == 0
    assert "gone" not in capsys.readouterr().err
    assert export(data, out) == 0
    assert "a-0: 10 records, offsets 50..59" in capsys.readouterr().out

    # A deleted log is data loss: the next run fails, naming it; one run with --no-fail-on-data-loss
    # skips it, and the runs after that (the timer's, without the flag) go on exporting.
    shutil.rmtree(data / "c-0")
    assert export(data, out) == 2
    assert "log c-0 is gone" in capsys.readouterr().err
    assert export(data, out, "--no-fail-on-data-loss") == 0
    with Log.open(data / "b-0") as log:
        append_records(log, 1, 10)
    capsys.readouterr()
    assert export(data, out) == 0, capsys.readouterr().err
    assert "b-0: 10 records, offsets 50..59" in capsys.readouterr().out
    assert archived_records(spark, out) == expected_records(data) + Counter(exported_c)


def test_an_output_inside_the_data_dir_is_refused(tmp_path, capsys) -> None:
    data = tmp_path / "data"
    make_log(data, "a-0", batches=1)
    for extra in (("--incremental",), ()):
        args = ["export", str(data), "--output", str(data / "archive"), *extra]
        assert jobs.main([*args, "--master", "local[2]"]) == 2
        assert f"--output {data / 'archive'} is inside {data}" in capsys.readouterr().err
    assert sorted(p.name for p in data.iterdir()) == ["a-0"]  # nothing a daemon would take for a log


def test_a_bad_path_or_option_fails_in_one_line_before_the_query(tmp_path, capsys, monkeypatch) -> None:
    """Inside the query, Spark logs a source error with a Java and a Python stack trace before the
    CLI's one line: a mistyped PATH or option must be refused before any Spark session starts."""
    data, out = tmp_path / "data", tmp_path / "archive"
    make_log(data, "a-0", batches=1)

    def no_session(*args: object) -> None:
        raise AssertionError("a Spark session was started for a command that cannot run")

    monkeypatch.setattr(session, "make_session", no_session)
    for path, extra, message in (
        (tmp_path / "missing", (), f"{tmp_path / 'missing'} is not a directory"),
        (data, ("--logs", "zz-0"), "option logs: no log named zz-0"),
        (data, ("--starting-offsets", "{bad"), "option startingoffsets='{bad'"),
        (data, ("--start-time", "yesterday"), "option startingTimestamp='yesterday'"),
    ):
        assert export(path, out, *extra) == 2
        assert message in capsys.readouterr().err
    assert not out.exists()  # a mistyped command leaves no archive behind


def test_an_archive_whose_sink_log_was_deleted_is_refused_not_emptied(spark, tmp_path, capsys) -> None:
    data, out = tmp_path / "data", tmp_path / "archive"
    make_log(data, "a-0", batches=5, per_batch=10)
    assert export(data, out) == 0
    files = sorted(out.rglob("part-*"))
    shutil.rmtree(out / "_spark_metadata")  # a cleanup script, or a copy that skips "_" names
    with Log.open(data / "a-0") as log:
        append_records(log, 1, 10)
    capsys.readouterr()
    assert export(data, out) == 2
    assert f"the sink log {out / '_spark_metadata'}" in capsys.readouterr().err
    assert sorted(out.rglob("part-*")) == files  # the exported records are all still there


def test_the_summary_names_logs_whose_topic_looks_like_a_number(spark, tmp_path, capsys) -> None:
    data, out = tmp_path / "data", tmp_path / "archive"
    make_log(data, "007-0", batches=2, per_batch=10)
    make_log(data, "1e3-1", batches=1, per_batch=5)
    assert export(data, out) == 0
    text = capsys.readouterr().out
    assert "007-0: 20 records, offsets 0..19" in text and "1e3-1: 5 records, offsets 0..4" in text
    assert {p.name for p in out.glob("topic=*")} == {"topic=007", "topic=1e3"}


def test_records_removed_before_a_run_exported_them_fail_it_before_the_query(
    spark, tmp_path, capsys, monkeypatch
) -> None:
    """Retention overtaking the hourly export: the run fails with one line naming the log and the
    offsets (no query, so no Spark stack traces), and --no-fail-on-data-loss skips them."""
    data, out = tmp_path / "data", tmp_path / "archive"
    make_log(data, "a-0", batches=5, per_batch=10)
    make_log(data, "b-0", batches=1, per_batch=10)
    assert export(data, out) == 0
    cfg = LogConfig.from_mapping({"segment.bytes": 8000, "retention.bytes": 1})
    with Log.open(data / "a-0", cfg) as log:
        append_records(log, 40, 10)
        assert log.delete_old_segments() > 0
        log_start = log.start_offset
        append_records(log, 5, 10)
    assert log_start > 50
    real_session = session.make_session

    def no_session(*args: object) -> None:
        raise AssertionError("a Spark session was started for a run that cannot export")

    monkeypatch.setattr(session, "make_session", no_session)
    capsys.readouterr()
    assert export(data, out) == 2
    err = capsys.readouterr().err
    assert f"log a-0: offsets 50..{log_start - 1} were removed (log start is now {log_start})" in err
    assert len(err.strip().splitlines()) == 1, err
    monkeypatch.setattr(session, "make_session", real_session)
    assert export(data, out, "--no-fail-on-data-loss") == 0
    assert f"a-0: {500 - log_start} records, offsets {log_start}..499" in capsys.readouterr().out


def test_toggling_include_headers_between_runs_is_refused_naming_the_archive_and_the_option(
    spark, tmp_path, capsys
) -> None:
    """Files with and without a headers column in one archive make a plain spark.read.parquet drop
    it: a run must write the columns the first run chose (kept beside the checkpoint)."""
    data, out = tmp_path / "data", tmp_path / "archive"
    make_log(data, "h-0", batches=3, per_batch=10)
    plain = ["export", str(data), "--output", str(out), "--incremental", "--master", "local[2]"]
    assert jobs.main(plain) == 0
    files = sorted(out.rglob("part-*"))
    with Log.open(data / "h-0") as log:
        append_records(log, 2, 10)
    capsys.readouterr()
    assert export(data, out) == 2  # with --include-headers
    err = capsys.readouterr().err
    assert f"--include-headers: the archive {out} was started without it" in err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(out.rglob("part-*")) == files
    assert jobs.main(plain) == 0  # the first run's choice goes on: every record, one set of columns
    archived = spark.read.parquet(str(out))
    assert "headers" not in archived.columns
    assert sorted(r.offset for r in archived.select("offset").collect()) == list(range(50))
    # The other way round, on an archive that has only its files to tell (no settings file yet).
    other = tmp_path / "with-headers"
    assert export(data, other) == 0
    (other / ".seglogfs-export.json").unlink()
    capsys.readouterr()
    assert jobs.main([*plain[:3], str(other), *plain[4:]]) == 2
    assert f"--include-headers: the archive {other} was started with it" in capsys.readouterr().err

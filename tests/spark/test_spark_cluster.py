"""The seglog source, a streaming query and ``seglogfs spark export|verify`` on a real Spark standalone
cluster: a master and two one-core workers on 127.0.0.1, started from the installed PySpark.

Each driver is its own process, and the three run side by side (their JVM starts overlap; each
application gets one executor). The shared local SparkSession of the other Spark tests may be active
in this pytest process, and PySpark allows one SparkContext per process, so the in-process part (a
batch read and a streaming query in one SparkSession) runs as ``python -m support.spark_cluster``:
no session bound to the cluster can outlive this module or disturb the shared one. Results are
checked here against the engine, with pyarrow; this process never starts Spark.

"Ran on the cluster" is checked from the cluster's side: the master lists each application as
finished, and executors launched by the workers logged the tasks they finished (the driver of a
standalone application runs no tasks itself; a driver that fell back to ``local`` would leave no trace
in either place).
"""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.spark_cluster import (
    STREAM_COLUMNS,
    TESTS_DIR,
    StandaloneCluster,
    finish_driver,
    parquet_rows,
    standalone_cluster,
    start_driver,
    stop_driver,
)
from support.spark_fixtures import engine_rows, make_log

pytestmark = pytest.mark.spark

SEGLOGFS = str(Path(sys.executable).with_name("seglogfs"))
DRIVERS_TIMEOUT = 400.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[StandaloneCluster]:
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


@dataclass
class Runs:
    """The three drivers' results and the data they ran on."""

    data: Path
    stream_data: Path
    stream_before_appends: list[tuple]
    damaged_segment: Path
    out: Path
    results: dict[str, subprocess.CompletedProcess]


def expected_rows(data: Path) -> list[tuple]:
    """(log, offset, key, value, timestamp ms, headers) of every record of every log, by the engine."""
    return sorted((log.name, *row) for log in data.iterdir() for row in engine_rows(log))


def stream_rows(data: Path) -> list[tuple]:
    return [(log, offset, value) for log, offset, _, value, *_ in expected_rows(data)]


def damaged_copy(log_dir: Path, dest: Path) -> Path:
    """A copy of ``log_dir`` at ``dest`` with one byte of its first batch flipped; that segment."""
    shutil.copytree(log_dir, dest)
    segment = min(dest.glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    segment.write_bytes(bytes(data))
    return segment


@pytest.fixture(scope="module")
def runs(cluster: StandaloneCluster, tmp_path_factory) -> Runs:
    """The in-process driver, ``spark export`` and ``spark verify`` run side by side on the cluster
    (started together, so their JVM starts overlap), each in its own process group."""
    root = tmp_path_factory.mktemp("cluster-runs")
    data, stream_data, out = root / "data", root / "stream-data", root / "out"
    make_log(data, "events-0", codec="lz4", batches=16, segment_bytes=3000)
    make_log(data, "events-1", batches=12)
    make_log(stream_data, "s-0", batches=6, segment_bytes=3000)
    make_log(stream_data, "s-1", batches=2)
    damaged = damaged_copy(data / "events-1", root / "damaged" / "events-9")
    out.mkdir()
    master = ["--master", cluster.master_url]
    driver = [sys.executable, "-m", "support.spark_cluster", cluster.master_url]
    export = [SEGLOGFS, "spark", "export", str(data), "--output", str(out / "parquet"), "--include-headers"]
    commands = {
        "session": [*driver, str(data), str(stream_data), str(out)],
        "export": [*export, *master],
        "verify": [SEGLOGFS, "spark", "verify", str(data), str(damaged.parent.parent), *master],
    }
    runs = Runs(data, stream_data, stream_rows(stream_data), damaged, out, {})
    env = cluster.driver_env()
    started: dict[str, subprocess.Popen] = {}
    deadline = time.monotonic() + DRIVERS_TIMEOUT
    try:
        for name, argv in commands.items():
            extra = {"PYTHONPATH": str(TESTS_DIR)} if name == "session" else {}  # for `-m support...`
            started[name] = start_driver(argv, {**env, **extra}, root / name)
        for name, proc in started.items():
            runs.results[name] = finish_driver(proc, root / name, max(deadline - time.monotonic(), 1))
    finally:
        for name, proc in started.items():
            if name not in runs.results:  # one timed out, or pytest-timeout fired: end the others
                stop_driver(proc)
    return runs


def check_exit(result: subprocess.CompletedProcess, code: int) -> None:
    assert result.returncode == code, f"{result.args}\n{result.stdout}\n{result.stderr[-4000:]}"


def assert_ran_on_executors(cluster: StandaloneCluster, name: str) -> str:
    """The master finished the application called ``name``, and its executors, launched by the
    workers, finished tasks. Returns its application id."""
    apps = cluster.completed_apps(name)
    assert len(apps) == 1 and apps[0]["state"] == "FINISHED", apps
    app_id = apps[0]["id"]
    deadline = time.monotonic() + 10  # the worker copies executor output to the log as it comes
    tasks = cluster.executor_tasks(app_id)
    while sum(tasks.values()) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        tasks = cluster.executor_tasks(app_id)
    assert sum(tasks.values()) > 0, (apps, tasks)
    return app_id


def test_batch_read_and_stream_in_one_session(cluster: StandaloneCluster, runs: Runs) -> None:
    check_exit(runs.results["session"], 0)
    results = pickle.loads((runs.out / "results.pkl").read_bytes())
    assert results["batch"] == expected_rows(runs.data)
    assert results["first_run"] == runs.stream_before_appends
    import pyarrow.dataset as ds

    sink = ds.dataset(runs.out / "stream", format="parquet").to_table(columns=list(STREAM_COLUMNS))
    columns = (sink[c].to_pylist() for c in STREAM_COLUMNS)
    seen = sorted(
        (f"{topic}-{part}", offset, value) for topic, part, offset, value in zip(*columns, strict=True)
    )
    everything = stream_rows(runs.stream_data)
    assert {log for log, *_ in everything} == {"s-0", "s-1", "late-0"}
    assert len(everything) > len(runs.stream_before_appends)
    assert seen == everything  # every record exactly once, across both runs
    assert assert_ran_on_executors(cluster, "seglogfs-cluster-test") == results["app_id"]


def test_export_to_parquet(cluster: StandaloneCluster, runs: Runs) -> None:
    result = runs.results["export"]
    check_exit(result, 0)
    expected = expected_rows(runs.data)
    assert f"exported to {runs.out / 'parquet'}: {len(expected)} records" in result.stdout
    assert parquet_rows(runs.out / "parquet") == expected
    assert_ran_on_executors(cluster, "seglogfs-export")


def test_verify_passes_the_clean_logs_and_fails_the_damaged_copy(
    cluster: StandaloneCluster, runs: Runs
) -> None:
    result = runs.results["verify"]
    check_exit(result, 1)
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("events-")]
    # log, segments, batches, records, bytes, index entries, problems, status
    table = {row[0]: (int(row[3]), int(row[6]), row[7]) for row in rows}
    records = {log: len(engine_rows(runs.data / log)) for log in ("events-0", "events-1")}
    assert {log: table[log] for log in records} == {log: (n, 0, "OK") for log, n in records.items()}
    problems = table["events-9"][1]
    assert table["events-9"][2] == "FAIL" and problems > 0
    assert str(runs.damaged_segment) in result.stdout
    assert f"{problems} problem(s)" in result.stdout.splitlines()[-1]  # none from the clean logs
    assert_ran_on_executors(cluster, "seglogfs-verify")

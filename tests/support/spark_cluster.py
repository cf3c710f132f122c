"""A real Spark standalone cluster (one master, N one-core workers) on 127.0.0.1, started from the
installed PySpark's ``bin/spark-class``, and the means to run driver programs against it.

Every process it starts gets its own process group; :meth:`StandaloneCluster.stop` and
:func:`run_in_group` end each group (TERM, then KILL) and wait until no member is left, so executors
and their Python workers go with the worker that launched them.

Drivers read ``<root>/conf/spark-defaults.conf`` (through ``SPARK_CONF_DIR``), so the CLI runs and
the in-process driver get the same small executors without any flag of their own.

``python -m support.spark_cluster MASTER DATA STREAM_DATA OUT`` is the driver program of the
in-process part (a batch read and a streaming query in one SparkSession); see :func:`drive`.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

SPARK_HOME = Path(importlib.util.find_spec("pyspark").submodule_search_locations[0])
TESTS_DIR = Path(__file__).resolve().parents[1]
FAST_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
DRIVER_DEFAULTS = {
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.cores.max": "1",  # one executor per application: drivers run side by side
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": FAST_JVM,
    "spark.executor.extraJavaOptions": FAST_JVM,
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
}
# Executor log line per task it completed (INFO, the executors' default level).
FINISHED_TASK = "Executor: Finished task"


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Run in a child before exec: SIGTERM it when the test process dies, even by SIGKILL or
    pytest-timeout's ``os._exit``, when no ``finally`` runs (executors go with their worker)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def live_processes() -> dict[int, tuple[int, int, int]]:
    """``{pid: (parent pid, process group, start time)}`` of every live (not zombie) process."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        if fields[0] != "Z":
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), int(fields[19]))
    return table


def group_and_descendants(pgid: int) -> set[tuple[int, int]]:
    """(pid, start time) of the live members of process group ``pgid`` and all their descendants, in
    any group (PySpark's Python worker daemons put themselves in groups of their own)."""
    table = live_processes()
    found = {pid for pid, (_, group, _) in table.items() if group == pgid}
    while more := {pid for pid, (parent, _, _) in table.items() if parent in found} - found:
        found |= more
    return {(pid, table[pid][2]) for pid in found}


def still_alive(processes: set[tuple[int, int]]) -> set[int]:
    """The pids of ``processes`` that run still (the same start time: not a reused pid)."""
    table = live_processes()
    return {pid for pid, start in processes if pid in table and table[pid][2] == start}


def end_group(pgid: int, grace: float = 15.0) -> None:
    """TERM process group ``pgid`` (a daemon or driver we started, with what it started); KILL what
    is left of it after ``grace`` seconds; return once none of it is alive."""
    targets = group_and_descendants(pgid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    for wait, last_resort in ((grace, signal.SIGKILL), (10.0, None)):
        deadline = time.monotonic() + wait
        while (alive := still_alive(targets)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not alive:
            return
        for pid in alive if last_resort else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, last_resort)
    raise RuntimeError(f"processes {sorted(alive)} of group {pgid} survived SIGKILL")


def start_driver(argv: Sequence[str], env: dict[str, str], logs: Path) -> subprocess.Popen:
    """Start a driver program in a new process group, its stdout/stderr to ``logs``.out/.err (files,
    not pipes: several drivers run at once and none may block on a full pipe)."""
    with open(f"{logs}.out", "wb") as out, open(f"{logs}.err", "wb") as err:
        return subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


def stop_driver(proc: subprocess.Popen) -> None:
    """End a driver's process group, if anything of it is left, and reap the driver."""
    # The PySpark gateway JVM leaves by itself once its Python driver is gone; allow it time.
    end_group(proc.pid, grace=10.0)
    proc.kill()
    proc.wait()


def finish_driver(proc: subprocess.Popen, logs: Path, timeout: float) -> subprocess.CompletedProcess:
    """Wait for a driver from :func:`start_driver`; whatever it started (its JVM) ends with it."""
    try:
        proc.wait(timeout=timeout)
    finally:
        stop_driver(proc)
    out, err = (Path(f"{logs}.{kind}").read_text(errors="replace") for kind in ("out", "err"))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class StandaloneCluster:
    """A master and ``workers`` one-core workers under ``root``; use :func:`standalone_cluster`."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self.port, self.webui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.worker_dirs = [root / f"worker-{i}" for i in range(workers)]
        self.processes: list[subprocess.Popen] = []
        self.conf_dir = root / "conf"
        self.conf_dir.mkdir(parents=True)
        (self.conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in DRIVER_DEFAULTS.items())
        )

    def _daemon_env(self, worker_dir: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.pop("PYTHONPATH", None)  # executors must find seglogfs through the venv's Python alone
        empty_conf = self.root / "daemon-conf"
        empty_conf.mkdir(exist_ok=True)
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_CONF_DIR=str(empty_conf),
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_LOCAL_DIRS=str(self.root / "local"),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS=FAST_JVM,
            # The REST submission server would bind the fixed port 6066.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
            PYSPARK_PYTHON=sys.executable,
        )
        if worker_dir is not None:
            env["SPARK_WORKER_DIR"] = str(worker_dir)
        return env

    def driver_env(self) -> dict[str, str]:
        """Environment for a driver process: the cluster's spark-defaults, the venv's Python."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(
            SPARK_CONF_DIR=str(self.conf_dir),
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
        )
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        (self.root / "logs").mkdir(exist_ok=True)
        with open(self.root / "logs" / f"{name}.out", "wb") as log:
            self.processes.append(
                subprocess.Popen(
                    [str(SPARK_HOME / "bin" / "spark-class"), *args],
                    env=env,
                    cwd=self.root,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
            )

    def start(self, timeout: float = 180.0) -> None:
        """Start the master, then the workers once it is ALIVE; return when all are registered."""
        master = "org.apache.spark.deploy.master.Master"
        self._spawn(
            "master",
            [master, "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port)],
            self._daemon_env(),
        )
        deadline = time.monotonic() + timeout
        self._wait(lambda s: s.get("status") == "ALIVE", deadline, "the master to be ALIVE")
        for i, worker_dir in enumerate(self.worker_dirs):
            args = ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g"]
            args += ["--webui-port", str(free_port()), "--work-dir", str(worker_dir), self.master_url]
            worker = "org.apache.spark.deploy.worker.Worker"
            self._spawn(f"worker-{i}", [worker, *args], self._daemon_env(worker_dir))
        n = len(self.worker_dirs)
        self._wait(lambda s: s.get("aliveworkers") == n, deadline, f"{n} workers to register")

    def _wait(self, ready, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for proc in self.processes:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[1]} exited with {proc.returncode}\n{self.log_tails()}")
            with contextlib.suppress(OSError, ValueError):
                if ready(self.state()):
                    return
            time.sleep(0.25)
        raise TimeoutError(f"timed out waiting for {what}\n{self.log_tails()}")

    def log_tails(self, lines: int = 15) -> str:
        return "\n".join(
            f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            for log in sorted((self.root / "logs").glob("*.out"))
        )

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed applications)."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)

    def completed_apps(self, name: str) -> list[dict[str, Any]]:
        return [app for app in self.state()["completedapps"] if app["name"] == name]

    def executor_tasks(self, app_id: str) -> dict[str, int]:
        """``{"worker-i/executor-id": tasks it finished}`` for every executor of ``app_id``: the
        executors' own logs in the workers' work dirs (``<work dir>/<app id>/<executor id>/stderr``)."""
        counts = {}
        for worker_dir in self.worker_dirs:
            for stderr in sorted(worker_dir.glob(f"{app_id}/*/stderr")):
                text = stderr.read_text(errors="replace")
                counts[f"{worker_dir.name}/{stderr.parent.name}"] = text.count(FINISHED_TASK)
        return counts

    def stop(self) -> None:
        """End every process group started (workers first, with their executors), then the master."""
        errors = []
        for proc in reversed(self.processes):
            try:
                end_group(proc.pid)
            except RuntimeError as exc:
                errors.append(str(exc))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.processes.clear()
        if errors:
            raise RuntimeError("; ".join(errors))


@contextlib.contextmanager
def standalone_cluster(root: Path, workers: int = 2) -> Iterator[StandaloneCluster]:
    """A running cluster under ``root``; stopped on exit, also when starting it failed midway."""
    cluster = StandaloneCluster(root, workers)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def parquet_rows(path: Path) -> list[tuple]:
    """(log, offset, key, value, timestamp ms, headers or None) of every row of a Parquet dir that
    Spark wrote partitioned by ``topic`` and ``partition``, read with pyarrow (no Spark)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    millis = pc.cast(pc.cast(table["timestamp"], pa.timestamp("ms")), pa.int64()).to_pylist()
    columns = {name: table[name].to_pylist() for name in ("topic", "partition", "offset", "key", "value")}
    headers = table["headers"].to_pylist() if "headers" in table.column_names else [None] * len(table)
    return sorted(
        (f"{topic}-{partition}", offset, key, value, ms, [(h["key"], h["value"]) for h in hs] if hs else None)
        for topic, partition, offset, key, value, ms, hs in zip(
            *columns.values(), millis, headers, strict=True
        )
    )


# ------------------------------------------------------------------------------ in-process driver

STREAM_COLUMNS = ("topic", "partition", "offset", "value")


def drive(master: str, data: Path, stream_data: Path, out: Path) -> None:
    """One SparkSession on ``master``: a batch read of ``data`` and a streaming query over
    ``stream_data`` run twice (Trigger.AvailableNow, checkpoint under ``out``) with engine appends
    and a new log between; writes ``out/results.pkl`` for the test to check against the engine."""
    from pyspark.sql import SparkSession

    import seglogfs.spark
    from seglogfs.log import Log
    from support.spark_fixtures import append_records, make_log, row_tuple, stream_to_parquet

    spark = SparkSession.builder.master(master).appName("seglogfs-cluster-test").getOrCreate()
    try:
        spark.sparkContext.setLogLevel("ERROR")
        seglogfs.spark.register(spark)
        batch = spark.read.format("seglog").option("includeHeaders", "true").load(str(data)).collect()
        results: dict[str, Any] = {
            "app_id": spark.sparkContext.applicationId,
            "batch": sorted((f"{r.topic}-{r.partition}", *row_tuple(r)) for r in batch),
        }
        stream = (
            spark.readStream.format("seglog").option("startingOffsets", "earliest").load(str(stream_data))
        )
        sink, checkpoint = out / "stream", out / "checkpoint"
        stream_to_parquet(stream.select(*STREAM_COLUMNS), sink, checkpoint)
        first_run = spark.read.parquet(str(sink)).collect()
        results["first_run"] = sorted(
            (f"{r.topic}-{r.partition}", r.offset, bytes(r.value)) for r in first_run
        )
        for log_dir in sorted(stream_data.iterdir()):
            with Log.open(log_dir) as log:
                append_records(log, 2, 25, first_timestamp=1_800_000_000_000)
        make_log(stream_data, "late-0", batches=1)  # appears between runs: read from its start
        stream_to_parquet(stream.select(*STREAM_COLUMNS), sink, checkpoint)
        (out / "results.pkl").write_bytes(pickle.dumps(results))
    finally:
        spark.stop()


if __name__ == "__main__":
    drive(sys.argv[1], *(Path(arg) for arg in sys.argv[2:5]))

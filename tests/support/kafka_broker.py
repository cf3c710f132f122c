"""Apache Kafka itself as the oracle: its tools and a real broker, from the Maven cache that
``scripts/kafka-oracle.sh`` fills (docs/oracle.md).

``KafkaBroker`` runs one broker in KRaft mode (combined broker and controller, storage formatted with
Kafka's own StorageTool first) on free loopback ports in a directory of its own; ``stop`` always ends
the JVM (SIGTERM for a clean shutdown, SIGKILL after a grace). ``dump_log_segments`` runs
``kafka.tools.DumpLogSegments``, the class behind kafka-dump-log.sh. Tests that need the cache call
``require_kafka()``, which skips them, naming the script to run, when the cache is missing.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SEGLOGFS_KAFKA_CACHE", REPO / ".cache" / "kafka"))
#: client-side JVM options: the tools and the broker are short-lived, so a quick start matters more
#: than peak speed (C1 only, one GC thread)
JVM_OPTIONS = ("-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m")
START_TIMEOUT_S = 90.0
DUMP_LOG_SEGMENTS = "kafka.tools.DumpLogSegments"  # kafka-dump-log.sh's class
STOP_GRACE_S = 30.0
_LOG4J2 = """\
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=FILE
appender.file.type=File
appender.file.name=FILE
appender.file.fileName={log}
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
"""
_QUIET_LOG4J2 = "rootLogger.level=WARN\n"


def kafka_version() -> str | None:
    """The Kafka version the cache holds, or None."""
    try:
        return (CACHE / "VERSION").read_text().strip() or None
    except OSError:
        return None


def _classpath(name: str) -> str | None:
    version = kafka_version()
    if version is None:
        return None
    try:
        text = (CACHE / version / name).read_text().strip()
    except OSError:
        return None
    jars = text.split(":")
    return text if jars and all(Path(j).is_file() for j in jars) else None


def kafka_classpath() -> str | None:
    """The broker's and tools' classpath, or None when the cache is missing or incomplete."""
    return _classpath("classpath")


def spark_kafka_classpath() -> str | None:
    """spark-sql-kafka-0-10 and what it needs, for the installed pyspark, or None."""
    return _classpath("spark-classpath")


def require_kafka() -> str:
    """The classpath; the test fails without it (scripts/install.sh fills the cache)."""
    classpath = kafka_classpath()
    if classpath is None:
        pytest.fail(f"no Kafka cache in {CACHE}: run scripts/kafka-oracle.sh (needs Maven and Java 17)")
    return classpath


class _Archive:
    """Class-data sharing for one kind of JVM ("tools" or "broker"): the first run dumps the classes
    it loaded into a private file at exit (``ArchiveClassesAtExit``), which ``keep`` makes the
    cached archive; later runs map it (``SharedArchiveFile``) and start in about half the time. A
    stale or foreign archive is ignored by the JVM; ``-Xlog:disable`` keeps its warnings (and any
    other JVM log line) off the tools' stdout, which the tests compare."""

    def __init__(self, name: str) -> None:
        self.final = CACHE / (kafka_version() or "none") / f"{name}.jsa"
        self.writing: Path | None = None
        if self.final.is_file():
            self.options = [f"-XX:SharedArchiveFile={self.final}", "-Xlog:disable"]
        else:
            self.writing = self.final.with_name(f".{name}.{os.getpid()}.{uuid.uuid4().hex}.jsa")
            self.options = [f"-XX:ArchiveClassesAtExit={self.writing}", "-Xlog:disable"]

    def keep(self) -> None:
        """After the JVM exited: its archive becomes the cached one (unless another run's did)."""
        if self.writing is None or not self.writing.exists():
            return
        if self.final.exists() or self.writing.stat().st_size == 0:
            self.writing.unlink()
        else:
            os.replace(self.writing, self.final)


def _java(
    classpath: str, main: str, args: Sequence[str], log_config: Path, archive: _Archive,
    options: Sequence[str] = JVM_OPTIONS,
) -> list[str]:
    return [
        "java", *options, *archive.options, f"-Dlog4j2.configurationFile={log_config}",
        "-cp", classpath, main, *args,
    ]  # fmt: skip


def _quiet_log_config() -> Path:
    path = CACHE / "log4j2-quiet.properties"
    if not path.exists():
        path.write_text(_QUIET_LOG4J2)
    return path


def run_kafka_tool(main: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Runs one of Kafka's command-line classes; stdout and stderr captured as text."""
    archive = _Archive("tools")
    cmd = _java(require_kafka(), main, args, _quiet_log_config(), archive)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        archive.keep()


def dump_log_segments(files: Sequence[Path], *options: str) -> subprocess.CompletedProcess[str]:
    """kafka-dump-log.sh --files F1,F2,... OPTIONS."""
    return run_kafka_tool(DUMP_LOG_SEGMENTS, "--files", ",".join(map(str, files)), *options)


def dump_log_segments_many(runs: Sequence[tuple[Sequence[Path], Sequence[str]]]) -> list[tuple[str, str]]:
    """Several DumpLogSegments runs at once (one JVM each, started together): (stdout, stderr) of each."""
    classpath, log_config = require_kafka(), _quiet_log_config()
    archives = [_Archive("tools") for _ in runs]
    procs = [
        subprocess.Popen(
            _java(classpath, DUMP_LOG_SEGMENTS, ["--files", ",".join(map(str, f)), *o], log_config, a),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for (f, o), a in zip(runs, archives, strict=True)
    ]
    out = []
    for proc, archive in zip(procs, archives, strict=True):
        try:
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            archive.keep()
        out.append((stdout, stderr))
    return out


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now (all held open together, so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def random_uuid() -> str:
    """A Kafka Uuid in its text form (URL-safe base64 of 16 bytes, no padding). Never one starting with
    "-", as Kafka's own ``Uuid.randomUuid`` avoids: a command line would read it as an option (one id
    in 64 made ``kafka-storage format -t <id>`` fail)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


#: util-linux's setpriv gives the JVM a parent-death signal (PR_SET_PDEATHSIG, kept across exec): a
#: broker gets SIGKILL when the test process dies, however it dies
_DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []


class KafkaBroker:
    """One Kafka broker in KRaft mode (node 1, broker and controller) in ``workdir``."""

    def __init__(
        self, workdir: Path, *, jvm_options: Sequence[str] = JVM_OPTIONS, **overrides: object
    ) -> None:
        self.classpath = require_kafka()
        self.jvm_options = tuple(jvm_options)  # the broker's (bench/kafka.py gives a server's)
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_file = workdir / "server.log"
        self.port, self.controller_port = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None
        self._archive: _Archive | None = None
        self.start_seconds = 0.0
        settings: dict[str, object] = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": 1,
            # one replica and one __consumer_offsets partition: a one-node test cluster starts fast
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            # what a test reads must not depend on whether the broker's cleaner ran first
            "log.cleaner.enable": "false",
        }
        settings.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.properties = workdir / "server.properties"
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.log_config = workdir / "log4j2.properties"
        self.log_config.write_text(_LOG4J2.format(log=self.log_file))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def format(self) -> None:
        """Formats the data dir with Kafka's StorageTool (a new cluster id)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        archive = _Archive("tools")
        cmd = _java(
            self.classpath,
            "kafka.tools.StorageTool",
            ["format", "-t", random_uuid(), "-c", str(self.properties)],
            self.log_config,
            archive,
        )
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        finally:
            archive.keep()
        assert done.returncode == 0, f"kafka-storage format failed: {done.stdout}{done.stderr}"

    def start(self) -> None:
        """Starts the JVM and waits until the broker says it started (or fails with its log)."""
        assert self.proc is None, "broker already running"
        mark = self.log_file.stat().st_size if self.log_file.exists() else 0
        began = time.monotonic()
        out = open(self.workdir / "stdout.log", "ab")  # noqa: SIM115 (kept open for the JVM's life)
        try:
            self._archive = archive = _Archive("broker")
            java = _java(self.classpath, "kafka.Kafka", [str(self.properties)], self.log_config, archive,
                         self.jvm_options)
            self.proc = subprocess.Popen(
                _DIE_WITH_PARENT + java,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()
        while True:
            if self._log_since(mark).find("Kafka Server started") >= 0:
                break
            if self.proc.poll() is not None or time.monotonic() - began > START_TIMEOUT_S:
                tail = self._log_since(mark)[-4000:]
                self.stop()
                raise AssertionError(f"Kafka broker did not start:\n{tail}")
            time.sleep(0.1)
        self.start_seconds = time.monotonic() - began

    def _log_since(self, mark: int) -> str:
        try:
            with open(self.log_file, "rb") as f:
                f.seek(mark)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_text(self) -> str:
        return self._log_since(0)

    def stop(self) -> None:
        """Clean shutdown (SIGTERM); SIGKILL after a grace. Idempotent."""
        proc, self.proc = self.proc, None
        archive, self._archive = self._archive, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if archive is not None:
            archive.keep()

    def restart(self) -> None:
        self.stop()
        self.start()

    def topic_id(self, topic: str, partition: int = 0) -> str:
        """The topic id the broker wrote in the partition's ``partition.metadata``."""
        text = (self.data_dir / f"{topic}-{partition}" / "partition.metadata").read_text()
        return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)["topic_id"]


@contextlib.contextmanager
def running_broker(
    workdir: Path, *, jvm_options: Sequence[str] = JVM_OPTIONS, **overrides: object
) -> Iterator[KafkaBroker]:
    """A formatted, started broker that is stopped on exit whatever happens."""
    workdir.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(workdir, jvm_options=jvm_options, **overrides)
    try:
        broker.format()
        broker.start()
        yield broker
    finally:
        broker.stop()

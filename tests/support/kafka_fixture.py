"""A real seglogd with its Kafka listener on a free loopback port (never 9092), for tests/kafka/.

The listener binds port 0; the daemon logs the port it got, which :func:`kafka_port` reads.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.mount_fixture import Seglogd, make_seglogd

_LISTENING = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")
KCAT = shutil.which("kcat") or "kcat"


def kafka_port(daemon: Seglogd, timeout: float = 10.0) -> int:
    """The port the daemon's listener bound (from its log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        matches = _LISTENING.findall(daemon.stderr())
        if matches:
            return int(matches[-1])
        time.sleep(0.05)
    raise AssertionError(f"no Kafka listener in the daemon's log:\n{daemon.stderr()}")


def start_kafka_daemon(tmp_path: Path, *, kafka: dict[str, Any] | None = None, **kwargs: Any) -> Seglogd:
    """A started seglogd with ``kafka:`` (listeners on port 0 unless given); ``daemon.extra['port']``."""
    daemon = make_seglogd(tmp_path, **kwargs)
    # a new group's first rebalance waits 0.3 s for more members (Kafka's default 3 s would slow
    # every test; the oracle broker waits 0): kafka-python joins before its first metadata answer
    # and assigns nothing when that answer comes later
    daemon.settings["kafka"] = {
        "listeners": "PLAINTEXT://127.0.0.1:0", "group.initial.rebalance.delay.ms": 300, **(kafka or {})
    }
    daemon.write_config()
    daemon.start()
    daemon.extra["port"] = kafka_port(daemon)
    return daemon


def restart(daemon: Seglogd) -> None:
    """Start ``daemon`` again after it stopped; its port is read anew."""
    daemon.start()
    daemon.extra["port"] = kafka_port(daemon)


@pytest.fixture(scope="module")
def kafka_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    """One seglogd with a Kafka listener for a whole test module."""
    # consumers in the tests use sessions shorter than Kafka's 6 s minimum, so groups settle fast
    daemon = start_kafka_daemon(tmp_path_factory.mktemp("kafka"), logs={},
                                kafka={"group.min.session.timeout.ms": 1000})
    try:
        yield daemon
    finally:
        daemon.cleanup()


def bootstrap(daemon: Seglogd) -> str:
    """``host:port`` for a client's bootstrap.servers."""
    return f"127.0.0.1:{daemon.extra['port']}"


def records_jsonl(daemon: Seglogd, log: str) -> list[dict]:
    """The mount's ``records.jsonl`` of ``log``, parsed."""
    text = (daemon.mount / log / "records.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def kcat(*args: str, input: bytes | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run kcat; fails the test with its stderr when it fails."""
    result = subprocess.run([KCAT, *args], input=input, capture_output=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise AssertionError(f"kcat {' '.join(args)} failed ({result.returncode}): {result.stderr.decode()}")
    return result

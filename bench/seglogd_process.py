"""A real seglogd for the benchmarks: write its config, start it, wait for the mount, stop it.

Shared by bench/fuse.py, bench/loops.py and bench/stall.py (each runs as a script, with bench/ on
``sys.path``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def mounted(path: Path) -> bool:
    """Whether something is mounted on ``path`` (per /proc/self/mounts)."""
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(len(p) > 1 and p[1] == target for p in (line.split() for line in f))


def write_config(config: Path, data_dir: Path, mount: Path, defaults: dict[str, Any],
                 logs: dict[str, dict[str, Any]], **settings: Any) -> Path:
    """Write a seglogd config (JSON is YAML) atomically, so a watching daemon never reads half."""
    tmp = config.with_suffix(".tmp")
    tmp.write_text(json.dumps({"data_dir": str(data_dir), "mount_point": str(mount),
                               "defaults": defaults, "logs": logs, **settings}))
    tmp.replace(config)
    return config


def start_seglogd(config: Path, mount: Path, loop: str, *, timeout: float = 60.0) -> subprocess.Popen:
    """seglogd on ``config`` with the libfuse ``loop`` ("single" or "multi"), once its mount answers;
    its stderr goes to ``seglogd.stderr`` beside the config."""
    stderr = config.parent / "seglogd.stderr"
    err = open(stderr, "ab")  # noqa: SIM115 (kept open for the daemon's life)
    proc = subprocess.Popen([sys.executable, "-m", "seglogd", "--config", str(config)], cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                            env={**os.environ, "SEGLOGFS_FUSE_LOOP": loop})
    deadline = time.monotonic() + timeout
    while not mounted(mount):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"seglogd did not mount:\n{stderr.read_text()}")
        time.sleep(0.05)
    os.statvfs(mount)  # always reaches the daemon: the mount answers
    return proc


def stop_seglogd(proc: subprocess.Popen, mount: Path) -> None:
    """SIGTERM (SIGKILL after a minute), then make sure nothing stays mounted."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    if mounted(mount):
        subprocess.run(["fusermount3", "-uz", str(mount)], check=False)


def port_of(stderr: Path, timeout: float = 10) -> int:
    """The port of the Kafka listener a seglogd started with ``stderr`` announced."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.findall(r"Kafka listener on 127\.0\.0\.1:(\d+)", stderr.read_text())
        if found:
            return int(found[-1])
        time.sleep(0.05)
    raise SystemExit(f"no Kafka listener:\n{stderr.read_text()}")

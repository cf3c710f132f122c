"""Scale benchmark: the first requests on views of large logs, at two log sizes side by side.

    .venv/bin/python bench/scale.py [--small 1000000] [--big 10000000] [--ones-small 100000]
                                    [--ones-big 1000000] [--dir DIR]

For each size, logs written by the engine (``big-0``: batches of 1000 records; ``ones-0``: one
record a batch, what ``echo >> append`` builds), closed cleanly, then mounted by a real seglogd:
- mount time after a clean stop, after kill -9, and of a read-only copy without the clean-shutdown
  marker or totals file (the background count then runs);
- on each mount, per log: first ``ls -l`` of the log dir, first ``stat records``, ``wc -c
  records.jsonl``, ``tail -n 10 from/<n>`` (n in the middle), time to the first byte of ``cat records``;
- p99/max latency of another log's appends (a line every 5 ms) while those requests run.
Always unmounts and stops the daemons.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from seglogfs.config import LogConfig  # noqa: E402
from seglogfs.log_manager import LogManager  # noqa: E402
from seglogfs.records import encode_values  # noqa: E402
from seglogfs.totals_file import TOTALS_SUFFIX  # noqa: E402


def mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(len(p) > 1 and p[1] == target for p in (line.split() for line in f))


class Daemon:
    def __init__(self, base: Path, data: Path, *, read_only: bool = False) -> None:
        self.base, self.mount = base, base / "mnt"
        self.config = base / "seglogfs.yaml"
        self.config.write_text(json.dumps({
            "data_dir": str(data), "mount_point": str(self.mount), "read_only": read_only,
            "defaults": {"segment.bytes": "1GiB"}, "logs": {},
        }))
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        """Seconds until the mount answers."""
        err = open(self.base / "seglogd.stderr", "ab")  # noqa: SIM115 (kept for the daemon's life)
        started = time.perf_counter()
        argv = [sys.executable, "-m", "seglogd", "--config", str(self.config)]
        self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        while not mounted(self.mount):
            if self.proc.poll() is not None or time.perf_counter() - started > 600:
                raise SystemExit((self.base / "seglogd.stderr").read_text())
            time.sleep(0.01)
        os.stat(self.mount)
        return time.perf_counter() - started

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if mounted(self.mount):
            subprocess.run(["fusermount3", "-uz", str(self.mount)], check=False)


def write_logs(data: Path, big: int, ones: int) -> None:
    cfg = LogConfig.from_mapping({"segment.bytes": "1GiB", "flush.messages": 10**12})
    with LogManager(data, cfg) as manager:
        lg = manager.create_log("big-0")
        for first in range(0, big, 1000):
            lg.append_values([b"value-%010d" % i for i in range(first, first + 1000)])
        lg = manager.create_log("ones-0")
        for first in range(0, ones, 10_000):  # one record a batch, 10,000 batches a write
            with lg._lock:
                now = int(time.time() * 1000)
                planned = [(encode_values([b"value-%010d" % i], i, now), 1)
                           for i in range(first, min(first + 10_000, ones))]
                lg._append_batches(planned, now)
        manager.create_log("other-0")


class Writer:
    """Appends a line to other-0 every 5 ms; the latency of each write."""

    def __init__(self, mount: Path, *, enabled: bool = True) -> None:
        self.path, self.stop, self.latencies = mount / "other-0" / "append", threading.Event(), []
        self.enabled = enabled
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            while not self.stop.is_set():
                t = time.perf_counter()
                os.write(fd, b"tick\n")
                self.latencies.append(time.perf_counter() - t)
                time.sleep(0.005)
        finally:
            os.close(fd)

    def __enter__(self) -> Writer:
        if not self.enabled:
            return self
        self.thread.start()
        time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.enabled:
            self.thread.join()


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def first_byte(path: Path) -> float:
    t = time.perf_counter()
    proc = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    proc.stdout.read(1)
    elapsed = time.perf_counter() - t
    proc.kill()
    proc.wait()
    return elapsed


def requests(mount: Path, records: dict[str, int], *, writer: bool = True) -> dict[str, float]:
    out: dict[str, float] = {}
    with Writer(mount, enabled=writer) as writer:
        for name, n in records.items():
            d = mount / name
            out[f"{name} ls -l"] = timed(["ls", "-l", str(d)])
            t = time.perf_counter()
            os.stat(d / "records")
            out[f"{name} stat records"] = time.perf_counter() - t
            out[f"{name} wc -c records.jsonl"] = timed(["wc", "-c", str(d / "records.jsonl")])
            out[f"{name} tail -n 10 from/n"] = timed(["tail", "-n", "10", str(d / "from" / str(n // 2))])
            out[f"{name} cat records first byte"] = first_byte(d / "records")
    lat = sorted(writer.latencies)
    out["other append p99"] = lat[int(len(lat) * 0.99)] if lat else 0.0
    out["other append max"] = lat[-1] if lat else 0.0
    return out


def run_size(base: Path, big: int, ones: int) -> dict[str, float]:
    data = base / "data"
    t = time.perf_counter()
    write_logs(data, big, ones)
    print(f"  wrote {big} + {ones} records in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    records = {"big-0": big, "ones-0": ones}
    result: dict[str, float] = {}
    daemon = Daemon(base, data)
    try:
        result["mount (clean stop)"] = daemon.start()
        result.update({f"clean: {k}": v for k, v in requests(daemon.mount, records).items()})
        with open(daemon.mount / "ones-0" / "append", "ab") as f:
            f.write(b"after\n")
        daemon.stop(signal.SIGKILL)
        result["mount (kill -9)"] = daemon.start()
        result.update({f"kill -9: {k}": v for k, v in requests(daemon.mount, records).items()})
    finally:
        daemon.stop()
    copy = base / "copy"
    shutil.copytree(data, copy)
    (copy / ".kafka_cleanshutdown").unlink(missing_ok=True)
    for log_dir in copy.iterdir():
        for path in log_dir.glob(f".*{TOTALS_SUFFIX}") if log_dir.is_dir() else ():
            path.unlink()
    ro_base = base / "ro"
    ro_base.mkdir()
    ro = Daemon(ro_base, copy, read_only=True)
    try:
        result["mount (read-only copy, uncounted)"] = ro.start()
        measured = requests(ro.mount, records, writer=False)
        result.update({f"read-only copy: {k}": v for k, v in measured.items()})
    finally:
        ro.stop()
    shutil.rmtree(copy)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", type=int, default=1_000_000, help="records of big-0 at the small size")
    parser.add_argument("--big", type=int, default=10_000_000, help="records of big-0 at the big size")
    parser.add_argument("--ones-small", type=int, default=1_000_000, help="one-record batches, small size")
    parser.add_argument("--ones-big", type=int, default=10_000_000, help="one-record batches, big size")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="seglogfs-scale-", dir=args.dir))
    try:
        results = []
        for big, ones in ((args.small, args.ones_small), (args.big, args.ones_big)):
            base = root / f"size-{big}"
            base.mkdir()
            results.append(run_size(base, big, ones))
            shutil.rmtree(base / "data")
        print(f"{'measure':55s} {'small':>10s} {'big':>10s} {'ratio':>6s}")
        print(f"{'(big-0 records / ones-0 batches)':55s} {args.small:>10d} {args.big:>10d}")
        print(f"{'':55s} {args.ones_small:>10d} {args.ones_big:>10d}")
        for key in results[0]:
            small, large = results[0][key], results[1][key]
            ratio = large / small if small else float("nan")
            print(f"{key:55s} {small * 1000:9.1f}ms {large * 1000:9.1f}ms {ratio:6.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

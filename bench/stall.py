"""Stall benchmark: other clients' latency while one slow request runs, against idle, one run.

    .venv/bin/python bench/stall.py [--loop single|multi|both] [--big-mb 256] [--segments 1000]
                                    [--logs 300] [--records 2000000] [--keep DIR]

Starts a real seglogd and, on a log of its own (``other-0``), times one client's appends (a line
written to an open ``append``: one WRITE) and reads of random ``by-offset/<n>`` (os.open/os.read/
os.close: LOOKUP, OPEN, READ, RELEASE), alternating, while each of these runs on other logs:
- idle (nothing else);
- ``cat segments/<seg>.log`` of a ``--big-mb`` segment, cold (its pages dropped with
  POSIX_FADV_DONTNEED first);
- ``fsync`` of an ``append`` file after a write of ``--big-mb`` MiB without one;
- a compaction (a reload lets the cleaner at a compacted log of ``--big-mb`` / 4 MiB of keyed records,
  timed until its first pass ended);
- retention of ``--segments`` segments (a reload sets ``retention.bytes``; until they are purged);
- a SIGHUP reload of ``--logs`` logs (until the daemon logs it);
- the first ``ls -l`` of a log of ``--records`` records (the mount's first stat of its views).
Each row gives p50 / p99 / max in ms of each operation and how many ran during the window.
``--loop both`` runs everything on the single-threaded and then the multi-threaded loop, side by side.
Always unmounts and stops the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

from seglogd_process import start_seglogd, stop_seglogd  # noqa: E402
from seglogd_process import write_config as seglogd_config  # noqa: E402

Row = tuple[str, list[float], list[float]]


def stop_daemon(proc: subprocess.Popen, mount: Path) -> None:
    stop_seglogd(proc, mount)


def write_config(base: Path, mount: Path, args: argparse.Namespace, **changes: dict) -> Path:
    """The daemon's YAML (as JSON); ``changes`` replace per-log settings."""
    logs = {
        "other-0": {},
        "big-0": {"segment.bytes": "1GiB"},
        "sync-0": {"segment.bytes": "1GiB"},
        "cmp-0": {"cleanup.policy": "compact", "fs.append.key.separator": ":", "segment.bytes": "4MiB",
                  "min.cleanable.dirty.ratio": 0.01, "min.compaction.lag.ms": "1h"},
        "ret-0": {"segment.bytes": 4096, "file.delete.delay.ms": 0},
        "count-0": {"segment.bytes": "64MiB"},
        **{f"many-{i}": {} for i in range(args.logs)},
    }
    for name, settings in changes.items():
        logs[name] = {**logs[name], **settings}
    defaults = {"segment.bytes": "64MiB", "log.cleaner.backoff.ms": "100ms"}
    return seglogd_config(base / "seglogfs.yaml", base / "data", mount, defaults, logs)


def start(base: Path, mount: Path, config: Path, loop: str) -> subprocess.Popen:
    return start_seglogd(config, mount, loop, timeout=120)


class Client:
    """Appends to and reads ``other-0`` in a thread, keeping each operation's latency."""

    def __init__(self, log_dir: Path, known: int, only: str | None = None) -> None:
        self.only = only.split(",") if only else None
        self.log_dir = log_dir
        self.known = known
        self.fd = os.open(log_dir / "append", os.O_WRONLY)
        self.appends: list[float] = []
        self.reads: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        line = b"x" * 99 + b"\n"
        rng = random.Random(1)
        while not self._stop.is_set():
            t = time.perf_counter()
            os.write(self.fd, line)
            self.appends.append(time.perf_counter() - t)
            n = rng.randrange(self.known)
            t = time.perf_counter()
            fd = os.open(self.log_dir / "by-offset" / str(n), os.O_RDONLY)
            os.read(fd, 4096)
            os.close(fd)
            self.reads.append(time.perf_counter() - t)
            self.known += 1
            time.sleep(0.002)

    def measure(self, what: str, action) -> Row | None:  # type: ignore[no-untyped-def]
        """Run ``action()`` (blocking) while the client runs; the latencies meanwhile (None: a row
        ``--only`` leaves out)."""
        if self.only is not None and what != "idle" and not any(word in what for word in self.only):
            return None
        self.appends, self.reads = [], []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        time.sleep(0.2)
        began = time.monotonic()
        action()
        while time.monotonic() - began < 0.5:  # at least half a second of samples
            time.sleep(0.01)
        self._stop.set()
        self._thread.join()
        return what, self.appends, self.reads


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000 if ordered else float("nan")


def wait_for(predicate, timeout: float = 600.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.02)


def info(mount: Path, name: str) -> dict:
    return json.loads((mount / name / "info").read_text())


def prepare(mount: Path, args: argparse.Namespace) -> None:
    """Fill the logs the slow requests work on (before the mount that measures)."""
    chunk = (b"y" * 1023 + b"\n") * 512  # 512 KiB of 1 KiB lines
    with open(mount / "big-0" / "append", "wb", buffering=0) as f:
        for _ in range(args.big_mb * 2):
            f.write(chunk)
    with open(mount / "cmp-0" / "append", "wb", buffering=0) as f:
        for i in range(args.big_mb // 4 * 16):
            f.write(b"".join(b"k%d:%s\n" % (j, b"v" * 60) for j in range(i * 64, i * 64 + 8192)))
    with open(mount / "ret-0" / "append", "wb", buffering=0) as f:
        for _ in range(args.segments):
            f.write(b"r" * 3000 + b"\n")  # one record a segment (segment.bytes 4096)
    line = b"c" * 99 + b"\n"
    with open(mount / "count-0" / "append", "wb", buffering=0) as f:
        for _ in range(args.records // 5000):
            f.write(line * 5000)
    with open(mount / "other-0" / "append", "wb", buffering=0) as f:
        f.write((b"o" * 99 + b"\n") * 10000)


def run(loop: str, args: argparse.Namespace, base: Path) -> list[Row]:
    mount = base / "mnt"
    data = base / "data"
    config = write_config(base, mount, args)
    proc = start(base, mount, config, loop)
    try:
        if not (data / "other-0" / "00000000000000000000.log").stat().st_size:
            prepare(mount, args)
        stop_daemon(proc, mount)  # a fresh mount: nothing counted, nothing cached
        proc = start(base, mount, config, loop)
        client = Client(mount / "other-0", info(mount, "other-0")["end_offset"], args.only)
        rows: list[Row | None] = [client.measure("idle", lambda: time.sleep(1.5))]

        def first_ls() -> None:
            subprocess.run(["ls", "-l", str(mount / "count-0")], capture_output=True, check=True)

        rows.append(client.measure(f"first ls -l of a log of {args.records:,} records", first_ls))
        segment = data / "big-0" / "00000000000000000000.log"

        def cat_segment() -> None:
            fd = os.open(segment, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
            subprocess.run(["cat", str(mount / "big-0" / "segments" / segment.name)],
                           stdout=subprocess.DEVNULL, check=True)

        rows.append(client.measure(f"cat of a {args.big_mb} MiB segment, cold", cat_segment))
        fd = os.open(mount / "sync-0" / "append", os.O_WRONLY)
        chunk = (b"s" * 1023 + b"\n") * 512
        for _ in range(args.big_mb * 2):
            os.write(fd, chunk)
        rows.append(client.measure(f"fsync of a {args.big_mb} MiB write", lambda: os.fsync(fd)))
        os.close(fd)

        def compaction() -> None:
            write_config(base, mount, args, **{"cmp-0": {"min.compaction.lag.ms": 0}})
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: info(mount, "cmp-0")["cleaner"]["passes"] >= 1)

        rows.append(client.measure(f"compaction of {args.big_mb // 4} MiB (swap included)", compaction))

        def retention() -> None:
            write_config(base, mount, args, **{"cmp-0": {"min.compaction.lag.ms": 0},
                                                "ret-0": {"retention.bytes": 4096}})
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: len(os.listdir(data / "ret-0")) < 20)

        rows.append(client.measure(f"retention of {args.segments:,} segments", retention))
        reloads = (base / "seglogd.stderr").read_text().count("config reloaded")

        def reload() -> None:
            many = {f"many-{i}": {"flush.ms": 60_000} for i in range(args.logs)}
            write_config(base, mount, args, **{"cmp-0": {"min.compaction.lag.ms": 0},
                                                "ret-0": {"retention.bytes": 4096}, **many})
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: (base / "seglogd.stderr").read_text().count("config reloaded") > reloads)

        rows.append(client.measure(f"SIGHUP reload of {args.logs + 6} logs", reload))
        os.close(client.fd)
        return [row for row in rows if row is not None]
    finally:
        stop_daemon(proc, mount)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=("single", "multi", "both"), default="both")
    parser.add_argument("--big-mb", type=int, default=256, help="segment read, fsynced write (MiB)")
    parser.add_argument("--segments", type=int, default=1000, help="segments retention deletes")
    parser.add_argument("--logs", type=int, default=300, help="extra logs a reload goes through")
    parser.add_argument("--records", type=int, default=2_000_000, help="records of the log first listed")
    parser.add_argument("--only", help="comma-separated words: run only the rows whose title has one")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args()
    loops = ["single", "multi"] if args.loop == "both" else [args.loop]
    results: dict[str, list[Row]] = {}
    for loop in loops:
        base = Path(tempfile.mkdtemp(prefix="seglogfs-stall-")) if args.keep is None else args.keep / loop
        base.mkdir(parents=True, exist_ok=True)
        try:
            results[loop] = run(loop, args, base)
        finally:
            if args.keep is None:
                shutil.rmtree(base, ignore_errors=True)
    print("\nother clients' latency (ms) while one request runs; other-0's append / by-offset/<n>\n")
    header = f"{'while':<44}" + "".join(
        f"  {loop + ' append p50/p99/max':>28}  {loop + ' by-offset p50/p99/max':>28}" for loop in loops)
    print(header)
    print("-" * len(header))
    for i, (what, _, _) in enumerate(results[loops[0]]):
        line = f"{what:<44}"
        for loop in loops:
            _, appends, reads = results[loop][i]
            for values in (appends, reads):
                figures = f"{pct(values, .5):6.2f}/{pct(values, .99):6.2f}/{pct(values, 1):6.1f}"
                line += f"  {figures} n={len(values):<5}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

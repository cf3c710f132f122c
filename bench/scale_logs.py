"""Many small logs in one data dir (docs/performance.md section 4b): daemon start and stop time, RSS,
open descriptors, and the disk the indexes use next to what Kafka's sparse files would use.

    .venv/bin/python bench/scale_logs.py [--logs 1000 5000] [--nofile 1024] [--tmpfs]

For each size: builds a data dir of N logs of 3 records each with the engine (closed cleanly, as a
stopped daemon leaves it), starts a real seglogd on it under ``ulimit -n NOFILE`` (soft and hard),
times the start until the mount answers, appends to and reads back 200 logs through the mount (most
of them never touched since the start), then stops it with SIGTERM and times the stop. Kafka's
sparse size of an index file is the pages holding its entries (setLength allocates nothing); ours is
st_blocks, what du counts. Always unmounts and stops the daemon.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuse import REPO, mounted

PAGE = 4096
SAMPLE = 200

_BUILD = textwrap.dedent("""
    import sys
    from seglogfs.log_manager import LogManager
    with LogManager(sys.argv[1]) as manager:
        for i in range(int(sys.argv[2])):
            manager.create_log(f"small{i}-0").append_values([b"first", b"second", b"third"])
""")


@contextlib.contextmanager
def scratch(use_tmpfs: bool) -> Iterator[Path]:
    """A scratch directory, on a fresh tmpfs when asked (root only)."""
    base = Path(tempfile.mkdtemp(prefix="seglog-scale-"))
    try:
        if use_tmpfs:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "tmpfs", str(base)], check=True)
        yield base
    finally:
        if use_tmpfs:
            subprocess.run(["umount", "-l", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def kafka_sparse_bytes(path: Path) -> int:
    """The pages of ``path`` holding a non-zero byte: what Kafka's setLength file plus its mmap
    stores allocate. Walks the data extents only (SEEK_DATA), so sparse files read fast."""
    pages = set()
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        position = 0
        while position < end:
            try:
                start = os.lseek(fd, position, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after position
                break
            stop = os.lseek(fd, start, os.SEEK_HOLE)
            data = os.pread(fd, stop - start, start)
            for offset in range(0, len(data), PAGE):
                if any(data[offset : offset + PAGE]):
                    pages.add((start + offset) // PAGE)
            position = stop
    finally:
        os.close(fd)
    return len(pages) * PAGE


def index_disk(data: Path) -> tuple[int, int]:
    """(st_blocks bytes, Kafka's sparse bytes) over every .index and .timeindex of ``data``."""
    ours = kafka = 0
    for path in [*data.glob("*/*.index"), *data.glob("*/*.timeindex")]:
        ours += path.stat().st_blocks * 512
        kafka += kafka_sparse_bytes(path)
    return ours, kafka


def limit(nofile: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def run_size(base: Path, count: int, nofile: int) -> dict[str, float]:
    data, mount = base / f"data{count}", base / f"mnt{count}"
    built = time.perf_counter()
    subprocess.run([sys.executable, "-c", _BUILD, str(data), str(count)], check=True)
    build_s = time.perf_counter() - built
    config = base / f"seglogfs{count}.yaml"
    settings = {"data_dir": str(data), "mount_point": str(mount), "defaults": {}, "logs": {}}
    config.write_text(json.dumps(settings))
    stderr = base / f"seglogd{count}.stderr"
    row: dict[str, float] = {"logs": count, "build_s": build_s}
    with open(stderr, "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "seglogd", "--config", str(config)], cwd=REPO,
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                preexec_fn=lambda: limit(nofile))
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"seglogd exited with {proc.returncode}:\n{stderr.read_text()[-3000:]}")
            if mounted(mount):
                with contextlib.suppress(OSError):
                    os.statvfs(mount)
                    break
            time.sleep(0.01)
        row["start_s"] = time.perf_counter() - started
        opened = re.search(r"opened \d+ log\(s\) in .* in ([0-9.]+) s", stderr.read_text())
        row["open_logs_s"] = float(opened.group(1)) if opened else float("nan")
        row["rss_start_mb"] = rss_mb(proc.pid)
        row["fds_start"] = open_fds(proc.pid)
        names = [f"small{i}-0" for i in random.Random(7).sample(range(count), SAMPLE)]
        most = 0
        for name in names:
            with open(mount / name / "append", "ab") as f:
                f.write(b"fourth\n")
            most = max(most, open_fds(proc.pid))
        for name in names:
            got = (mount / name / "records").read_bytes()
            assert got == b"first\nsecond\nthird\nfourth\n", (name, got)
        row["fds_max"] = max(most, open_fds(proc.pid))
        row["rss_used_mb"] = rss_mb(proc.pid)
        ours, kafka = index_disk(data)
        row["index_kib_per_log"] = ours / 1024 / count
        row["kafka_kib_per_log"] = kafka / 1024 / count
        stopping = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(300)
        row["stop_s"] = time.perf_counter() - stopping
        if code != 0 or "Traceback" in stderr.read_text():
            raise SystemExit(f"seglogd stopped with {code}:\n{stderr.read_text()[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if mounted(mount):
            subprocess.run(["fusermount3", "-uz", str(mount)], check=False)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--logs", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--nofile", type=int, default=1024, help="soft and hard RLIMIT_NOFILE of the daemon")
    parser.add_argument("--tmpfs", action="store_true", help="data dirs on a tmpfs (no fsync cost)")
    args = parser.parse_args()
    rows = []
    with scratch(args.tmpfs) as base:
        for count in args.logs:
            rows.append(run_size(base, count, args.nofile))
            print(json.dumps(rows[-1]), flush=True)
    columns = [("logs", "logs", "{:.0f}"), ("start_s", "start s", "{:.2f}"),
               ("open_logs_s", "of which opening the logs", "{:.2f}"), ("stop_s", "stop s", "{:.2f}"),
               ("rss_start_mb", "RSS MB", "{:.0f}"), ("rss_used_mb", f"RSS MB, {SAMPLE} used", "{:.0f}"),
               ("fds_start", "fds", "{:.0f}"), ("fds_max", f"fds max, {SAMPLE} used", "{:.0f}"),
               ("index_kib_per_log", "index KiB/log", "{:.1f}"),
               ("kafka_kib_per_log", "Kafka sparse KiB/log", "{:.1f}")]
    print(f"\nulimit -n {args.nofile}, data dir on {'tmpfs' if args.tmpfs else 'disk'}")
    print("| " + " | ".join(title for _, title, _ in columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(fmt.format(row[key]) for key, _, fmt in columns) + " |")


if __name__ == "__main__":
    main()

"""FUSE mount benchmark: the mount side by side with the engine and with direct file access, one run.

    .venv/bin/python bench/fuse.py [--records 2000000] [--lookups 20000] [--keep DIR]

Starts a real seglogd on a temporary data dir and mount point, then measures:
- ``cat`` of a file of 100-byte lines into ``append`` (records/s), and the engine's ``append_values``
  of the same values in the same run (batches of 1000, the engine target's shape) -> ratio;
- random ``by-offset/<n>`` from this one Python process (files/s): cold with os.open/os.read/os.close
  and with ``open(p, 'rb').read()`` (which adds an isatty() ioctl), then the same offsets again (the
  kernel's caches), each beside the same client loop on an empty mfusepy filesystem of the same
  layout served by the same loop (bench/empty_fs.py: the binding's floor), in ``--turns`` alternated
  turns: median rates, the median of the turns' ratios, and each daemon's CPU time per cold file;
  and ``Log.read`` of random offsets in the engine for scale;
- by-offset read latency (p50/p99/max) while another process appends with an fsync after every write,
  and while another process reads ``records``;
- ``cat`` of a sealed ``segments/<seg>.log`` vs ``cat`` of the file directly, warm, best of 3, and
  reading all ``segments/*.log`` (MB/s, ratio);
- reading ``records`` through the mount (MB/s), in 1 MiB reads and with ``cat``.
``--loop single`` runs the daemon with libfuse's single-threaded loop instead (SEGLOGFS_FUSE_LOOP), to
compare the two loops on one machine. Always unmounts and stops the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from seglogd_process import mounted, start_seglogd, stop_seglogd, write_config  # noqa: E402

from seglogfs.config import LogConfig  # noqa: E402
from seglogfs.log import Log  # noqa: E402

LINE = 100  # bytes per value (plus the newline in the file)
READ_SIZE = 1 << 20


def start_daemon(base: Path, segment_bytes: str, loop: str = "single") -> tuple[subprocess.Popen, Path]:
    mount = base / "mnt"
    config = write_config(base / "seglogfs.yaml", base / "data", mount, {"segment.bytes": segment_bytes},
                          {"bench-0": {}})
    return start_seglogd(config, mount, loop, timeout=30), mount


def stop_daemon(proc: subprocess.Popen, mount: Path) -> None:
    stop_seglogd(proc, mount)


def read_all(path: Path) -> int:
    total = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(READ_SIZE):
            total += len(chunk)
    return total


def read_rate(paths: list[Path], rounds: int = 3) -> float:
    """Best MB/s of ``rounds`` full reads (warm page cache)."""
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        total = sum(read_all(p) for p in paths)
        best = max(best, total / (time.perf_counter() - start) / 1e6)
    return best


def engine_append(base: Path, n: int, batch: int) -> float:
    """Records/s of Log.append_values with 100-byte values (in this process, no mount)."""
    values = [b"%0*d" % (LINE, i) for i in range(batch)]
    directory = base / "engine-0"
    lg = Log.open(directory, LogConfig.from_mapping({"segment.bytes": "64MiB"}), create=True)
    try:
        start = time.perf_counter()
        for _ in range(n // batch):
            lg.append_values(values)
        return (n // batch * batch) / (time.perf_counter() - start)
    finally:
        lg.close()
        shutil.rmtree(directory, ignore_errors=True)


Row = tuple[str, str, str]

#: a writer that appends one 100-byte line per write() and fsyncs after each, until killed
FSYNC_WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
line = b"w" * 100 + b"\\n"
while True:
    os.write(fd, line)
    os.fsync(fd)
"""


def by_offset_rates(log_dir: Path, n: int, lookups: int, seed: int = 1,
                    pid: int | None = None) -> dict[str, float]:
    """Cold random by-offset reads (os.open and buffered open()), then the same offsets again:
    files/s of each; with the serving daemon's ``pid``, also its CPU time per cold os.open file (us)."""
    rng = random.Random(seed)
    offsets = rng.sample(range(n), 2 * lookups)
    cold_os, cold_buffered = offsets[:lookups], offsets[lookups:]

    def os_reads(batch: list[int]) -> float:
        start = time.perf_counter()
        for offset in batch:
            fd = os.open(f"{log_dir}/by-offset/{offset}", os.O_RDONLY)
            os.read(fd, 4096)
            os.close(fd)
        return len(batch) / (time.perf_counter() - start)

    def buffered_reads(batch: list[int]) -> float:
        start = time.perf_counter()
        for offset in batch:
            with open(f"{log_dir}/by-offset/{offset}", "rb") as f:
                f.read()
        return len(batch) / (time.perf_counter() - start)

    cpu_before = process_cpu(pid) if pid is not None else 0.0
    rates = {"cold os": os_reads(cold_os)}
    if pid is not None:
        rates["cpu"] = (process_cpu(pid) - cpu_before) / lookups * 1e6
    rates["cold open()"] = buffered_reads(cold_buffered)
    rates["again os"] = os_reads(cold_os)
    rates["again open()"] = buffered_reads(cold_buffered)
    return rates


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, every thread included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_RATE_ROWS = {
    "cold os": "random by-offset/<n>, cold, os.open/os.read/os.close",
    "cold open()": "random by-offset/<n>, cold, open(p, 'rb').read()",
    "again os": "the same offsets again, os.open/os.read/os.close",
    "again open()": "the same offsets again, open(p, 'rb').read()",
}


def by_offset_rows(log_dir: Path, floor_dir: Path, n: int, lookups: int, turns: int = 5,
                   pids: tuple[int, int] | None = None) -> list[Row]:
    """seglogd's by-offset rates beside the empty filesystem's (bench/empty_fs.py), measured in
    ``turns`` alternated turns (floor, seglogd, seglogd, floor, ...: fresh offsets each time): the
    median rate of each, and the median of the turns' ratios (each turn's two figures were taken side by
    side, so the machine's swings cancel in their ratio). ``pids`` (seglogd's, the floor's): add their
    CPU time per cold file."""
    ours: dict[str, list[float]] = {}
    floor: dict[str, list[float]] = {}
    for turn in range(turns):
        sides = [(floor, floor_dir, pids[1] if pids else None), (ours, log_dir, pids[0] if pids else None)]
        for rates, where, pid in sides if turn % 2 == 0 else sides[::-1]:
            for key, rate in by_offset_rates(where, n, lookups, seed=turn + 1, pid=pid).items():
                rates.setdefault(key, []).append(rate)
    rows: list[Row] = []
    for key, what in _RATE_ROWS.items():
        note = "one process" if key.startswith("cold") else "kernel caches"
        ratio = statistics.median(o / f for o, f in zip(ours[key], floor[key], strict=True))
        rows.append((what, f"{statistics.median(ours[key]):,.0f} files/s", note))
        floor_rate = statistics.median(floor[key])
        rows.append(("  empty mfusepy fs, same layout and loop", f"{floor_rate:,.0f} files/s",
                     f"ratio {ratio:.2f}x (target >= 0.6x), median of {turns} turns"))
    if pids is not None:
        cpu = statistics.median(ours["cpu"])
        rows.append(("daemon CPU per cold file (os.open): seglogd", f"{cpu:,.0f} us",
                     f"empty fs {statistics.median(floor['cpu']):,.0f} us, all threads, median"))
    return rows


def start_empty_fs(base: Path, n: int, loop: str) -> tuple[subprocess.Popen, Path]:
    """bench/empty_fs.py on ``base/empty``: the binding's floor, served by the same loop; its
    ``segments/`` are seglogd's log dir's files, the sealed ones cached across opens as seglogd does."""
    mount = base / "empty"
    log_dir = base / "data" / "bench-0"
    sealed = ",".join(sorted(p.name for p in log_dir.glob("*.log"))[:-1])
    err = open(base / "empty_fs.stderr", "wb")  # noqa: SIM115 (kept open for the process's life)
    command = [sys.executable, str(REPO / "bench" / "empty_fs.py"), str(mount), str(n), str(log_dir)]
    proc = subprocess.Popen(command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                            env={**os.environ, "SEGLOGFS_FUSE_LOOP": loop, "SEGLOGFS_EMPTY_SEALED": sealed})
    deadline = time.monotonic() + 30
    while not mounted(mount):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"empty_fs did not mount: {(base / 'empty_fs.stderr').read_text()}")
        time.sleep(0.05)
    return proc, mount


def active_segment_rows(base: Path, log_dir: Path, floor_dir: Path) -> list[Row]:
    """`cat` of the active segment, warm: through seglogd, through the empty filesystem (the floor of
    a growing file every open must see as it is: no page cache kept across opens) and directly."""
    data = base / "data" / "bench-0"
    active = sorted(p.name for p in data.glob("*.log"))[-1]
    size_mb = (data / active).stat().st_size / 1e6
    direct = cat_seconds(data / active)
    ours = cat_seconds(log_dir / "segments" / active)
    floor = cat_seconds(floor_dir / "segments" / active)
    return [
        ("cat segments/<active>.log vs cat of the file, warm", f"{size_mb / ours:,.0f} MB/s",
         f"{direct / ours:.2f}x of direct ({size_mb / direct:,.0f} MB/s)"),
        ("  empty mfusepy fs serving the same file the same way", f"{size_mb / floor:,.0f} MB/s",
         f"{direct / floor:.2f}x of direct; seglogd at {floor / ours:.2f}x of it"),
    ]


def engine_reads(data_dir: Path, n: int, lookups: int) -> Row:
    """Log.read of random offsets in this process, read-only beside the daemon (the engine's share)."""
    lg = Log.open(data_dir, LogConfig.from_mapping({}), read_only=True)
    try:
        offsets = random.Random(2).sample(range(n), lookups)
        start = time.perf_counter()
        for offset in offsets:
            lg.read(offset)
        rate = lookups / (time.perf_counter() - start)
    finally:
        lg.close()
    return ("engine Log.read of random offsets, cold", f"{rate:,.0f} reads/s", "no mount: the engine's share")


def latency_under(log_dir: Path, n: int, load: list[str], seconds: float, what: str) -> Row:
    """p50/p99/max of cold random by-offset reads while ``load`` (a command) runs beside them."""
    other = subprocess.Popen(load, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latencies: list[float] = []
    rng = random.Random(3)
    try:
        time.sleep(0.2)  # let the load start
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            path = f"{log_dir}/by-offset/{rng.randrange(n)}"
            start = time.perf_counter()
            fd = os.open(path, os.O_RDONLY)
            os.read(fd, 4096)
            os.close(fd)
            latencies.append(time.perf_counter() - start)
            time.sleep(0.001)  # a client that also does some work: the load gets the loop in between
    finally:
        other.kill()
        other.wait()
    latencies.sort()
    p50, p99 = (latencies[int(len(latencies) * q)] * 1e3 for q in (0.5, 0.99))
    return (f"by-offset read latency while {what}", f"p50 {p50:.2f} ms p99 {p99:.1f} ms",
            f"max {latencies[-1] * 1e3:.0f} ms, {len(latencies):,} reads")


def cat_seconds(path: Path, rounds: int = 3) -> float:
    """Best wall time of ``cat path > /dev/null`` (warm after the first round)."""
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - start)
    return best


def append_rows(base: Path, lines: Path, log_dir: Path, n: int, rounds: int) -> tuple[list[Row], int]:
    """Engine append vs `cat > append`, alternated, best of ``rounds``; the rows and the log's end."""
    read_all(lines)  # the input in page cache
    # Alternate engine and mount runs, each after a sync: with hundreds of MB written, dirty-page
    # writeback throttling otherwise penalises whichever runs second. Best of `rounds` each.
    engine_rate = cat_rate = 0.0
    for _i in range(rounds):
        os.sync()
        engine_rate = max(engine_rate, engine_append(base, n, 1000))
        os.sync()
        start = time.perf_counter()
        subprocess.run(f"cat {lines} > {log_dir}/append", shell=True, check=True)
        cat_rate = max(cat_rate, n / (time.perf_counter() - start))
    end = json.loads((log_dir / "info").read_text())["end_offset"]
    assert end == n * rounds, (end, n)
    return [
        ("engine append_values, 100 B values, batches of 1000", f"{engine_rate:,.0f} rec/s",
         f"best of {rounds}"),
        ("cat 100-byte lines > append", f"{cat_rate:,.0f} rec/s", f"{cat_rate / engine_rate:.0%} of engine"),
    ], end


def read_rows(base: Path, log_dir: Path) -> list[Row]:
    """Segments through the mount vs directly, and `records`."""
    data = base / "data" / "bench-0"
    seg_names = sorted(p.name for p in data.glob("*.log"))
    sealed = seg_names[0]  # the oldest: sealed once the log has rolled
    direct_cat = cat_seconds(data / sealed)
    mount_cat = cat_seconds(log_dir / "segments" / sealed)
    size_mb = (data / sealed).stat().st_size / 1e6
    direct = read_rate([data / s for s in seg_names])
    through = read_rate([log_dir / "segments" / s for s in seg_names])
    records = read_rate([log_dir / "records"], rounds=1)
    records_mb = (log_dir / "records").stat().st_size / 1e6
    cat_records = records_mb / cat_seconds(log_dir / "records", rounds=1)
    return [
        ("cat segments/<sealed>.log vs cat of the file, warm", f"{size_mb / mount_cat:,.0f} MB/s",
         f"{direct_cat / mount_cat:.2f}x of direct ({size_mb / direct_cat:,.0f} MB/s)"),
        ("read segments/*.log directly", f"{direct:,.0f} MB/s", f"{len(seg_names)} files"),
        ("read segments/*.log through the mount", f"{through:,.0f} MB/s",
         f"{through / direct:.0%} of direct"),
        ("read records through the mount", f"{records:,.0f} MB/s",
         f"{records * 1e6 / (LINE + 1):,.0f} rec/s"),
        ("cat records > /dev/null", f"{cat_records:,.0f} MB/s", "st_blksize 1 MiB: cat reads 1 MiB"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000, help="lines cat into append")
    parser.add_argument("--lookups", type=int, default=20_000, help="random by-offset files per figure")
    parser.add_argument("--turns", type=int, default=5,
                        help="by-offset turns on each mount, alternated (medians)")
    parser.add_argument("--segment-bytes", default="64MiB")
    parser.add_argument("--rounds", type=int, default=2, help="engine/cat rounds (best of)")
    parser.add_argument("--latency-seconds", type=float, default=5.0, help="per latency figure")
    parser.add_argument("--loop", choices=("single", "multi"), default="multi", help="libfuse loop")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args()

    base = args.keep or Path(tempfile.mkdtemp(prefix="seglogfs-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    lines = base / "lines.txt"
    with open(lines, "wb") as f:
        block = b"".join(b"%0*d\n" % (LINE, i) for i in range(10_000))
        for _ in range(args.records // 10_000):
            f.write(block)
    n = args.records // 10_000 * 10_000

    rows: list[Row] = []
    proc, mount = start_daemon(base, args.segment_bytes, args.loop)
    try:
        log_dir = mount / "bench-0"
        appended, n = append_rows(base, lines, log_dir, n, args.rounds)
        rows += appended
        subprocess.run(["sync"], check=True)
        floor_proc, floor_mount = start_empty_fs(base, n, args.loop)
        try:
            rows += by_offset_rows(log_dir, floor_mount / "bench-0", n, args.lookups, args.turns,
                                   (proc.pid, floor_proc.pid))
            rows += active_segment_rows(base, log_dir, floor_mount / "bench-0")
        finally:
            stop_daemon(floor_proc, floor_mount)
        rows.append(engine_reads(base / "data" / "bench-0", n, args.lookups))
        rows.append(latency_under(log_dir, n, [sys.executable, "-c", FSYNC_WRITER, str(log_dir / "append")],
                                  args.latency_seconds, "a writer fsyncs every write"))
        rows.append(latency_under(log_dir, n, ["sh", "-c", f"while :; do cat {log_dir}/records; done"],
                                  args.latency_seconds, "another process reads records"))
        rows += read_rows(base, log_dir)
    finally:
        stop_daemon(proc, mount)
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)

    width = max(len(r[0]) for r in rows)
    print(f"\nseglogfs FUSE benchmark ({n:,} records of {LINE} bytes, {args.loop}-threaded libfuse loop)\n")
    print(f"{'what':<{width}}  {'result':>24}  note")
    print(f"{'-' * width}  {'-' * 24}  {'-' * 20}")
    for what, result, note in rows:
        print(f"{what:<{width}}  {result:>24}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""FUSE mount benchmark: the mount side by side with the engine and with direct file access, one run.

    .venv/bin/python bench/fuse.py [--records 2000000] [--lookups 20000] [--keep DIR]

Starts a real seglogd on a temporary data dir and mount point, then measures:
- ``cat`` of a file of 100-byte lines into ``append`` (records/s), and the engine's ``append_values``
  of the same values in the same run (batches of 1000, the engine target's shape) -> ratio;
- open/read/close of random ``by-offset/<n>`` from this one Python process (files/s);
- reading ``segments/*.log`` through the mount vs directly (MB/s, ratio), warm page cache both ways;
- reading ``records`` through the mount (MB/s).
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from seglogfs.config import LogConfig  # noqa: E402
from seglogfs.log import Log  # noqa: E402

LINE = 100  # bytes per value (plus the newline in the file)
READ_SIZE = 1 << 20


def mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(len(p) > 1 and p[1] == target for p in (line.split() for line in f))


def start_daemon(base: Path, segment_bytes: str) -> tuple[subprocess.Popen, Path]:
    mount = base / "mnt"
    config = base / "seglogfs.yaml"
    config.write_text(json.dumps({
        "data_dir": str(base / "data"), "mount_point": str(mount),
        "defaults": {"segment.bytes": segment_bytes}, "logs": {"bench-0": {}},
    }))
    err = open(base / "seglogd.stderr", "wb")  # noqa: SIM115 (kept open for the daemon's life)
    proc = subprocess.Popen([sys.executable, "-m", "seglogd", "--config", str(config)], cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    deadline = time.monotonic() + 30
    while not mounted(mount):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"seglogd did not mount:\n{(base / 'seglogd.stderr').read_text()}")
        time.sleep(0.05)
    os.stat(mount)
    return proc, mount


def stop_daemon(proc: subprocess.Popen, mount: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    if mounted(mount):
        subprocess.run(["fusermount3", "-uz", str(mount)], check=False)


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


# Over 60 lines on purpose: one linear script of measurements, printed in the order it runs them.
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000, help="lines cat into append")
    parser.add_argument("--lookups", type=int, default=20_000, help="random by-offset open/read/close")
    parser.add_argument("--segment-bytes", default="64MiB")
    parser.add_argument("--rounds", type=int, default=2, help="engine/cat rounds (best of)")
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

    rows: list[tuple[str, str, str]] = []
    proc, mount = start_daemon(base, args.segment_bytes)
    try:
        log_dir = mount / "bench-0"
        read_all(lines)  # the input in page cache
        # Alternate engine and mount runs, each after a sync: with hundreds of MB written, dirty-page
        # writeback throttling otherwise penalises whichever runs second. Best of `--rounds` each.
        engine_rate = cat_rate = 0.0
        for _i in range(args.rounds):
            os.sync()
            engine_rate = max(engine_rate, engine_append(base, n, 1000))
            os.sync()
            start = time.perf_counter()
            subprocess.run(f"cat {lines} > {log_dir}/append", shell=True, check=True)
            cat_rate = max(cat_rate, n / (time.perf_counter() - start))
        end = json.loads((log_dir / "info").read_text())["end_offset"]
        assert end == n * args.rounds, (end, n)
        rows.append(("engine append_values, 100 B values, batches of 1000", f"{engine_rate:,.0f} rec/s",
                     f"best of {args.rounds}"))
        rows.append(("cat 100-byte lines > append", f"{cat_rate:,.0f} rec/s",
                     f"{cat_rate / engine_rate:.0%} of engine"))
        n = end

        rng = random.Random(1)
        offsets = [rng.randrange(n) for _ in range(args.lookups)]
        start = time.perf_counter()
        for offset in offsets:
            fd = os.open(f"{log_dir}/by-offset/{offset}", os.O_RDONLY)
            os.read(fd, 4096)
            os.close(fd)
        lookups = len(offsets) / (time.perf_counter() - start)
        rows.append(("open/read/close random by-offset/<n>", f"{lookups:,.0f} files/s", "one process"))
        hot = [offsets[i % 100] for i in range(args.lookups)]  # record cached: the FUSE path alone
        start = time.perf_counter()
        for offset in hot:
            fd = os.open(f"{log_dir}/by-offset/{offset}", os.O_RDONLY)
            os.read(fd, 4096)
            os.close(fd)
        rows.append(("open/read/close by-offset/<n>, 100 hot offsets",
                     f"{len(hot) / (time.perf_counter() - start):,.0f} files/s", "FUSE overhead only"))

        seg_names = sorted(p.name for p in (base / "data" / "bench-0").glob("*.log"))
        direct = read_rate([base / "data" / "bench-0" / s for s in seg_names])
        through = read_rate([log_dir / "segments" / s for s in seg_names])
        rows.append(("read segments/*.log directly", f"{direct:,.0f} MB/s", f"{len(seg_names)} files"))
        rows.append(("read segments/*.log through the mount", f"{through:,.0f} MB/s",
                     f"{through / direct:.0%} of direct"))
        records = read_rate([log_dir / "records"], rounds=1)
        rows.append(("read records through the mount", f"{records:,.0f} MB/s",
                     f"{records * 1e6 / (LINE + 1):,.0f} rec/s"))
    finally:
        stop_daemon(proc, mount)
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)

    width = max(len(r[0]) for r in rows)
    print(f"\nseglogfs FUSE benchmark ({n:,} records of {LINE} bytes)\n")
    print(f"{'what':<{width}}  {'result':>18}  note")
    print(f"{'-' * width}  {'-' * 18}  {'-' * 20}")
    for what, result, note in rows:
        print(f"{what:<{width}}  {result:>18}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The mount's read views, side by side with their targets: ``head -n 100000 from/<n>`` in the
middle of a 10^7-record log (target < 0.5 s) and ``cat records.jsonl`` (target >= 300,000 records/s).

    .venv/bin/python bench/views.py [--records 10000000] [--segment-bytes 64MiB] [--keep DIR]

The log is written by the engine (batches of 10,000 values of LINE bytes), then a real seglogd mounts
it. ``from/<n>`` is timed cold (the first from/<n> of the mount: its st_size needs every batch after n
counted once) and warm (another n nearby, after the first: sealed segments' totals are shared), best
of 3 for warm. Always unmounts and stops the daemon.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from fuse import start_daemon, stop_daemon  # noqa: E402  (bench/fuse.py: one real seglogd)

from seglogfs.config import LogConfig  # noqa: E402
from seglogfs.log import Log  # noqa: E402

LINE = 100
BATCH = 5_000  # under max.message.bytes (1 MiB) at LINE bytes a value


def build_log(data: Path, records: int, segment_bytes: str) -> None:
    """``records`` values of LINE bytes (each naming its offset), written by the engine."""
    cfg = LogConfig.from_mapping({"segment.bytes": segment_bytes})
    lg = Log.open(data / "bench-0", cfg, create=True)
    try:
        for start in range(0, records, BATCH):
            lg.append_values([b"%0*d" % (LINE, i) for i in range(start, min(start + BATCH, records))])
        lg.flush()
    finally:
        lg.close()


def timed(argv: list[str]) -> tuple[float, bytes]:
    t = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, check=True).stdout
    return time.perf_counter() - t, out


def head_from(log_dir: Path, n: int, count: int = 100_000) -> float:
    """Seconds of ``head -n count from/<n>``; checks the first and last line."""
    seconds, out = timed(["head", "-n", str(count), str(log_dir / "from" / str(n))])
    lines = out.splitlines()
    assert len(lines) == count and lines[0] == b"%0*d" % (LINE, n), (len(lines), lines[:1])
    assert lines[-1] == b"%0*d" % (LINE, n + count - 1)
    return seconds


def view_rows(log_dir: Path, records: int) -> list[tuple[str, str, str]]:
    """The figures, as bench/fuse.py's rows: (what, result, note)."""
    middle = records // 2
    cold = head_from(log_dir, middle)
    warm = min(head_from(log_dir, middle + 1_000 * k) for k in range(1, 4))
    stat_seconds, _ = timed(["stat", "-c", "%s", str(log_dir / "records.jsonl")])
    cat_seconds, out = timed(["cat", str(log_dir / "records.jsonl")])
    assert out.count(b"\n") == records
    again, _ = timed(["cat", str(log_dir / "records.jsonl")])
    return [
        (f"head -n 100000 from/{middle} (cold: first from/<n> of the mount)", f"{cold:.2f} s",
         "target < 0.5 s"),
        ("head -n 100000 from/<n> nearby (warm, best of 3)", f"{warm:.2f} s", "target < 0.5 s"),
        ("stat records.jsonl (cold: every batch counted)", f"{stat_seconds:.2f} s", ""),
        ("cat records.jsonl (after the stat)", f"{records / cat_seconds:,.0f} rec/s",
         f"{len(out) / cat_seconds / 1e6:,.0f} MB/s; target >= 300,000 rec/s"),
        ("stat + cat records.jsonl, first time in a mount",
         f"{records / (stat_seconds + cat_seconds):,.0f} rec/s", "the count behind st_size included"),
        ("cat records.jsonl again", f"{records / again:,.0f} rec/s", ""),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--segment-bytes", default="64MiB")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (reuses its log)")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="seglogfs-views-"))
    base.mkdir(parents=True, exist_ok=True)
    if not (base / "data" / "bench-0").exists():
        t = time.perf_counter()
        build_log(base / "data", args.records, args.segment_bytes)
        print(f"built {args.records:,} records in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    subprocess.run(["sync"], check=True)
    proc, mount = start_daemon(base, args.segment_bytes)
    try:
        rows = view_rows(mount / "bench-0", args.records)
    finally:
        stop_daemon(proc, mount)
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"\nseglogfs read views ({args.records:,} records of {LINE} bytes, "
          f"segment.bytes {args.segment_bytes})\n")
    for what, result, note in rows:
        print(f"{what:<{width}}  {result:>16}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

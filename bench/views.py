"""The mount's read views, side by side with their targets: ``head -n 100000 from/<n>`` in the
middle of a 10^7-record log (target < 0.5 s) and ``cat records.jsonl`` (target >= 300,000 records/s).

    .venv/bin/python bench/views.py [--records 10000000] [--segment-bytes 64MiB] [--keep DIR]

The log is written by the engine (batches of 10,000 values of LINE bytes), then a real seglogd mounts
it. ``from/<n>`` is timed cold (the first from/<n> of the mount: its st_size needs every batch after n
counted once) and warm (another n nearby, after the first: sealed segments' totals are shared), best
of 3 for warm. The engine's share of the same work comes first, with no mount (``ValueStream`` in this
process: the first from/<n>'s count and read, and ``records`` / ``records.jsonl`` read in 128 KiB
reads), so the codec's cost and the FUSE side's can be told apart. Always unmounts and stops the daemon.
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
from seglogfs.stream_format import JSON_LINES  # noqa: E402
from seglogfs.views.value_stream import ValueStream  # noqa: E402

Row = tuple[str, str, str]
CHUNK = 128 * 1024  # what the kernel asks a FUSE file for at a time

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


def read_all(stream: ValueStream) -> tuple[float, int]:
    """(seconds, bytes) of reading ``stream`` from its start to its end, CHUNK bytes a read."""
    t = time.perf_counter()
    position = 0
    while chunk := stream.read(position, CHUNK):
        position += len(chunk)
    return time.perf_counter() - t, position


def engine_rows(data: Path, records: int) -> list[Row]:
    """The engine's share, no mount: a fresh Log each time, so nothing is counted yet."""
    middle = records // 2
    rows: list[Row] = []
    lg = Log.open(data / "bench-0", LogConfig.from_mapping({}), read_only=True)
    try:
        t = time.perf_counter()
        stream = ValueStream(lg, first_offset=middle)
        stream.size()
        head = stream.read(0, 100_000 * (LINE + 1))
        seconds = time.perf_counter() - t
        assert head[:LINE] == b"%0*d" % (LINE, middle) and head.count(b"\n") == 100_000
        what = "engine: first from/<n> size() + its first 100,000 lines"
        rows.append((what, f"{seconds:.2f} s", "no mount"))
        values = ValueStream(lg)
        t = time.perf_counter()
        values.size()
        rows.append(("engine: first records size() (every batch counted)", f"{time.perf_counter() - t:.2f} s",
                     "no mount"))
        seconds, nbytes = read_all(values)
        rows.append(("engine: records, ValueStream.read", f"{nbytes / seconds / 1e6:,.0f} MB/s", "no mount"))
        lines = ValueStream(lg, fmt=JSON_LINES)
        t = time.perf_counter()
        lines.size()
        rows.append(("engine: first records.jsonl size()", f"{time.perf_counter() - t:.2f} s", "no mount"))
        seconds, nbytes = read_all(lines)
        rows.append(("engine: records.jsonl, ValueStream.read", f"{records / seconds:,.0f} rec/s",
                     f"{nbytes / seconds / 1e6:,.0f} MB/s; no mount"))
    finally:
        lg.close()
    return rows


def view_rows(log_dir: Path, records: int) -> list[Row]:
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
    rows = engine_rows(base / "data", args.records)
    proc, mount = start_daemon(base, args.segment_bytes)
    try:
        rows += view_rows(mount / "bench-0", args.records)
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

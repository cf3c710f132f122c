"""The two libfuse loops side by side: the same requests on a single-threaded and a multi-threaded
mount, in alternating rounds of one run, so that the machine's load weighs on both alike.

    .venv/bin/python bench/loops.py [--records 200000] [--rounds 8] [--batch 2000]

Starts two seglogd (``SEGLOGFS_FUSE_LOOP=single`` and ``multi``), each with a log of ``--records``
100-byte records, then per round and per mount, in alternating order: ``--batch`` cold
``by-offset/<n>`` reads (os.open/os.read/os.close of offsets not read before), the same offsets again,
and ``cat`` of 100,000 lines into ``append``. Prints the median rate of each and multi/single.
Always unmounts and stops the daemons.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from seglogd_process import start_seglogd, stop_seglogd, write_config  # noqa: E402

LOOPS = ("single", "multi")


def start(base: Path, loop: str) -> tuple[subprocess.Popen, Path]:
    mount = base / "mnt"
    config = write_config(base / "seglogfs.yaml", base / "data", mount, {"segment.bytes": "64MiB"},
                          {"bench-0": {}})
    return start_seglogd(config, mount, loop), mount


def stop(proc: subprocess.Popen, mount: Path) -> None:
    stop_seglogd(proc, mount)


def reads(log_dir: Path, offsets: list[int]) -> float:
    """by-offset files read per second."""
    by_offset = str(log_dir / "by-offset") + "/"
    began = time.perf_counter()
    for n in offsets:
        fd = os.open(by_offset + str(n), os.O_RDONLY)
        os.read(fd, 4096)
        os.close(fd)
    return len(offsets) / (time.perf_counter() - began)


def appends(log_dir: Path, lines: Path, count: int) -> float:
    """Records per second of ``cat lines > append``."""
    began = time.perf_counter()
    subprocess.run(f"cat {lines} > {log_dir / 'append'}", shell=True, check=True)
    return count / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batch", type=int, default=2000, help="by-offset files a round")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="seglogfs-loops-"))
    lines = work / "lines.txt"
    appended = 100_000
    lines.write_bytes(b"".join(b"%099d\n" % i for i in range(appended)))
    daemons: dict[str, tuple[subprocess.Popen, Path]] = {}
    try:
        for loop in LOOPS:
            (work / loop).mkdir()
            daemons[loop] = start(work / loop, loop)
            log_dir = daemons[loop][1] / "bench-0"
            for _ in range(max(args.records // appended, 1)):
                appends(log_dir, lines, appended)
        known = max(args.records // appended, 1) * appended
        offsets = random.Random(7).sample(range(known), args.rounds * args.batch)
        rates: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            batch = offsets[r * args.batch : (r + 1) * args.batch]
            for loop in LOOPS if r % 2 == 0 else reversed(LOOPS):
                log_dir = daemons[loop][1] / "bench-0"
                rates.setdefault((loop, "cold"), []).append(reads(log_dir, batch))
                rates.setdefault((loop, "again"), []).append(reads(log_dir, batch))
                rates.setdefault((loop, "append"), []).append(appends(log_dir, lines, appended))
    finally:
        for proc, mount in daemons.values():
            stop(proc, mount)
        shutil.rmtree(work, ignore_errors=True)
    titles = {"cold": "random by-offset/<n>, cold (files/s)", "again": "the same again (files/s)",
              "append": "cat 100-byte lines > append (rec/s)"}
    print(f"\nmedians of {args.rounds} alternating rounds, one run\n")
    print(f"{'what':<40}{'single':>12}{'multi':>12}{'multi/single':>14}")
    for what, title in titles.items():
        single = statistics.median(rates[("single", what)])
        multi = statistics.median(rates[("multi", what)])
        print(f"{title:<40}{single:>12,.0f}{multi:>12,.0f}{multi / single:>13.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

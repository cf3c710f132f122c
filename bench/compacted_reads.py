"""Reads of a compacted log (offset gaps between batches) against an uncompacted one, side by side.

    .venv/bin/python bench/compacted_reads.py [--appends 200000] [--keys 20000] [--rounds 3]
        [--compare-with DIR] [--no-mount] [--dir /tmp/x]

Builds two logs of one-record batches (100-byte values): ``cleaned-0``, ``--appends`` keyed appends
over ``--keys`` keys cleaned once with ``LogManager.clean_once`` (about one record a key survives,
each in its own batch, with offset gaps between the batches), and ``plain-0``, as many one-record
batches with no gaps. Then, for each code tree (this checkout, and with ``--compare-with DIR`` the
``seglogfs`` package under DIR, e.g. an export of an older commit), over ``--rounds`` rounds in
fresh processes (which tree goes first alternates): engine ``Log.read`` of 3,000 random existing
offsets (batch cache cold: each batch is read once), a whole ``records`` stream (``ValueStream.read``
in 128 KiB reads) and a ``from/<n>`` stream from the middle, and (unless ``--no-mount``) 2,000
``by-offset/<n>`` files opened and read through a read-only ``seglogd`` mount of the same data dir.
Prints mean and p99 per measure (median over the rounds); the machine is shared, so only rows of one
run compare.
"""

from __future__ import annotations

import argparse
import contextlib
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

LOGS = ("plain-0", "cleaned-0")
READS = 3000
MOUNT_READS = 2000
VALUE = b"v" * 100
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def build(data_dir: Path, appends: int, keys: int) -> None:
    """The two logs (see the module docstring), every record in a sealed segment."""
    from seglogfs.config import LogConfig
    from seglogfs.log_manager import LogManager
    from seglogfs.records import ProducerRecord

    cfg = LogConfig.from_mapping(
        {"cleanup.policy": "compact", "segment.bytes": "4MiB", "min.cleanable.dirty.ratio": 0}
    )
    rng = random.Random(1)
    with LogManager(data_dir, cfg) as manager:
        cleaned = manager.create_log("cleaned-0")
        for _ in range(appends):
            cleaned.append([ProducerRecord(key=b"k%d" % rng.randrange(keys), value=VALUE)])
        cleaned.roll()
        assert manager.clean_once() is not None
        survivors = sum(1 for _ in cleaned.iter_records())
        plain = manager.create_log("plain-0")
        for i in range(survivors):
            plain.append([ProducerRecord(key=b"k%d" % i, value=VALUE)])
        plain.roll()


def _stats(seconds: list[float]) -> dict[str, float]:
    us = sorted(s * 1e6 for s in seconds)
    return {"mean": statistics.fmean(us), "p99": us[min(len(us) - 1, int(len(us) * 0.99))]}


def engine_measures(data_dir: Path) -> dict[str, dict[str, float]]:
    """Log.read and stream reads of both logs, in this process (whatever seglogfs it imports)."""
    from seglogfs.config import LogConfig
    from seglogfs.log_manager import LogManager
    from seglogfs.views.value_stream import ValueStream

    out: dict[str, dict[str, float]] = {}
    cfg = LogConfig.from_mapping({"cleanup.policy": "compact", "segment.bytes": "4MiB"})
    with LogManager(data_dir, cfg, read_only=True) as manager:
        for name in LOGS:
            lg = manager.get(name)
            offsets = [r.offset for r in lg.iter_records()]
            lg._invalidate_cache()
            lat = []
            for offset in random.Random(2).sample(offsets, min(READS, len(offsets))):
                start = time.perf_counter()
                lg.read(offset)
                lat.append(time.perf_counter() - start)
            out[f"{name} Log.read"] = _stats(lat)
            for label, first in (("records", None), ("from/<mid>", offsets[len(offsets) // 2])):
                start = time.perf_counter()
                stream = ValueStream(lg, first_offset=first)
                position, size = 0, stream.size()
                while position < size:
                    position += len(stream.read(position, 128 * 1024))
                out[f"{name} {label} stream"] = {"total_ms": (time.perf_counter() - start) * 1e3}
    return out


def mount_measures(data_dir: Path, root: Path) -> dict[str, dict[str, float]]:
    """by-offset reads through a read-only seglogd (started with this process's environment)."""
    import yaml

    from seglogfs.config import LogConfig
    from seglogfs.log_manager import LogManager

    with LogManager(data_dir, LogConfig.from_mapping({}), read_only=True) as manager:
        offsets = {name: [r.offset for r in manager.get(name).iter_records()] for name in LOGS}
    mount = root / "mnt"
    mount.mkdir()
    config = root / "seglogd.yaml"
    logs = {name: {"cleanup.policy": "compact", "segment.bytes": "4MiB"} for name in LOGS}
    config.write_text(yaml.safe_dump(
        {"data_dir": str(data_dir), "mount_point": str(mount), "read_only": True, "logs": logs}
    ))
    from support.mount_fixture import mounted, unmount

    with open(root / "seglogd.stderr", "wb") as err:  # cwd: not the checkout (python -m imports from it)
        daemon = subprocess.Popen([sys.executable, "-m", "seglogd", "--config", str(config)],
                                  cwd=root, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    out: dict[str, dict[str, float]] = {}
    try:
        deadline = time.monotonic() + 60
        while not mounted(mount) and time.monotonic() < deadline:
            time.sleep(0.05)
        for name in LOGS:
            by_offset = mount / name / "by-offset"
            lat = []
            for offset in random.Random(3).sample(offsets[name], min(MOUNT_READS, len(offsets[name]))):
                start = time.perf_counter()
                with open(by_offset / str(offset), "rb") as f:
                    f.read()
                lat.append(time.perf_counter() - start)
            out[f"{name} mount by-offset"] = _stats(lat)
    finally:
        daemon.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(30)
        if daemon.poll() is None:
            daemon.kill()
        unmount(mount)
    return out


def worker(data_dir: Path, with_mount: bool) -> None:
    results = engine_measures(data_dir)
    if with_mount:
        root = Path(tempfile.mkdtemp())
        try:
            results |= mount_measures(data_dir, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    import seglogfs

    print(json.dumps({"seglogfs": seglogfs.__file__, "results": results}))


def run_tree(tree: Path | None, data_dir: Path, with_mount: bool) -> dict[str, dict[str, float]]:
    """The worker in a fresh process importing seglogfs from ``tree`` (None: this checkout)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH", "")]))
    argv = [sys.executable, __file__, "--worker", str(data_dir)] + ([] if with_mount else ["--no-mount"])
    done = subprocess.run(argv, env=env, cwd=data_dir.parent, check=True, capture_output=True, text=True)
    answer = json.loads(done.stdout.splitlines()[-1])
    expected = Path(tree or Path(__file__).resolve().parents[1]).resolve() / "seglogfs"
    assert Path(answer["seglogfs"]).resolve().parent == expected, answer["seglogfs"]
    return answer["results"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--appends", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare-with", type=Path, default=None)
    parser.add_argument("--no-mount", action="store_true")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, not args.no_mount)
        return
    root = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        data_dir = root / "data"
        build(data_dir, args.appends, args.keys)
        trees: dict[str, Path | None] = {"this": None}
        if args.compare_with is not None:
            trees = {"before": args.compare_with, "after": None}
        runs: dict[str, list[dict]] = {label: [] for label in trees}
        for round_no in range(args.rounds):
            order = list(trees.items())
            for label, tree in order[::-1] if round_no % 2 else order:  # alternate who goes first
                runs[label].append(run_tree(tree, data_dir, not args.no_mount))
        print(f"{args.appends:,} appends over {args.keys:,} keys, one record a batch; "
              f"median of {args.rounds} rounds (us; streams: ms)")
        print(f"{'measure':34}" + "".join(f"{label:>32}" for label in trees))
        for measure in runs[next(iter(trees))][0]:
            cells = []
            for label in trees:
                rows = [run[measure] for run in runs[label]]
                cells.append("  ".join(f"{k} {statistics.median(r[k] for r in rows):9.1f}" for k in rows[0]))
            print(f"{measure:34}" + "".join(f"{c:>32}" for c in cells))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

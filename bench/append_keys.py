"""`cat` of 100-byte lines into `append`, side by side in one run: a plain log (values only, the fast
path) and a log with ``fs.append.key.separator: ":"`` (``user12345:<value>`` lines, 100 bytes too).

    .venv/bin/python bench/append_keys.py [--records 500000] [--rounds 3]

Best of ``--rounds`` alternated rounds; one seglogd serves both logs. Always unmounts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuse import REPO, mounted, stop_daemon  # bench/fuse.py

LOGS = {"plain-0": {}, "keyed-0": {"fs.append.key.separator": ":"}}


def start(base: Path) -> tuple[subprocess.Popen, Path]:
    mount, config = base / "mnt", base / "seglogfs.yaml"
    config.write_text(json.dumps({"data_dir": str(base / "data"), "mount_point": str(mount),
                                  "defaults": {"segment.bytes": "64MiB"}, "logs": LOGS}))
    err = open(base / "seglogd.stderr", "wb")  # noqa: SIM115 (kept open for the daemon's life)
    proc = subprocess.Popen([sys.executable, "-m", "seglogd", "--config", str(config)], cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=dict(os.environ))
    deadline = time.monotonic() + 30
    while not mounted(mount) or not all((mount / name).exists() for name in LOGS):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"seglogd did not mount:\n{(base / 'seglogd.stderr').read_text()}")
        time.sleep(0.05)
    return proc, mount


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.records
    base = Path(tempfile.mkdtemp(prefix="seglogfs-bench-keys-"))
    files = {"plain-0": base / "plain.txt", "keyed-0": base / "keyed.txt"}
    files["plain-0"].write_bytes(b"".join(b"%099d\n" % i for i in range(n)))
    files["keyed-0"].write_bytes(b"".join(b"user%05d:%089d\n" % (i % 100_000, i) for i in range(n)))
    best: dict[str, float] = {}
    proc, mount = start(base)
    try:
        for _ in range(args.rounds):
            for name, lines in files.items():
                start_s = time.perf_counter()
                subprocess.run(f"cat {lines} > {mount / name / 'append'}", shell=True, check=True)
                best[name] = max(best.get(name, 0.0), n / (time.perf_counter() - start_s))
        ends = {name: json.loads((mount / name / "info").read_text())["end_offset"] for name in LOGS}
    finally:
        stop_daemon(proc, mount)
        shutil.rmtree(base, ignore_errors=True)
    assert ends == {name: n * args.rounds for name in LOGS}, ends
    print(f"cat {n:,} lines of 100 bytes > append, best of {args.rounds}")
    for name, rate in best.items():
        print(f"  {name:8} {rate:>12,.0f} rec/s  {rate / best['plain-0']:.0%} of plain")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

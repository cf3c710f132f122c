"""Standing campaign: kill -9 the real daemon while writers append through the mount and fsync.

Each round starts writer processes that append numbered lines to ``append`` (several lines per
write(), so one write is one batch) and fsync now and then, reporting on stdout how many of their
records the last fsync covered. The daemon is killed with SIGKILL at a random moment, then restarted
at once or after a random pause. After the last round it is stopped cleanly, ``seglogfs verify`` must
pass, and every record a writer saw fsync'd must be in the log exactly once, in order: for each
writer and round the log holds the records 0..k without gap, repeat or reordering, k covering at
least the last fsync.

Seeded: ``SEGLOG_CAMPAIGN_SEED`` (default below); the seed and the round are in every message.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from support.mount_fixture import fuse_required, seglogd  # noqa: F401  (fixture)

from seglogfs.log_manager import LogManager

SEED = int(os.environ.get("SEGLOG_CAMPAIGN_SEED", "20261123"))
BUDGET_S = 25.0  # rounds run until this much time is spent (about 35 s with start-up and the checks)
MAX_ROUNDS = 18
WRITERS = 2
LOG = "k9-0"

WRITER = r"""
import os, random, sys
path, tag, seed = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
rng = random.Random(seed)
seq = 0
try:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    while True:
        count = rng.randint(1, 40)
        os.write(fd, b"".join(b"%s-%07d\n" % (tag, seq + i) for i in range(count)))
        seq += count
        if rng.random() < 0.4:
            os.fsync(fd)
            print(seq, flush=True)  # records [0, seq) of this tag are durable
        if rng.random() < 0.05:  # sometimes a fresh open file
            os.close(fd)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
except OSError:
    pass  # the daemon died under us
"""

LINE = re.compile(r"(w\d+r\d+)-(\d{7})")


def start_writers(append: Path, round_no: int, seed: int) -> list[tuple[str, subprocess.Popen[str]]]:
    writers = []
    for w in range(WRITERS):
        tag = f"w{w}r{round_no}"
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(append), tag, str(seed * 1000 + round_no * 10 + w)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        writers.append((tag, proc))
    return writers


@fuse_required
@pytest.mark.slow
def test_kill9_during_fsynced_appends_loses_nothing_acknowledged(seglogd) -> None:  # noqa: F811
    import random

    rng = random.Random(SEED)
    d = seglogd(logs={LOG: {"segment.bytes": 32768, "index.interval.bytes": 1024}})
    durable: dict[str, int] = {}  # writer tag -> records covered by its last fsync
    began = time.monotonic()
    rounds = immediate = 0
    while rounds < MAX_ROUNDS and time.monotonic() - began < BUDGET_S:
        where = f"seed {SEED} round {rounds}"
        writers = start_writers(d / LOG / "append", rounds, SEED)
        time.sleep(rng.uniform(0.0, 0.05) if rng.random() < 0.15 else rng.uniform(0.2, 1.0))
        d.kill()
        for tag, proc in writers:
            out, err = proc.communicate(timeout=30)
            assert "Traceback" not in err, f"{where}: writer {tag} failed:\n{err}"
            acknowledged = [int(n) for n in out.split()]
            durable[tag] = max(acknowledged, default=0)
        if rng.random() < 0.5:
            immediate += 1
        else:
            time.sleep(rng.uniform(0.1, 1.5))
        try:
            d.start()
        except AssertionError as exc:
            raise AssertionError(f"{where}: restart failed: {exc}") from None
        assert "Traceback" not in d.stderr(), f"{where}: traceback in the daemon's stderr:\n{d.stderr()}"
        rounds += 1
    assert d.stop() == 0, f"seed {SEED}: the final stop failed:\n{d.stderr()}"
    verify = subprocess.run(
        [sys.executable, "-m", "seglogfs.tools.cli", "verify", str(d.data_dir)],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, (
        f"seed {SEED}, {rounds} rounds: verify failed:\n{verify.stdout}{verify.stderr}"
    )

    with LogManager(d.data_dir, read_only=True) as manager:
        lines = [bytes(r.value or b"").decode() for r in manager.get(LOG).iter_records()]
    seen: dict[str, list[int]] = defaultdict(list)
    for number, line in enumerate(lines):
        match = LINE.fullmatch(line)
        assert match, f"seed {SEED}: record {number} is torn or foreign: {line!r}"
        seen[match[1]].append(int(match[2]))
    for tag, count in durable.items():
        present = seen.get(tag, [])
        assert present == list(range(len(present))), (
            f"seed {SEED}, writer {tag}: records missing, repeated or out of order: "
            f"{len(present)} present, first bad at {next(i for i, n in enumerate(present) if n != i)}"
        )
        assert len(present) >= count, (
            f"seed {SEED}, writer {tag}: {count} records fsync'd, only {len(present)} present"
        )
    total_durable = sum(durable.values())
    print(
        f"kill -9 campaign: seed {SEED}, {rounds} rounds ({immediate} immediate restarts), "
        f"{len(lines)} records, {total_durable} fsync'd, {time.monotonic() - began:.1f} s"
    )
    assert total_durable > 0, f"seed {SEED}: no writer ever got an fsync through"

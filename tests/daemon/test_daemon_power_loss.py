"""Power loss under the real daemon: writers append through the mount and fsync, seglogd runs under the
LD_PRELOAD journal of ``tests/support/power_loss`` (why a journal and which POSIX rules the replay
follows: ``tests/engine/test_power_loss.py`` and docs/architecture.md section 6), and the data dir is
rebuilt as a power loss at many moments would leave it, then loaded.

Each writer appends numbered lines (several a write(), so one write is one batch) and, once an fsync
of its open ``append`` file returned, journals how many of its lines that covered. The daemon stops
with SIGTERM (clean-shutdown marker). After each cut every line an fsync covered before the cut must be
in the log, each writer's lines in order without gap or repeat, no line foreign or torn, and
``seglogfs verify`` must find no damage.

Seeded: ``SEGLOG_POWER_LOSS_SEED``; the seed, mode and cut are in every message.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from support.mount_fixture import fuse_required, seglogd  # noqa: F401  (fixture)
from support.power_loss.replay import Snapshot, build_shim, marks, materialize, read_journal, replay, shim_env

from seglogfs.log_manager import LogManager
from seglogfs.verifier import verify_paths

SEED = int(os.environ.get("SEGLOG_POWER_LOSS_SEED", "20261127"))
LOG = "pl-0"
WRITERS = 2
LINE = re.compile(r"(w\d)-(\d{6})")

WRITER = r"""
import os, random, sys
sys.path.insert(0, sys.argv[4])
from support.power_loss.replay import mark
path, tag, journal = sys.argv[1], sys.argv[2], sys.argv[3]
rng = random.Random(int(sys.argv[5]))
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
seq = 0
for _ in range(120):
    count = rng.randint(1, 30)
    os.write(fd, b"".join(b"%s-%06d\n" % (tag.encode(), seq + i) for i in range(count)))
    seq += count
    if rng.random() < 0.3:
        os.fsync(fd)
        mark(journal, f"ack {tag} {seq}")  # lines [0, seq) of this writer are durable
os.close(fd)
"""


def check_lines(data: Path, acks: dict[str, int], where: str) -> None:
    """The log of ``data`` after the restart: each writer's lines in order, every acknowledged one."""
    with LogManager(data) as manager:
        assert not manager.offline, f"{where}: offline logs {manager.offline}"
        assert LOG in manager.logs or not any(acks.values()), f"{where}: the log is gone"
        records = manager.get(LOG).iter_records() if LOG in manager.logs else iter(())
        lines = [bytes(r.value or b"").decode() for r in records]
    seen: dict[str, list[int]] = defaultdict(list)
    for number, line in enumerate(lines):
        match = LINE.fullmatch(line)
        assert match, f"{where}: record {number} is torn or foreign: {line!r}"
        seen[match[1]].append(int(match[2]))
    for tag, numbers in seen.items():
        assert numbers == list(range(len(numbers))), f"{where}: writer {tag}'s lines repeat or skip"
    for tag, count in acks.items():
        assert len(seen.get(tag, [])) >= count, (
            f"{where}: writer {tag}: {count} lines fsync'd, {len(seen.get(tag, []))} present"
        )
    report = verify_paths([data], decode_records=True)
    assert report.ok, f"{where}: verify after the restart: {report.problems}"


@fuse_required
@pytest.mark.slow
def test_a_power_loss_keeps_every_line_whose_fsync_returned(seglogd, tmp_path: Path) -> None:  # noqa: F811
    lib = build_shim(tmp_path)
    journal = tmp_path / "journal"
    d = seglogd(start=False, logs={LOG: {"segment.bytes": 16384, "index.interval.bytes": 1024,
                                         "segment.index.bytes": 2048}})
    d.data_dir.mkdir(parents=True)
    snapshot = Snapshot.take(d.data_dir)
    d.env.update(shim_env(lib, d.data_dir, journal))
    d.start()
    tests_dir = str(Path(__file__).resolve().parents[1])
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(d / LOG / "append"), f"w{w}", str(journal),
                          tests_dir, str(SEED * 10 + w)], stderr=subprocess.PIPE, text=True)
        for w in range(WRITERS)
    ]
    for proc in writers:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"seed {SEED}: a writer failed:\n{err}"
    time.sleep(1.2)  # a maintenance round: checkpoints
    assert d.stop() == 0, d.stderr()
    entries = read_journal(journal)
    acked = [i for i, text in marks(entries) if text.startswith("ack")]
    assert acked, f"seed {SEED}: no fsync was acknowledged"
    rng = random.Random(SEED)
    chosen = sorted({len(entries), *rng.sample(acked, min(10, len(acked))),
                     *(rng.randrange(len(entries)) for _ in range(6))})
    for keep in (0.0, 0.3):
        for cut in chosen:
            where = f"seed {SEED} keep {keep} cut {cut}/{len(entries)}"
            acks: dict[str, int] = {}
            for index, text in marks(entries):
                if index < cut and text.startswith("ack "):
                    _, tag, count = text.split()
                    acks[tag] = max(acks.get(tag, 0), int(count))
            replayed = tmp_path / f"cut-{keep}-{cut}"
            materialize(replay(snapshot, entries, cut, keep=keep, rng=random.Random(rng.random())), replayed)
            check_lines(replayed, acks, where)
    print(f"power loss under seglogd: seed {SEED}, {len(entries)} journal records, {len(acked)} fsyncs "
          f"acknowledged, {len(chosen)} cuts x 2 modes")

"""Power-loss campaign: the engine in child processes, traced by an LD_PRELOAD journal, then the data
dir rebuilt as a power loss at many moments would leave it, and loaded.

A kill -9 keeps the page cache: every write() the process made reaches the disk. A power loss keeps
only what was synced. This kernel has no device-mapper (no dm-flakey, no dm-log-writes), so the
"device" is ``tests/support/power_loss``: ``journal_shim.c`` (LD_PRELOAD, built with gcc) journals
every change the children make under the data dir in the order the calls returned, with the syncs,
and ``replay.py`` rebuilds the durable state at a chosen journal position (the moment the power goes)
from a snapshot of the dir at start. It follows POSIX durability, not one filesystem's habits:

* ``fsync``/``fdatasync`` of a file make its bytes and size durable, not its name;
* ``msync(MS_SYNC)`` makes the synced bytes of a mapping durable (the indexes are mmap'd: their
  stores are seen through shadow copies of each mapping, compared at every sync and unmap);
* ``fsync`` of a directory makes its entries durable: a create, rename or unlink no directory
  fsync covered may be lost;
* everything else may be lost (the dm-log-writes replay, ``keep=0``) or, in the harsh variant, kept
  per change with a seeded probability, in any order, multi-page writes possibly torn.

A copy of the directory at the moment, or a FUSE passthrough, would be less faithful: a copy holds
everything in the page cache (what kill -9 leaves), and a passthrough sees the same calls as the shim
but adds a mount per run. The journal also lets one run be cut at a hundred moments.

The children run sessions over one data dir (a plain log and a compacted one): seeded appends, rolls,
flushes (each acknowledged in the journal once ``Log.flush`` returned), checkpoints, cleaner passes
(``.cleaned``/``.swap``/``.deleted``) and producer snapshots (at every roll and close), each session
ended by a clean close (clean-shutdown marker) or ``_exit`` (as kill -9). After each cut the data dir
must load with every acknowledged record present and exact (on the compacted log: or superseded by a
later record of its key), no record that was never written and none at a wrong offset; the log must
then take an append, close, and pass ``seglogfs verify``.

Seeded: ``SEGLOG_POWER_LOSS_SEED``; the seed, mode and cut are in every message.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.power_loss.replay import (
    RENAME,
    Entry,
    Snapshot,
    build_shim,
    marks,
    materialize,
    read_journal,
    replay,
    shim_env,
)

from seglogfs.checkpoint import read_offset_checkpoint
from seglogfs.config import LogConfig
from seglogfs.log_files import RECOVERY_POINT_CHECKPOINT
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord
from seglogfs.verifier import verify_paths

SEED = int(os.environ.get("SEGLOG_POWER_LOSS_SEED", "20261127"))
PLAIN, KEYED = "plain-0", "keyed-0"
CONFIGS = {
    PLAIN: {"segment.bytes": 20000, "index.interval.bytes": 200, "segment.index.bytes": 1024},
    KEYED: {
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0, "min.compaction.lag.ms": 0,
        "segment.bytes": 1500, "index.interval.bytes": 150, "segment.index.bytes": 1024,
        "file.delete.delay.ms": 0,
    },
}

CHILD = r"""
import ctypes, os, random, sys
from seglogfs.cleaner_config import CleanerConfig
from seglogfs.checkpoint import read_offset_checkpoint
from seglogfs.config import LogConfig
from seglogfs.log_files import RECOVERY_POINT_CHECKPOINT
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord
sys.path.insert(0, sys.argv[4])
from support.power_loss.replay import mark
from test_power_loss import CONFIGS, PLAIN, KEYED, plain_value, keyed_record

data, journal, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
configs = {name: LogConfig.from_mapping(cfg) for name, cfg in CONFIGS.items()}
manager = LogManager(data, log_configs=configs, cleaner_config=CleanerConfig(enable=False))
logs = {name: manager.create_log(name) for name in CONFIGS}
mark(journal, f"session {seed}")
for step in range(rng.randint(60, 90)):
    name = rng.choice((PLAIN, KEYED))
    lg = logs[name]
    action = rng.random()
    if action < 0.65:
        first = lg.end_offset
        count = rng.randint(1, 12)
        if name == PLAIN:
            lg.append_values([plain_value(first + i) for i in range(count)])
        else:
            lg.append([keyed_record(first + i) for i in range(count)])
    elif action < 0.73:
        lg.flush()
        mark(journal, f"ack {name} {lg.recovery_point}")
    elif action < 0.83:
        manager.checkpoint()
    elif action < 0.95:
        manager.clean_once()
    else:
        lg.roll()
if rng.random() < 0.5:
    manager.close()
    mark(journal, "closed")
else:
    ctypes.CDLL(None).seglog_pl_flush_mappings()  # the mappings' stores stay in the page cache
    os._exit(137)
"""


def plain_value(offset: int) -> bytes:
    """The value the campaign appends at ``offset`` of the plain log."""
    return b"p%08d-" % offset + b"x" * (offset % 200)  # up to two pages in one append


def keyed_record(offset: int) -> ProducerRecord:
    """The record the campaign appends at ``offset`` of the compacted log (13 keys)."""
    return ProducerRecord(value=b"c%08d" % offset, key=b"k%02d" % (offset * 7 % 13))


def run_sessions(tmp_path: Path, sessions: int) -> tuple[Path, Snapshot, list[Entry]]:
    """Run the child ``sessions`` times under the shim; the data dir's start snapshot and the journal."""
    lib = build_shim(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    journal = tmp_path / "journal"
    snapshot = Snapshot.take(data)
    env = {**os.environ, **shim_env(lib, data, journal)}
    tests_dir = str(Path(__file__).resolve().parents[1])
    here = str(Path(__file__).resolve().parent)
    for session in range(sessions):
        args = [sys.executable, "-c", CHILD, str(data), str(journal), str(SEED * 100 + session), tests_dir]
        child = subprocess.run(
            args, env={**env, "PYTHONPATH": here}, capture_output=True, text=True, timeout=120
        )
        assert child.returncode in (0, 137), f"seed {SEED} session {session}: child failed\n{child.stderr}"
    return data, snapshot, read_journal(journal)


def acknowledged(entries: list[Entry], cut: int) -> dict[str, int]:
    """Per log, the end of the records a ``Log.flush`` that returned before ``cut`` covered."""
    acks: dict[str, int] = {}
    for index, text in marks(entries):
        if index < cut and text.startswith("ack "):
            _, name, end = text.split()
            acks[name] = max(acks.get(name, 0), int(end))
    return acks


def check_restart(replayed: Path, acks: dict[str, int], where: str) -> None:
    """Load the replayed dir as a restart would and check every promise; then append, close, verify."""
    configs = {name: LogConfig.from_mapping(cfg) for name, cfg in CONFIGS.items()}
    with LogManager(replayed, log_configs=configs) as manager:
        assert not manager.offline, f"{where}: offline logs {manager.offline}"
        for name, acked in acks.items():
            assert name in manager.logs, f"{where}: log {name} with {acked} acknowledged records is gone"
        for name, lg in manager.logs.items():
            records = [(r.offset, r.key, r.value) for r in lg.iter_records()]
            for offset, key, value in records:
                expected = (
                    (None, plain_value(offset)) if name == PLAIN
                    else (keyed_record(offset).key, keyed_record(offset).value)
                )
                assert (key, value) == expected, f"{where}: {name} offset {offset} holds {key!r}:{value!r}"
            assert lg.end_offset >= (records[-1][0] + 1 if records else 0), f"{where}: {name} end"
            present = {offset for offset, _, _ in records}
            acked = acks.get(name, 0)
            if name == PLAIN:
                missing = [o for o in range(acked) if o not in present]
            else:
                newest = {}
                for offset, key, _ in records:
                    newest[key] = max(newest.get(key, -1), offset)
                missing = [
                    o for o in range(acked)
                    if o not in present and newest.get(keyed_record(o).key, -1) < o
                ]
            assert not missing, f"{where}: {name} lost acknowledged offsets {missing[:10]} (acked {acked})"
            end = lg.end_offset
            info = lg.append_values([plain_value(end)]) if name == PLAIN else lg.append([keyed_record(end)])
            assert info.first_offset == end, f"{where}: {name} appended at {info.first_offset}, end {end}"
    # Notes (untrimmed indexes of sealed segments, which a first use rebuilds) are what a power loss
    # leaves below the recovery point, as after a broker's; damage is not.
    report = verify_paths([replayed], decode_records=True)
    assert report.ok, f"{where}: verify after the restart: {report.problems}"


def cuts(entries: list[Entry], rng: random.Random, count: int) -> list[int]:
    """Moments to cut at: just before and after acknowledgements and the syncs around them, and random
    ones; always the end."""
    acks = [i for i, text in marks(entries) if text.startswith(("ack", "closed"))]
    chosen = {len(entries)}
    chosen.update(rng.sample(acks, min(len(acks), count // 2)))
    chosen.update(rng.randrange(len(entries) + 1) for _ in range(count - len(chosen)))
    return sorted(chosen)


@pytest.fixture(scope="module")
def campaign_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Snapshot, list[Entry]]:
    """One run of the sessions, replayed by each mode of the campaign."""
    return run_sessions(tmp_path_factory.mktemp("campaign"), sessions=3)


@pytest.mark.slow
@pytest.mark.parametrize("keep", [0.0, 0.05, 0.5], ids=["synced-only", "few-kept", "half-kept"])
def test_a_power_loss_at_any_moment_keeps_every_acknowledged_record(
    tmp_path: Path, keep: float, campaign_run: tuple[Path, Snapshot, list[Entry]]
) -> None:
    _, snapshot, entries = campaign_run
    assert any(text.startswith("ack") for _, text in marks(entries)), "no flush was acknowledged"
    rng = random.Random(SEED + int(keep * 1000))
    for cut in cuts(entries, rng, 30):
        where = f"seed {SEED} keep {keep} cut {cut}/{len(entries)}"
        model = replay(snapshot, entries, cut, keep=keep, rng=random.Random(rng.random()))
        replayed = tmp_path / f"cut-{cut}"
        materialize(model, replayed)
        try:
            check_restart(replayed, acknowledged(entries, cut), where)
        except BaseException:
            materialize(model, tmp_path / f"cut-{cut}.before")  # the state as the power loss left it
            raise
        shutil.rmtree(replayed)


def test_the_journal_replays_to_the_directory_as_the_process_left_it(tmp_path: Path) -> None:
    """The shim misses nothing: with every change kept, the replay is the data dir byte for byte (a
    call the engine starts to use and the shim does not journal fails here, or as unsupported)."""
    data, snapshot, entries = run_sessions(tmp_path, sessions=2)
    replayed = tmp_path / "replayed"
    materialize(replay(snapshot, entries, len(entries), keep=1.0, torn=0), replayed)

    def tree(root: Path) -> dict[str, bytes | None]:
        return {
            str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))
        }

    assert tree(replayed) == tree(data)


SWAP_CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0, "segment.bytes": 600,
               "segment.index.bytes": 1024}
SWAP_CHILD = r"""
import sys
from seglogfs.cleaner_config import CleanerConfig
from seglogfs.checkpoint import read_offset_checkpoint
from seglogfs.config import LogConfig
from seglogfs.log_files import RECOVERY_POINT_CHECKPOINT
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord
sys.path.insert(0, sys.argv[3])
from support.power_loss.replay import mark

from test_power_loss import SWAP_CONFIG
manager = LogManager(sys.argv[1], log_configs={"keyed-0": LogConfig.from_mapping(SWAP_CONFIG)},
                     cleaner_config=CleanerConfig(enable=False))
lg = manager.create_log("keyed-0")
for i in range(60):
    lg.append([ProducerRecord(value=b"v%03d" % i, key=b"k%d" % (i % 7))])
lg.flush()
mark(sys.argv[2], f"ack keyed-0 {lg.end_offset}")
assert manager.clean_once() is not None
"""


def test_a_power_loss_during_a_cleaner_swap_keeps_the_replaced_records(tmp_path: Path) -> None:
    """The clean's renames (``.cleaned`` -> ``.swap``, the replaced files -> ``.deleted``, ``.swap`` ->
    final) reach the disk in any order unless a directory fsync orders them. A replaced ``.log`` whose
    ``.deleted`` rename is on disk while the ``.swap`` is not would be deleted by the next load with
    no swap to stand in for it: every step's renames must be durable before the next step's start."""
    lib = build_shim(tmp_path)
    data, journal = tmp_path / "data", tmp_path / "journal"
    data.mkdir()
    snapshot = Snapshot.take(data)
    tests_dir = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, **shim_env(lib, data, journal), "PYTHONPATH": str(Path(__file__).resolve().parent)}
    args = [sys.executable, "-c", SWAP_CHILD, str(data), str(journal), tests_dir]
    subprocess.run(args, env=env, check=True, timeout=120)
    entries = read_journal(journal)
    acks = acknowledged(entries, len(entries))
    steps = (".deleted", ".swap")
    renames = [i for i, e in enumerate(entries) if e.op == RENAME and e.path2.endswith(steps)]
    assert renames, "the clean renamed nothing"
    for i in renames:  # the power goes right after each rename, which alone reached the disk
        replayed = tmp_path / f"cut-{i}"
        materialize(replay(snapshot, entries, i + 1, forced={i}), replayed)
        with LogManager(replayed, log_configs={"keyed-0": LogConfig.from_mapping(SWAP_CONFIG)}) as manager:
            latest = {r.key: r.value for r in manager.get("keyed-0").iter_records()}
        assert latest == {b"k%d" % k: b"v%03d" % max(range(k, acks["keyed-0"], 7)) for k in range(7)}, (
            f"cut after {entries[i].path1} -> {entries[i].path2}"
        )


def _lose_the_second_page(tmp_path: Path, *, roll_after: bool) -> tuple[LogConfig, int]:
    """A log flushed after 10 records, then 140 more in its first segment (and, ``roll_after``, a roll
    and 10 in the next), copied as a kill -9 leaves it (``tmp_path/lost``) with the first segment's
    second page never written back (zeros): the config and the flushed end."""
    data = tmp_path / "data"
    cfg = LogConfig.from_mapping(CONFIGS[PLAIN])
    with LogManager(data, log_configs={PLAIN: cfg}) as manager:
        lg = manager.create_log(PLAIN)
        lg.append_values([plain_value(o) for o in range(10)])
        lg.flush()
        manager.checkpoint()
        flushed = lg.recovery_point
        for first in range(10, 150, 5):
            lg.append_values([plain_value(o) for o in range(first, first + 5)])
        if roll_after:
            lg.roll()
            lg.append_values([plain_value(o) for o in range(150, 160)])
        shutil.copytree(data, tmp_path / "lost")
    first_segment = tmp_path / "lost" / PLAIN / "00000000000000000000.log"
    assert first_segment.stat().st_size > 3 * 4096
    with first_segment.open("r+b") as f:
        f.seek(4096)
        f.write(bytes(4096))
    return cfg, flushed


def _recovered_prefix(tmp_path: Path, cfg: LogConfig, flushed: int) -> LogManager:
    """The lost copy opened: every record up to its end, none lost that a flush covered, none past
    the lost page. The manager is returned open."""
    manager = LogManager(tmp_path / "lost", log_configs={PLAIN: cfg})
    lg = manager.get(PLAIN)
    records = [(r.offset, r.value) for r in lg.iter_records()]
    assert flushed <= lg.end_offset < 150
    assert records == [(o, plain_value(o)) for o in range(lg.end_offset)]
    return manager


def test_a_lost_page_past_the_recovery_point_is_cut_with_what_follows(tmp_path: Path) -> None:
    """Pages are written back in any order: a power loss may keep a later page of the active segment
    and lose an earlier one (zeros) past the flushed end. Nothing there was promised durable; kept in
    place, the stretch would be damage for ever (EIO, verify exit 1). It is cut as a torn tail."""
    cfg, flushed = _lose_the_second_page(tmp_path, roll_after=False)
    _recovered_prefix(tmp_path, cfg, flushed).close()
    assert verify_paths([tmp_path / "lost"]).ok


def test_a_lost_page_of_a_sealed_segment_past_the_recovery_point_is_cut_with_the_segments_after_it(
    tmp_path: Path,
) -> None:
    """A roll just before the power loss leaves the sealed segment's last pages unflushed too; one of
    them lost, with a later page kept, was damage kept in place for ever (iter_records raised, verify
    failed: found by the campaign). It is cut as in the active segment, and the segments after it,
    which hold only records no flush covered, are deleted, as Kafka's recovery does."""
    cfg, flushed = _lose_the_second_page(tmp_path, roll_after=True)
    with _recovered_prefix(tmp_path, cfg, flushed) as manager:
        lg = manager.get(PLAIN)
        assert len(lg.segments) == 1
        end = lg.end_offset
        assert lg.append_values([plain_value(end)]).first_offset == end
    assert not list((tmp_path / "lost" / PLAIN).glob("00000000000000000150.*"))
    assert verify_paths([tmp_path / "lost"]).ok


def test_a_clean_close_whose_index_trims_a_power_loss_lost_loads_and_closes_again(tmp_path: Path) -> None:
    """The clean-shutdown marker is fsync'd; the trims of the active segment's indexes before it are
    not. A power loss may keep the marker with the indexes at their preallocated length, zeros: an
    empty active segment must not take those for entries (a full time index fails the next close)."""
    data = tmp_path / "data"
    cfg = LogConfig.from_mapping(CONFIGS[PLAIN])
    with LogManager(data, log_configs={PLAIN: cfg}) as manager:
        lg = manager.create_log(PLAIN)
        lg.append_values([plain_value(o) for o in range(10)])
        lg.roll()
    for suffix in (".index", ".timeindex"):
        index = data / PLAIN / f"00000000000000000010{suffix}"
        assert index.stat().st_size == 0
        index.write_bytes(bytes(1020 if suffix == ".timeindex" else 1024))
    for _ in range(2):
        with LogManager(data, log_configs={PLAIN: cfg}) as manager:
            lg = manager.get(PLAIN)
            assert [r.value for r in lg.iter_records()] == [plain_value(o) for o in range(lg.end_offset)]
            lg.append_values([plain_value(lg.end_offset)])
    assert verify_paths([data]).ok


def test_a_recovered_log_vouches_for_nothing_until_a_flush(tmp_path: Path) -> None:
    """After a kill -9 the unflushed records are in the page cache: a restart finds them whole, but a
    power loss can still take them. The recovery point (and its checkpoint) stays where the last
    flush left it until a flush fsyncs them; a checkpoint beyond would let the load after a power loss
    skip recovering them (or keep their lost pages as damage)."""
    data = tmp_path / "data"
    cfg = LogConfig.from_mapping(CONFIGS[PLAIN])
    with LogManager(data, log_configs={PLAIN: cfg}) as manager:
        lg = manager.create_log(PLAIN)
        lg.append_values([plain_value(o) for o in range(10)])
        lg.roll()
        lg.append_values([plain_value(o) for o in range(10, 30)])
        lg.flush()
        lg.append_values([plain_value(o) for o in range(30, 40)])
        manager.checkpoint()
        shutil.copytree(data, tmp_path / "killed")  # the files as a kill -9 leaves them
    with LogManager(tmp_path / "killed", log_configs={PLAIN: cfg}) as manager:
        lg = manager.get(PLAIN)
        assert lg.end_offset == 40 and lg.recovery_point == 30
        manager.checkpoint()
        assert read_offset_checkpoint(tmp_path / "killed" / RECOVERY_POINT_CHECKPOINT)[("plain", 0)] == 30
        lg.flush()
        assert lg.recovery_point == 40

"""Kill -9 during compaction: at every step of a clean (``SEGLOGFS_CLEANER_CRASH_AT``), and at random
moments while a writer appends and the cleaner runs. The log always loads, verifies, and holds each
key's latest acknowledged record; a clean of one group loads to exactly the pre- or post-clean log."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.cleaner_helpers import (
    assert_verifies,
    compact_config,
    engine_records,
    kafka_python_records,
    latest_per_key,
    open_manager,
)
from support.engine_helpers import ManualClock

from seglogfs.config import LogConfig
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord
from seglogfs.segment_swap import CRASH_AT_ENV

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import json, sys
    from seglogfs.cleaner_config import CleanerConfig
    from seglogfs.config import LogConfig
    from seglogfs.log_manager import LogManager
    data_dir, settings, now_ms = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    manager = LogManager(data_dir, LogConfig.from_mapping(settings), clock=lambda: now_ms / 1000,
                         cleaner_config=CleanerConfig(dedupe_buffer_size=24 * 1000))
    while manager.clean_once(now_ms) is not None:
        pass
    manager.close()
    """
)


def settings(segment_bytes: int) -> dict:
    return {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": 0,
        "segment.bytes": segment_bytes,
        "segment.index.bytes": 1200,
        "index.interval.bytes": 100,
        "delete.retention.ms": 0,  # tombstones go on the first clean after their horizon is set
        "file.delete.delay.ms": 0,
    }


def build(data_dir: Path, segment_bytes: int, clock: ManualClock) -> list:
    """A compacted log of 5 sealed segments: 12 keys rewritten, tombstones, one of them cleaned once
    already (so that its tombstones carry a delete horizon)."""
    manager = open_manager(
        data_dir,
        compact_config(**{k.replace(".", "_"): v for k, v in settings(segment_bytes).items()}),
        clock,
    )
    lg = manager.create_log("table-0")
    rng = random.Random(7)
    for round_ in range(5):
        for i in range(30):
            key = b"k%d" % rng.randrange(12)
            value = None if rng.random() < 0.15 else b"v%d-%d" % (round_, i)
            lg.append([ProducerRecord(key=key, value=value), ProducerRecord(key=b"x%d" % i, value=b"%d" % i)])
        lg.roll()
        if round_ == 2:
            manager.clean_once(clock.ms)
    records = engine_records(lg)
    manager.close()
    return records


def clean_in_child(data_dir: Path, segment_bytes: int, now_ms: int, crash_at: int | None) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(CRASH_AT_ENV, None)
    if crash_at is not None:
        env[CRASH_AT_ENV] = str(crash_at)
    args = [sys.executable, "-c", CHILD, str(data_dir), json.dumps(settings(segment_bytes)), str(now_ms)]
    return subprocess.run(args, env=env, timeout=120).returncode


def live(records: list) -> dict:
    """Each key's latest record, keys whose latest is a tombstone left out."""
    return {k: v for k, v in latest_per_key(records).items() if v[1] is not None}


def load(data_dir: Path, segment_bytes: int, clock: ManualClock) -> list:
    cfg = compact_config(**{k.replace(".", "_"): v for k, v in settings(segment_bytes).items()})
    with LogManager(data_dir, cfg, clock=clock) as manager:
        lg = manager.get("table-0")
        records = engine_records(lg)
        leftovers = [p.name for p in lg.dir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
        assert not leftovers
    assert kafka_python_records(data_dir / "table-0") == records
    assert_verifies(data_dir / "table-0")
    return records


def clean_fully(data_dir: Path, segment_bytes: int, now_ms: int, clock: ManualClock) -> None:
    cfg = compact_config(**{k.replace(".", "_"): v for k, v in settings(segment_bytes).items()})
    with open_manager(data_dir, cfg, clock, dedupe_buffer_size=24 * 1000) as manager:
        while manager.clean_once(now_ms) is not None:
            pass


@pytest.mark.parametrize(
    "segment_bytes",
    [100_000, pytest.param(900, marks=pytest.mark.slow)],
    ids=["one-group", "many-groups"],
)
def test_kill_at_every_step_of_the_clean(tmp_path: Path, segment_bytes: int) -> None:
    clock = ManualClock()
    original = tmp_path / "original"
    before = build(original, segment_bytes, clock)
    now_ms = clock.ms + 1000
    done = tmp_path / "done"
    shutil.copytree(original, done)
    assert clean_in_child(done, segment_bytes, now_ms, None) == 0
    after = load(done, segment_bytes, clock)
    assert len(after) < len(before)
    table = live(after)
    # Many groups repeat one group's steps: every 4th step (a stride no group's step count divides
    # evenly, so each kind of step is hit in some group) keeps the campaign within the suite's time.
    stride = 1 if segment_bytes == 100_000 else 4
    step, outcomes = 1 - stride, set()
    while True:
        step += stride
        trial = tmp_path / f"kill-{step}"
        shutil.copytree(original, trial)
        code = clean_in_child(trial, segment_bytes, now_ms, step)
        if code == 0:
            break
        assert code == 137
        loaded = load(trial, segment_bytes, clock)
        if segment_bytes == 100_000:  # one output segment: all or nothing
            assert loaded in (before, after), f"kill at step {step}"
            outcomes.add("before" if loaded == before else "after")
        else:  # each group all or nothing: between the two
            assert set(after) <= set(loaded) <= set(before), f"kill at step {step}"
        # Nothing lost: the same table as the clean gives (tombstones past their horizon aside).
        assert live(loaded) == table
        # ... and cleaning it again ends where the uninterrupted clean ended (a tombstone whose horizon
        # the interrupted clean set, at delete.retention.ms=0, may be gone too).
        clean_fully(trial, segment_bytes, now_ms, clock)
        again = load(trial, segment_bytes, clock)
        assert set(again) <= set(after) and live(again) == table
        shutil.rmtree(trial)
    assert step > 8  # every step of the swap was reached
    if segment_bytes == 100_000:
        assert outcomes == {"before", "after"}


WRITER = textwrap.dedent(
    """
    import json, random, sys
    from seglogfs.cleaner_config import CleanerConfig
    from seglogfs.config import LogConfig
    from seglogfs.log_manager import LogManager
    from seglogfs.records import ProducerRecord
    data_dir, settings, seed = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    manager = LogManager(data_dir, LogConfig.from_mapping(settings),
                         cleaner_config=CleanerConfig(dedupe_buffer_size=24 * 50))
    lg = manager.create_log("table-0")
    print("ready", flush=True)
    while True:
        for _ in range(rng.randrange(1, 20)):
            key = b"k%d" % rng.randrange(40)
            value = None if rng.random() < 0.1 else b"%d" % rng.randrange(10**9)
            text = None if value is None else value.decode()
            print(json.dumps(["try", key.decode(), -1, text]), flush=True)
            info = lg.append([ProducerRecord(key=key, value=value)])  # flush.messages=1: durable
            print(json.dumps(["ack", key.decode(), info.first_offset, text]), flush=True)
        manager.clean_once()
    """
)


@pytest.mark.slow
def test_random_kills_while_writing_and_cleaning(tmp_path: Path) -> None:
    conf = {**settings(600), "flush.messages": 1, "delete.retention.ms": 50}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(CRASH_AT_ENV, None)
    acked: dict[str, tuple[int, str | None]] = {}
    # Per key, the values tried since its last acknowledgement, over every run so far: a kill after an
    # append but before its "ack" leaves a durable write nobody acknowledged, and a later run may never
    # write that key again (a durable, unacknowledged tombstone then removes the key for good once the
    # cleaner passes its horizon).
    unacked: dict[str, list[str | None]] = {}
    rng = random.Random(3)
    deadline = time.monotonic() + 25  # sized for the suite: about 15 kills
    kills = 0
    while time.monotonic() < deadline:
        args = [sys.executable, "-c", WRITER, str(tmp_path), json.dumps(conf), str(kills)]
        child = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
        # Kill only once the log exists: on a loaded machine the interpreter's start alone can take
        # longer than the shortest sleep, and a kill before create_log leaves nothing to check.
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 1.2))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        for line in out.splitlines():
            kind, key, offset, value = json.loads(line)
            if kind == "ack":
                acked[key] = (offset, value)
                unacked.pop(key, None)
            else:
                unacked.setdefault(key, []).append(value)
        kills += 1
        with LogManager(tmp_path, LogConfig.from_mapping(conf)) as manager:
            assert not manager.offline, f"after kill {kills}: {manager.offline}"
            table = latest_per_key(engine_records(manager.get("table-0")))
        for key, (offset, value) in acked.items():
            found = table.get(key.encode())
            if found is not None and found[0] > offset:
                continue  # a later write of the key, durable but killed before it was acknowledged
            if value is None:
                assert found in (None, (offset, None)), key
            elif found is None and None in unacked.get(key, ()):
                continue  # deleted by a tombstone that was durable but not yet acknowledged
            else:
                assert found == (offset, value.encode()), key
        assert_verifies(tmp_path / "table-0")
    assert kills >= 5



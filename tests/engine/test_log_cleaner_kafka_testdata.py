"""The Kafka 4 data dir's compacted internal topics (``__consumer_offsets-*``): they load, read and
match kafka-python before and after a clean of a copy."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support.cleaner_helpers import assert_verifies, engine_records, kafka_python_records, latest_per_key
from support.engine_helpers import ManualClock
from support.testdata import KAFKA_LOG_DIR

from seglogfs.config import LogConfig
from seglogfs.log_manager import LogManager

COMPACTED = LogConfig.from_mapping({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0})


def copy_datadir(tmp_path: Path) -> Path:
    dest = tmp_path / "kafka-logs"
    shutil.copytree(KAFKA_LOG_DIR, dest)
    for root, dirs, files in os.walk(dest):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    os.chmod(dest, 0o755)
    return dest


def test_consumer_offsets_before_and_after_a_clean(tmp_path: Path) -> None:
    data_dir = copy_datadir(tmp_path)
    names = sorted(p.name for p in data_dir.iterdir() if p.name.startswith("__consumer_offsets-"))
    assert len(names) == 50
    clock = ManualClock()
    configs = dict.fromkeys(names, COMPACTED)
    with LogManager(data_dir, LogConfig(), configs, clock=clock) as manager:
        before = {name: engine_records(manager.get(name)) for name in names}
        assert any(before.values())
        for name in names:
            assert kafka_python_records(data_dir / name) == before[name]
        for name in names:  # the active segment is never cleaned: seal what there is
            if manager.get(name).end_offset > manager.get(name).segments[-1].base_offset:
                manager.get(name).roll()
        cleaned = 0
        while manager.clean_once(clock.ms) is not None:
            cleaned += 1
        assert cleaned >= 1
        after = {name: engine_records(manager.get(name)) for name in names}
    for name in names:
        assert kafka_python_records(data_dir / name) == after[name]
        assert set(after[name]) <= set(before[name])  # offsets, keys and values kept as they were
        live = {k: v for k, v in latest_per_key(before[name]).items() if v[1] is not None}
        assert {k: v for k, v in latest_per_key(after[name]).items() if v[1] is not None} == live
        assert_verifies(data_dir / name)
    busy = max(names, key=lambda n: len(before[n]))
    assert len(after[busy]) < len(before[busy])  # offset commits of the same group are compacted

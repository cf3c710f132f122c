"""``__consumer_offsets`` both ways with a real broker: seglogfs reads the commits the broker's group
coordinator wrote, and the broker's coordinator serves (OffsetFetch) commits seglogfs wrote into its
log while it was stopped (the ``adopted_logs`` fixture, tests/support/oracle_logs.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.kafka_broker import KafkaBroker
from support.oracle_logs import (
    BROKER_COMMITS,
    SEGLOGFS_COMMITS,
    AdoptedLogs,
    broker_complaints,
    committed_offset,
)

from seglogfs.config import LogConfig
from seglogfs.consumer_offsets import replay
from seglogfs.log import Log

pytestmark = pytest.mark.oracle


def test_the_broker_serves_commits_seglogfs_wrote_and_seglogfs_reads_the_brokers(
    kafka_broker: KafkaBroker, adopted_logs: AdoptedLogs, tmp_path: Path
) -> None:
    for (group, topic, partition), expected in {**BROKER_COMMITS, **SEGLOGFS_COMMITS}.items():
        assert committed_offset(kafka_broker.bootstrap, group, topic, partition) == expected, group
    assert broker_complaints(kafka_broker, adopted_logs, "__consumer_offsets-0") == []
    copy = tmp_path / adopted_logs.offsets_dir.name  # the broker owns the original
    shutil.copytree(adopted_logs.offsets_dir, copy)
    with Log.open(copy, LogConfig.from_mapping({"cleanup.policy": "compact"}), read_only=True) as lg:
        state = replay((r.key, r.value) for r in lg.iter_records())
    got = {(k.group, k.topic, k.partition): (v.offset, v.metadata) for k, v in state.offsets.items()}
    assert got == {**BROKER_COMMITS, **SEGLOGFS_COMMITS}
    assert state.skipped == 0

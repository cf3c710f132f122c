"""Committed offsets in Kafka's ``__consumer_offsets`` format: the group's partition and the records a
real Kafka 4 broker wrote (shared/testdata) read back; what the listener writes reads back the same."""

from __future__ import annotations

from pathlib import Path

from support.testdata import KAFKA_LOG_DIR

from seglogfs.kafka.offsets_topic import (
    Committed,
    OffsetStore,
    commit_key,
    commit_value,
    offsets_partition,
    parse_commit,
)
from seglogfs.log_manager import LogManager


def test_group_partition_is_kafkas() -> None:
    # the broker that wrote shared/testdata kept demo-group's commits in __consumer_offsets-15
    assert offsets_partition("demo-group") == 15
    assert (KAFKA_LOG_DIR / "__consumer_offsets-15" / "00000000000000000000.log").stat().st_size > 0
    assert offsets_partition("") == 0 and offsets_partition("grp") == 29  # "grp".hashCode() = 102629


def test_a_kafka_brokers_commits_read_back() -> None:
    with LogManager(KAFKA_LOG_DIR, read_only=True) as manager:
        store = OffsetStore(manager)
    committed = store.committed("demo-group")  # OffsetCommitValue v4 (flexible), as Kafka 4 writes it
    assert set(committed) == {("demo-topic", p) for p in range(3)}
    assert {c.offset for c in committed.values()} == {0}  # its topic is empty


def test_what_we_write_reads_back(tmp_path: Path) -> None:
    committed = Committed(42, 3, "meta ü", 1_700_000_000_000)
    assert parse_commit(commit_key("g", "t", 7), commit_value(committed)) == (("g", "t", 7), committed)
    assert parse_commit(commit_key("g", "t", 7), None) == (("g", "t", 7), None)
    with LogManager(tmp_path) as manager:
        OffsetStore(manager).commit("g", {("t", 7): committed})
    with LogManager(tmp_path) as manager:
        assert OffsetStore(manager).committed("g") == {("t", 7): committed}
        [name] = [n for n in manager.logs if n.startswith("__consumer_offsets-")]
        assert manager.get(name).config.cleanup_policy == ("compact",)

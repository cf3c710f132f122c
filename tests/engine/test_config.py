"""LogConfig: units, Kafka precedence and ranges (the YAML around it: tests/daemon/test_daemon_config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglogfs.config import LONG_MAX, LogConfig, parse_duration_ms, parse_size
from seglogfs.errors import ConfigError
from seglogfs.log import Log

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


# --- units -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (4096, 4096),
        ("4096", 4096),
        ("1GiB", GIB),
        ("1gib", GIB),
        ("512MiB", 512 * 1024**2),
        ("10KB", 10_000),
        ("10KiB", 10_240),
        ("1 TB", 10**12),
        ("0.5GiB", GIB // 2),
        ("100B", 100),
        ("-1", -1),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (500, 500),
        ("500", 500),
        ("500ms", 500),
        ("10s", 10_000),
        ("30m", 1_800_000),
        ("30min", 1_800_000),
        ("12h", 12 * HOUR_MS),
        ("7d", 7 * DAY_MS),
        ("1w", 7 * DAY_MS),
        ("1.5h", 5_400_000),
        ("-1", -1),
    ],
)
def test_parse_duration_ms(text: str | int, expected: int) -> None:
    assert parse_duration_ms(text) == expected


@pytest.mark.parametrize(
    ("parse", "text", "reason_part"),
    [
        (parse_size, "1g", "KiB/MiB/GiB"),
        (parse_size, "1m", "KiB/MiB/GiB"),
        (parse_size, "3 bananas", "unknown size unit"),
        (parse_size, "1.3B", "whole number"),
        (parse_size, "", "not a number"),
        (parse_size, True, "boolean"),
        (parse_duration_ms, "7D", "unknown duration unit"),
        (parse_duration_ms, "1.5ms", "whole number"),
        (parse_duration_ms, "soon", "not a number"),
        (parse_duration_ms, [1], "expected a number or a string"),
    ],
)
def test_unit_errors_name_value_and_reason(parse, text: object, reason_part: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text, key="some.key")
    assert info.value.key == "some.key"
    assert info.value.value == text
    assert reason_part in info.value.reason


# --- LogConfig ---------------------------------------------------------------------------------------


def test_kafka_defaults() -> None:
    c = LogConfig()
    assert c.to_dict() == {
        "segment.bytes": GIB,
        "segment.ms": 7 * DAY_MS,
        "segment.jitter.ms": 0,
        "segment.index.bytes": 10485760,
        "index.interval.bytes": 4096,
        "retention.ms": 7 * DAY_MS,
        "retention.bytes": -1,
        "flush.messages": LONG_MAX,
        "flush.ms": LONG_MAX,
        "max.message.bytes": 1048588,
        "message.timestamp.type": "CreateTime",
        "compression.type": "producer",
        "file.delete.delay.ms": 60000,
        "cleanup.policy": "delete",
        "min.cleanable.dirty.ratio": 0.5,
        "min.compaction.lag.ms": 0,
        "max.compaction.lag.ms": LONG_MAX,
        "delete.retention.ms": DAY_MS,
    }
    assert c.codec == "none"
    assert not c.log_append_time
    assert c.deletes


def test_from_mapping_topic_names_with_units() -> None:
    c = LogConfig.from_mapping(
        {
            "segment.bytes": "512MiB",
            "segment.ms": "1h",
            "retention.ms": "30d",
            "retention.bytes": "10GiB",
            "flush.messages": 1000,
            "compression.type": "zstd",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact,delete",
        }
    )
    assert c.segment_bytes == 512 * 1024**2
    assert c.segment_ms == HOUR_MS
    assert c.retention_ms == 30 * DAY_MS
    assert c.retention_bytes == 10 * GIB
    assert c.flush_messages == 1000
    assert c.codec == "zstd"
    assert c.log_append_time
    assert c.cleanup_policy == ("compact", "delete")
    assert c.to_dict()["cleanup.policy"] == "compact,delete"


def test_from_mapping_overrides_base_only_where_given() -> None:
    base = LogConfig.from_mapping({"segment.bytes": "1MiB", "retention.ms": "1d"})
    c = LogConfig.from_mapping({"retention.ms": "2d"}, base)
    assert c.segment_bytes == 1024**2
    assert c.retention_ms == 2 * DAY_MS
    assert base.retention_ms == DAY_MS  # frozen, untouched


def test_none_compression_is_kafkas_uncompressed() -> None:
    c = LogConfig.from_mapping({"compression.type": "none"})
    assert c.to_dict()["compression.type"] == "uncompressed"
    assert c.codec == "none"


def test_segment_index_bytes_minimum_holds_one_entry_of_each_index(tmp_path) -> None:
    """Issue 7 #9: 4-11 passed validation although a .timeindex could not hold one entry; the least
    accepted value, 12, makes a log that appends, rolls (one batch a segment) and reopens."""
    for value in (4, 8, 11):
        with pytest.raises(ConfigError, match=rf"segment.index.bytes={value}: must be at least 12: room"):
            LogConfig.from_mapping({"segment.index.bytes": value})
    cfg = LogConfig.from_mapping({"segment.index.bytes": 12, "index.interval.bytes": 0})
    with Log.open(tmp_path / "tiny-0", cfg, create=True) as log:
        for i in range(5):
            log.append_values([b"a%d" % i, b"b%d" % i])
    with Log.open(tmp_path / "tiny-0", cfg, clean_shutdown=True) as log:
        expected = [b"%s%d" % (c, i) for i in range(5) for c in (b"a", b"b")]
        assert [r.value for r in log.iter_records()] == expected
        assert log.read(7).value == b"b3"
        log.append_values([b"more"])
        assert log.end_offset == 11


def test_index_size_rounding() -> None:
    c = LogConfig.from_mapping({"segment.index.bytes": 67})
    assert c.segment_index_bytes == 67  # stored as given, like Kafka
    assert c.offset_index_bytes == 64
    assert c.time_index_bytes == 60
    assert c.effective_index_bytes(8) == 64
    assert LogConfig().offset_index_bytes == 10485760
    assert LogConfig().time_index_bytes == 10485756  # 873813 entries


def test_broker_level_names() -> None:
    c = LogConfig.from_mapping(
        {
            "log.segment.bytes": "64MiB",
            "log.roll.hours": 12,
            "log.roll.jitter.hours": 1,
            "log.index.size.max.bytes": "1MiB",
            "log.index.interval.bytes": 8192,
            "log.retention.hours": 48,
            "log.retention.bytes": "1GiB",
            "log.flush.interval.messages": 10,
            "log.flush.interval.ms": "1s",
            "log.segment.delete.delay.ms": 0,
            "message.max.bytes": "2MiB",
            "log.message.timestamp.type": "LogAppendTime",
        }
    )
    assert c.segment_bytes == 64 * 1024**2
    assert c.segment_ms == 12 * HOUR_MS
    assert c.segment_jitter_ms == HOUR_MS
    assert c.segment_index_bytes == 1024**2
    assert c.index_interval_bytes == 8192
    assert c.retention_ms == 48 * HOUR_MS
    assert c.retention_bytes == GIB
    assert c.flush_messages == 10
    assert c.flush_ms == 1000
    assert c.file_delete_delay_ms == 0
    assert c.max_message_bytes == 2 * 1024**2
    assert c.log_append_time


def test_retention_minutes_plain_number_is_minutes() -> None:
    assert LogConfig.from_mapping({"log.retention.minutes": 90}).retention_ms == 90 * 60_000
    assert LogConfig.from_mapping({"log.retention.hours": "2d"}).retention_ms == 2 * DAY_MS


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ({"log.roll.hours": 1, "log.roll.ms": 5000}, 5000),
        ({"log.roll.ms": 5000, "log.roll.hours": 1}, 5000),  # order in the mapping does not matter
        ({"log.roll.ms": 5000, "segment.ms": 7000}, 7000),
        ({"segment.ms": 7000, "log.roll.hours": 3}, 7000),
    ],
)
def test_roll_precedence(mapping: dict, expected: int) -> None:
    assert LogConfig.from_mapping(mapping).segment_ms == expected


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ({"log.retention.hours": 1, "log.retention.minutes": 2}, 2 * 60_000),
        ({"log.retention.hours": 1, "log.retention.minutes": 2, "log.retention.ms": 3}, 3),
        ({"log.retention.ms": 3, "retention.ms": 4}, 4),
        ({"log.retention.hours": 5}, 5 * HOUR_MS),
        # KafkaConfig: any negative broker-level retention time means "no limit" (-1).
        ({"log.retention.hours": -5}, -1),
        ({"log.retention.ms": -20}, -1),
    ],
)
def test_retention_precedence(mapping: dict, expected: int) -> None:
    assert LogConfig.from_mapping(mapping).retention_ms == expected


def test_broker_names_refused_where_only_topic_names_apply() -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_mapping({"log.retention.hours": 1}, broker_names=False)
    assert info.value.key == "log.retention.hours"
    assert "retention.ms" in info.value.reason


def test_shadowed_key_is_still_validated() -> None:
    # Kafka validates log.roll.hours (>= 1) even when log.roll.ms takes precedence.
    with pytest.raises(ConfigError) as info:
        LogConfig.from_mapping({"log.roll.ms": 1000, "log.roll.hours": 0})
    assert info.value.key == "log.roll.hours"


@pytest.mark.parametrize(
    ("key", "value", "reason_part"),
    [
        ("segment.bytes", 13, "at least 14"),
        ("segment.bytes", "2GiB", "at most 2147483647"),  # a Java int in Kafka
        ("log.segment.bytes", "10B", "at least 14"),
        ("segment.ms", 0, "at least 1"),
        ("segment.jitter.ms", -1, "at least 0"),
        ("segment.index.bytes", 3, "at least 12"),
        ("segment.index.bytes", 11, "one 12-byte .timeindex entry"),  # issue 7 #9: 4-11 crashed start
        ("log.index.size.max.bytes", 8, "at least 12"),
        ("index.interval.bytes", -1, "at least 0"),
        ("retention.ms", -2, "at least -1"),
        ("retention.ms", "2h30", "not a number with an optional unit"),
        ("flush.messages", 0, "at least 1"),
        ("flush.messages", "10KiB", "no unit"),
        ("flush.ms", -1, "at least 0"),
        ("max.message.bytes", -1, "at least 0"),
        ("file.delete.delay.ms", -1, "at least 0"),
        ("log.roll.hours", 0, "at least 1"),
        ("message.timestamp.type", "createtime", "CreateTime, LogAppendTime"),
        ("compression.type", "brotli", "must be one of"),
        ("cleanup.policy", "delete,archive", "unknown policy 'archive'"),
        ("retention.ms", None, "expected a number"),
        ("segment.ms", False, "boolean"),
        ("segment.bytes", 1.5, "whole number"),
        ("segment.byte", 100, "did you mean segment.bytes"),
        ("min.insync.replicas", 2, "does not support"),
        ("no.such.thing", 1, "unknown config"),
        ("min.cleanable.dirty.ratio", 1.5, "at most 1"),
        ("min.cleanable.dirty.ratio", -0.1, "at least 0"),
        ("min.cleanable.dirty.ratio", "half", "expected a number"),
        ("log.cleaner.min.cleanable.ratio", 2, "at most 1"),
        ("min.compaction.lag.ms", -1, "at least 0"),
        ("max.compaction.lag.ms", 0, "at least 1"),
        ("delete.retention.ms", -1, "at least 0"),
        ("log.cleaner.delete.retention.ms", "1 fortnight", "unknown duration unit"),
    ],
)
def test_every_error_names_key_value_reason(key: str, value: object, reason_part: str) -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_mapping({key: value}, source="unit-test")
    err = info.value
    assert err.key == key
    assert err.value == value
    assert reason_part in err.reason
    assert err.reason.endswith("(in unit-test)")
    assert key in str(err) and repr(value) in str(err)


def test_a_min_compaction_lag_above_the_max_is_refused() -> None:
    """Kafka refuses min.compaction.lag.ms > max.compaction.lag.ms ("conflict topic config setting");
    it was accepted, and the max lag then never forced a clean of the records it covers."""
    with pytest.raises(ConfigError) as info:
        LogConfig.from_mapping({"min.compaction.lag.ms": "2h", "max.compaction.lag.ms": "1h"}, source="t")
    err = info.value
    assert (err.key, err.value) == ("min.compaction.lag.ms", "2h")
    assert "must not exceed max.compaction.lag.ms (3600000)" in err.reason
    base = LogConfig.from_mapping({"min.compaction.lag.ms": 5})
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms"):
        LogConfig.from_mapping({"max.compaction.lag.ms": 4}, base)
    assert (
        LogConfig.from_mapping({"min.compaction.lag.ms": 5, "max.compaction.lag.ms": 5}).max_compaction_lag_ms
        == 5
    )


def test_direct_construction_is_validated() -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig(segment_bytes=1)
    assert info.value.key == "segment.bytes"
    with pytest.raises(ConfigError):
        LogConfig(compression_type="brotli")


def test_configs_are_hashable_values() -> None:
    a = LogConfig.from_mapping({"retention.ms": "1d"})
    b = LogConfig.from_mapping({"retention.ms": DAY_MS})
    assert a == b and hash(a) == hash(b)


def test_from_mapping_refuses_non_mappings() -> None:
    with pytest.raises(ConfigError):
        LogConfig.from_mapping(["segment.bytes"])  # type: ignore[arg-type]


def test_compaction_settings_with_kafka_names_and_broker_spellings() -> None:
    topic = LogConfig.from_mapping(
        {
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.25",
            "min.compaction.lag.ms": "1h",
            "max.compaction.lag.ms": "2d",
            "delete.retention.ms": "10s",
        }
    )
    assert topic.cleanup_policy == ("compact", "delete")
    assert topic.min_cleanable_dirty_ratio == 0.25
    assert topic.min_compaction_lag_ms == 3_600_000
    assert topic.max_compaction_lag_ms == 2 * DAY_MS
    assert topic.delete_retention_ms == 10_000
    broker = LogConfig.from_mapping(
        {
            "log.cleaner.min.cleanable.ratio": 0.1,
            "min.cleanable.dirty.ratio": 0.9,  # the topic-level name wins
            "log.cleaner.min.compaction.lag.ms": 5,
            "log.cleaner.max.compaction.lag.ms": 6,
            "log.cleaner.delete.retention.ms": 7,
        }
    )
    assert broker.min_cleanable_dirty_ratio == 0.9
    lags = (broker.min_compaction_lag_ms, broker.max_compaction_lag_ms, broker.delete_retention_ms)
    assert lags == (5, 6, 7)
    assert LogConfig(min_cleanable_dirty_ratio=1).min_cleanable_dirty_ratio == 1.0


def test_broker_cleaner_keys_are_skipped_in_defaults_and_refused_per_log() -> None:
    mixed = {"log.cleaner.threads": 2, "log.cleaner.enable": False, "segment.bytes": 100}
    assert LogConfig.from_mapping(mixed).segment_bytes == 100
    with pytest.raises(ConfigError) as info:
        LogConfig.from_mapping(mixed, broker_names=False)
    assert info.value.key == "log.cleaner.threads"
    assert "belongs in defaults" in info.value.reason


def test_the_mounts_settings_are_skipped_as_foreign_and_refused_otherwise() -> None:
    """``fs.*`` keys are the mount's (seglogfs.fs.mount_config): skipped when named ``foreign``, an
    unknown config otherwise, with the foreign names among the suggestions."""
    mapping = {"fs.listing.limit": 10, "segment.bytes": 100}
    assert LogConfig.from_mapping(mapping, foreign={"fs.listing.limit"}).segment_bytes == 100
    with pytest.raises(ConfigError, match="unknown config"):
        LogConfig.from_mapping(mapping)
    with pytest.raises(ConfigError, match=r"did you mean fs\.listing\.limit"):
        LogConfig.from_mapping({"fs.listing.limt": 1}, foreign={"fs.listing.limit"})

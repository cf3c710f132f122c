"""LogConfig (units, Kafka precedence and ranges) and the daemon's YAML loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglogd.config import DEFAULT_CONFIG_PATH, DaemonConfig, load_config, parse_config
from seglogfs.config import LONG_MAX, LogConfig, parse_duration_ms, parse_size
from seglogfs.errors import ConfigError
from seglogfs.log import Log

REPO = Path(__file__).resolve().parent.parent
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
        "fs.listing.limit": 100000,
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
            "fs.listing.limit": 10,
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
    assert c.fs_listing_limit == 10


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
        ("fs.listing.limit", 0, "at least 1"),
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


# --- daemon YAML -------------------------------------------------------------------------------------


def test_shipped_default_config_loads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert DEFAULT_CONFIG_PATH == REPO / "config" / "seglogfs.yaml"
    cfg = load_config(REPO / "config" / "seglogfs.yaml")
    assert isinstance(cfg, DaemonConfig)
    # Relative paths resolve against the working directory (design: "runs from the checkout").
    assert cfg.data_dir == tmp_path / "var" / "data"
    assert cfg.mount_point == tmp_path / "var" / "mnt"
    assert cfg.read_only is False and cfg.allow_other is False
    assert cfg.defaults.segment_bytes == GIB
    assert cfg.defaults.retention_ms == 7 * DAY_MS
    assert set(cfg.logs) == {"events-0", "audit-0"}
    assert cfg.logs["events-0"] == cfg.defaults
    assert cfg.logs["audit-0"].retention_ms == 30 * DAY_MS
    assert cfg.logs["audit-0"].codec == "zstd"
    assert cfg.log_overrides["audit-0"] == {"retention.ms": "30d", "compression.type": "zstd"}
    assert cfg.log_config("not-configured") == cfg.defaults
    assert cfg.source == REPO / "config" / "seglogfs.yaml"
    assert load_config() == cfg  # None means the embedded default


def test_full_config(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"""
data_dir: {tmp_path}/data
mount_point: {tmp_path}/mnt
read_only: true
fuse: {{allow_other: true}}
defaults:
  log.retention.hours: 24
  log.segment.bytes: 64MiB
  segment.bytes: 128MiB
logs:
  a-0:
  b: {{retention.ms: 1h}}
"""
    )
    cfg = load_config(path)
    assert cfg.data_dir == tmp_path / "data"
    assert cfg.read_only and cfg.allow_other
    assert cfg.defaults.retention_ms == 24 * HOUR_MS
    assert cfg.defaults.segment_bytes == 128 * 1024**2  # topic-level name wins
    assert cfg.logs["a-0"] == cfg.defaults
    assert cfg.logs["b"].retention_ms == HOUR_MS
    assert cfg.logs["b"].segment_bytes == 128 * 1024**2  # inherits the defaults
    assert cfg.log_overrides == {"a-0": {}, "b": {"retention.ms": "1h"}}


MINIMAL = "data_dir: /srv/d\nmount_point: /srv/m\n"


@pytest.mark.parametrize(
    ("text", "key", "value", "reason_part", "line"),
    [
        (MINIMAL + "logs:\n  x: {retention.ms: 5x}\n", "logs.x.retention.ms", "5x", "unit", 4),
        (MINIMAL + "defaults:\n  segment.bytes: 1\n", "defaults.segment.bytes", 1, "at least 14", 4),
        (MINIMAL + "defaults:\n  bogus: 1\n", "defaults.bogus", 1, "unknown config", 4),
        (MINIMAL + "logs:\n  x: {log.retention.hours: 1}\n", "logs.x.log.retention.hours", 1, "broker", 4),
        (MINIMAL + "logs:\n  'a b': {}\n", "logs.a b", "a b", "may contain only", 4),
        (MINIMAL + "logs:\n  '..': {}\n", "logs...", "..", "not allowed", 4),
        (MINIMAL + "logs:\n  " + "x" * 250 + ": {}\n", "logs." + "x" * 250, "x" * 250, "at most 249", 4),
        (MINIMAL + "logs:\n  x: 5\n", "logs.x", 5, "expected a mapping", 4),
        (MINIMAL + "read_only: yes please\n", "read_only", "yes please", "true or false", 3),
        (MINIMAL + "fuse: {allow_other: 1}\n", "fuse.allow_other", 1, "true or false", 3),
        (MINIMAL + "fuse: {direct_io: true}\n", "fuse.direct_io", True, "unknown setting", 3),
        (MINIMAL + "colour: blue\n", "colour", "blue", "unknown setting", 3),
        ("mount_point: /srv/m\n", "data_dir", None, "missing", None),
        ("data_dir: 5\nmount_point: /srv/m\n", "data_dir", 5, "directory path", 1),
        ("data_dir: /srv/d\nmount_point: /srv/d/mnt\n", "mount_point", "/srv/d/mnt", "overlap", 2),
        ("data_dir: /srv/d\nmount_point: /srv/d\n", "mount_point", "/srv/d", "overlap", 2),
        (
            MINIMAL + "defaults:\n  segment.ms: 1\n  segment.ms: 2\n",
            "defaults.segment.ms",
            "segment.ms",
            "duplicate key",
            5,
        ),
        ("- a\n- b\n", "<document>", ["a", "b"], "mapping", None),
    ],
)
def test_yaml_errors_name_file_key_value_reason(
    tmp_path: Path, text: str, key: str, value: object, reason_part: str, line: int | None
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.key == key
    assert err.value == value
    assert reason_part in err.reason
    assert str(path) in err.reason
    if line is not None:
        assert err.reason.endswith(f"line {line})")


@pytest.mark.parametrize(
    ("text", "line", "offending"),
    [
        (MINIMAL + "logs:\n  x: [1\n", 4, "  x: [1"),
        ("data_dir: /srv/d\n  mount_point: b\n", 2, "  mount_point: b"),
        ("data_dir: a: b\n", 1, "data_dir: a: b"),
        (MINIMAL + "defaults: {segment.bytes: 'unterminated}\n", 3, None),
    ],
)
def test_yaml_syntax_error_gives_file_and_line(
    tmp_path: Path, text: str, line: int, offending: str | None
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.key == "<yaml>"
    assert "YAML syntax error" in err.reason
    assert f"{path}, line {line}, column" in err.reason
    if offending is not None:
        assert err.value == offending


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert info.value.value == str(tmp_path / "nope.yaml")
    assert "cannot read" in info.value.reason


def test_empty_file_requires_paths(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "data_dir"


def test_parse_config_from_text_and_home_expansion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = parse_config("data_dir: ~/d\nmount_point: m\n")
    assert cfg.data_dir == tmp_path / "d"
    assert cfg.mount_point == Path.cwd() / "m"
    assert cfg.logs == {} and cfg.defaults == LogConfig()


def alias_bomb(levels: int = 7, fanout: int = 10) -> str:
    """Mappings of ``fanout`` aliases to the level below, ``levels`` deep: fanout**levels leaves."""
    keys = ", ".join(f"k{j}: x" for j in range(fanout))
    lines = ["defaults:", f"  a0: &a0 {{{keys}}}"]
    for level in range(1, levels + 1):
        refs = ", ".join(f"k{j}: *a{level - 1}" for j in range(fanout))
        lines.append(f"  a{level}: &a{level} {{{refs}}}")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(60)
def test_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(MINIMAL + alias_bomb())  # 10**7 nodes once expanded: minutes of validation
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.key == "<yaml>"
    assert "aliases expand" in err.reason and "100000 nodes" in err.reason
    # the first node whose expansion crosses the limit: a4 (10**5 leaves), line 3 + 5
    assert err.reason.endswith(f"({path}, line 8)") and err.value.startswith("  a4: &a4 {")


def test_yaml_recursive_alias_and_deep_nesting_are_config_errors() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(MINIMAL + "defaults: &d {segment.bytes: *d}\n")
    assert "refers to a node that contains it" in info.value.reason and "line 3" in info.value.reason
    with pytest.raises(ConfigError) as info:
        parse_config(MINIMAL + "logs: " + "[" * 100_000)
    assert "nested too deeply" in info.value.reason


def test_yaml_aliases_within_the_budget_still_work() -> None:
    cfg = parse_config(
        MINIMAL
        + "logs:\n  a-0: &common {retention.ms: 1d}\n  b-0: *common\n"
        + "  c-0: {<<: *common, segment.bytes: 1MiB}\n"
    )
    retention = {name: c.retention_ms for name, c in cfg.logs.items()}
    assert retention == dict.fromkeys(("a-0", "b-0", "c-0"), DAY_MS)
    assert cfg.logs["c-0"].segment_bytes == 1 << 20

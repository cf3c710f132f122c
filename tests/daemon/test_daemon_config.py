"""The daemon's YAML configuration: loading, validation, errors naming key and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.yaml_cases import alias_bomb

from seglogd.config import DEFAULT_CONFIG_PATH, DaemonConfig, load_config, parse_config
from seglogfs.cleaner_config import CleanerConfig
from seglogfs.config import LogConfig
from seglogfs.errors import ConfigError
from seglogfs.fs.mount_config import MountLogConfig

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


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
    assert set(cfg.logs) == {"events-0", "audit-0", "users-0"}
    assert cfg.logs["users-0"].cleanup_policy == ("compact",)
    assert cfg.mount_config("users-0").append_key_separator == ":"  # DESIGN.md section 3's keyed table
    assert cfg.mount_config("events-0") == cfg.mount_defaults == MountLogConfig()
    assert cfg.cleaner == CleanerConfig()  # Kafka's defaults
    assert cfg.logs["events-0"] == cfg.defaults
    assert cfg.logs["audit-0"].retention_ms == 30 * DAY_MS
    assert cfg.logs["audit-0"].codec == "zstd"
    assert cfg.log_overrides["audit-0"] == {"retention.ms": "30d", "compression.type": "zstd"}
    assert cfg.log_config("not-configured") == cfg.defaults
    assert cfg.source == REPO / "config" / "seglogfs.yaml"
    assert load_config() == cfg  # None means the embedded default
    assert cfg.kafka is not None and str(cfg.kafka.listener) == "PLAINTEXT://127.0.0.1:9092"


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
        # the cleaner's settings (issue 10)
        (MINIMAL + "defaults:\n  log.cleaner.threads: -1\n", "defaults.log.cleaner.threads", -1, "at least 0",
         4),
        (MINIMAL + "defaults:\n  log.cleaner.enable: maybe\n", "defaults.log.cleaner.enable", "maybe",
         "true or false", 4),
        (MINIMAL + "defaults:\n  log.cleaner.backoff.ms: soon\n", "defaults.log.cleaner.backoff.ms", "soon",
         "not a number", 4),
        (MINIMAL + "defaults:\n  log.cleaner.dedupe.buffer.size: 10\n",
         "defaults.log.cleaner.dedupe.buffer.size", 10, "no room for one key", 4),
        (MINIMAL + "defaults:\n  log.cleaner.io.max.bytes.per.second: 0\n",
         "defaults.log.cleaner.io.max.bytes.per.second", 0, "above 0", 4),
        (MINIMAL + "logs:\n  x: {log.cleaner.threads: 2}\n", "logs.x.log.cleaner.threads", 2, "in defaults",
         4),
        (MINIMAL + "defaults:\n  min.cleanable.dirty.ratio: 1.5\n", "defaults.min.cleanable.dirty.ratio", 1.5,
         "at most 1", 4),
        (MINIMAL + "logs:\n  x: {delete.retention.ms: -1}\n", "logs.x.delete.retention.ms", -1, "at least 0",
         4),
        (MINIMAL + "logs:\n  x: {fs.append.key.separator: ''}\n", "logs.x.fs.append.key.separator", "",
         "non-empty", 4),
        (MINIMAL + "logs:\n  x: {cleanup.policy: shred}\n", "logs.x.cleanup.policy", "shred",
         "unknown policy", 4),
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


# --- compaction and the cleaner (issue 10) -----------------------------------------------------------


def test_cleaner_and_compaction_settings() -> None:
    """``defaults`` holds the broker-wide ``log.cleaner.*`` settings beside the per-log ones (Kafka's
    broker-level spellings of the compaction settings too); a log's own topic-level names win."""
    cfg = parse_config(
        MINIMAL
        + """defaults:
  log.cleaner.enable: false
  log.cleaner.threads: 2
  log.cleaner.backoff.ms: 2s
  log.cleaner.dedupe.buffer.size: 16MiB
  log.cleaner.io.max.bytes.per.second: 10MiB
  log.cleaner.min.cleanable.ratio: 0.2
  log.cleaner.delete.retention.ms: 1h
  log.cleanup.policy: compact,delete
logs:
  users-0: {cleanup.policy: compact, fs.append.key.separator: "=>", min.cleanable.dirty.ratio: 0.75,
            min.compaction.lag.ms: 10s, max.compaction.lag.ms: 1d}
  events-0: {}
"""
    )
    assert cfg.cleaner == CleanerConfig(
        enable=False, threads=2, backoff_ms=2000, dedupe_buffer_size=16 << 20,
        io_max_bytes_per_second=float(10 << 20),
    )
    events, users = cfg.logs["events-0"], cfg.logs["users-0"]
    assert events.cleanup_policy == ("compact", "delete")
    assert cfg.mount_config("events-0").append_key_separator is None
    assert (events.min_cleanable_dirty_ratio, events.delete_retention_ms) == (0.2, HOUR_MS)
    assert users.cleanup_policy == ("compact",) and cfg.mount_config("users-0").append_key_separator == "=>"
    assert (users.min_cleanable_dirty_ratio, users.min_compaction_lag_ms) == (0.75, 10_000)
    assert (users.max_compaction_lag_ms, users.delete_retention_ms) == (DAY_MS, HOUR_MS)
    assert parse_config(MINIMAL).cleaner == CleanerConfig()

"""Per-log configuration: Kafka's topic-config names, defaults, units and validation.

``LogConfig`` holds one attribute per Kafka topic config that applies to seglogfs. It is built from
plain mappings (``LogConfig.from_mapping``); the daemon reads YAML and hands dicts in, the engine never
parses YAML itself.

Values may be plain integers or strings with a unit:

- sizes (``*.bytes``): ``B``; decimal ``KB``/``MB``/``GB``/``TB`` (powers of 1000) and binary
  ``KiB``/``MiB``/``GiB``/``TiB`` (powers of 1024), case-insensitive. The one-letter shorthands
  ``k``/``m``/``g`` are refused: ``m`` reads as minutes next to durations and nobody agrees whether
  ``1g`` is 10^9 or 2^30 bytes.
- durations (``*.ms``): ``ms``, ``s``, ``m`` or ``min``, ``h``, ``d``, ``w``, lower case (``1M``
  could mean a month). A plain number is milliseconds, except for the broker-level ``*.hours`` and
  ``*.minutes`` names, where a plain number is in that name's unit.

A decimal point is allowed when the result is a whole number (``1.5h``, ``0.5GiB``).

Ranges mirror Kafka's ``LogConfig`` validators (``segment.bytes`` >= 14, ``retention.ms`` >= -1, ...),
with Kafka's int/long type limits. Kafka 4.0 raised the minimum of ``segment.bytes`` to 1 MiB
(KIP-1030); we keep the older 14 (one legacy record overhead) so that tests and small deployments can
roll tiny segments. ``segment.index.bytes`` must be at least 12, not Kafka's 4: each index must hold
one entry (a 12-byte time entry, an 8-byte offset entry), or no segment can be written at all.

``segment.index.bytes`` is stored as given; each index rounds it down to a whole number of its entries
(``effective_index_bytes``: 67 gives 64 for ``.index``, 60 for ``.timeindex``), as Kafka's
``AbstractIndex`` does.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from seglogfs.cleaner_config import CLEANER_CONFIG_NAMES
from seglogfs.config_units import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    parse_duration_ms,
    parse_size,
    real_value,
)
from seglogfs.config_units import count_value as _count
from seglogfs.config_units import hours_value as _hours
from seglogfs.config_units import minutes_value as _minutes
from seglogfs.config_units import ms_value as _ms
from seglogfs.config_units import size_value as _size
from seglogfs.errors import ConfigError
from seglogfs.index import OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE

__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "LogConfig",
    "parse_duration_ms",
    "parse_size",
]

_COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_CLEANUP_POLICIES = ("delete", "compact")
_CHOICES = {
    "message_timestamp_type": _TIMESTAMP_TYPES,
    "compression_type": _COMPRESSION_TYPES,
}


def _parse_choice(choices: tuple[str, ...]) -> Callable[[object, str], str]:
    def parse(value: object, key: str) -> str:
        if not isinstance(value, str):
            raise ConfigError(key, value, f"expected one of {', '.join(choices)}")
        if value not in choices:
            raise ConfigError(key, value, f"must be one of {', '.join(choices)}")
        return value

    return parse


def _parse_cleanup_policy(value: object, key: str) -> tuple[str, ...]:
    # Kafka's cleanup.policy is a LIST: "delete", "compact" or "compact,delete".
    items: list[object]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")] if value.strip() else []
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ConfigError(key, value, "expected delete, compact or a list of them")
    policies: list[str] = []
    for item in items:
        if item not in _CLEANUP_POLICIES:
            raise ConfigError(key, value, f"unknown policy {item!r}; must be delete and/or compact")
        if item not in policies:
            policies.append(str(item))
    return tuple(policies)


def _negative_is_unlimited(parse: Callable[[object, str], int]) -> Callable[[object, str], int]:
    # KafkaConfig.logRetentionTimeMillis: any negative broker-level retention time means -1 (no limit).
    def wrapped(value: object, key: str) -> int:
        ms = parse(value, key)
        return -1 if ms < 0 else ms

    return wrapped


def _hours_at_least(minimum: int) -> Callable[[object, str], int]:
    """Parser for broker-level hour counts that Kafka bounds before converting (log.roll.hours >= 1)."""

    def parse(value: object, key: str) -> int:
        ms = _hours(value, key)
        if ms < minimum * 3_600_000:
            raise ConfigError(key, value, f"must be at least {minimum} hour(s)")
        return ms

    return parse


@dataclass(frozen=True)
class _Field:
    attr: str
    kind: str  # "int" (Java int), "long", "double", "str", "list"
    minimum: int | None
    # (name, parser) in precedence order: the topic-level name first, then broker-level names.
    names: tuple[tuple[str, Callable[[object, str], object]], ...]
    why_minimum: str = ""  # said after "must be at least N" when the minimum is not Kafka's
    maximum: float | None = None  # only "double" fields have one (a ratio is at most 1)

    @property
    def topic_name(self) -> str:
        return self.names[0][0]


_FIELDS: tuple[_Field, ...] = (
    _Field("segment_bytes", "int", 14, (("segment.bytes", _size), ("log.segment.bytes", _size))),
    _Field(
        "segment_ms",
        "long",
        1,
        (("segment.ms", _ms), ("log.roll.ms", _ms), ("log.roll.hours", _hours_at_least(1))),
    ),
    _Field(
        "segment_jitter_ms",
        "long",
        0,
        (
            ("segment.jitter.ms", _ms),
            ("log.roll.jitter.ms", _ms),
            ("log.roll.jitter.hours", _hours_at_least(0)),
        ),
    ),
    _Field(
        "segment_index_bytes",
        "int",
        TIME_INDEX_ENTRY_SIZE,
        (("segment.index.bytes", _size), ("log.index.size.max.bytes", _size)),
        f"room for one {TIME_INDEX_ENTRY_SIZE}-byte .timeindex entry (and so one "
        f"{OFFSET_INDEX_ENTRY_SIZE}-byte .index entry); Kafka accepts 4, which holds neither",
    ),
    _Field(
        "index_interval_bytes",
        "int",
        0,
        (("index.interval.bytes", _size), ("log.index.interval.bytes", _size)),
    ),
    _Field(
        "retention_ms",
        "long",
        -1,
        (
            ("retention.ms", _ms),
            ("log.retention.ms", _negative_is_unlimited(_ms)),
            ("log.retention.minutes", _negative_is_unlimited(_minutes)),
            ("log.retention.hours", _negative_is_unlimited(_hours)),
        ),
    ),
    # Kafka has no validator on retention.bytes: every negative value means unlimited.
    _Field("retention_bytes", "long", None, (("retention.bytes", _size), ("log.retention.bytes", _size))),
    _Field(
        "flush_messages",
        "long",
        1,
        (("flush.messages", _count), ("log.flush.interval.messages", _count)),
    ),
    _Field("flush_ms", "long", 0, (("flush.ms", _ms), ("log.flush.interval.ms", _ms))),
    _Field(
        "max_message_bytes",
        "int",
        0,
        (("max.message.bytes", _size), ("message.max.bytes", _size)),
    ),
    _Field(
        "message_timestamp_type",
        "str",
        None,
        (
            ("message.timestamp.type", _parse_choice(_TIMESTAMP_TYPES)),
            ("log.message.timestamp.type", _parse_choice(_TIMESTAMP_TYPES)),
        ),
    ),
    _Field("compression_type", "str", None, (("compression.type", _parse_choice(_COMPRESSION_TYPES)),)),
    _Field(
        "file_delete_delay_ms",
        "long",
        0,
        (("file.delete.delay.ms", _ms), ("log.segment.delete.delay.ms", _ms)),
    ),
    _Field(
        "cleanup_policy",
        "list",
        None,
        (("cleanup.policy", _parse_cleanup_policy), ("log.cleanup.policy", _parse_cleanup_policy)),
    ),
    _Field(
        "min_cleanable_dirty_ratio",
        "double",
        0,
        (("min.cleanable.dirty.ratio", real_value), ("log.cleaner.min.cleanable.ratio", real_value)),
        maximum=1.0,
    ),
    _Field(
        "min_compaction_lag_ms",
        "long",
        0,
        (("min.compaction.lag.ms", _ms), ("log.cleaner.min.compaction.lag.ms", _ms)),
    ),
    _Field(
        "max_compaction_lag_ms",
        "long",
        1,
        (("max.compaction.lag.ms", _ms), ("log.cleaner.max.compaction.lag.ms", _ms)),
    ),
    _Field(
        "delete_retention_ms",
        "long",
        0,
        (("delete.retention.ms", _ms), ("log.cleaner.delete.retention.ms", _ms)),
    ),
)
_FIELD_BY_ATTR = {f.attr: f for f in _FIELDS}
_NAME_TO_FIELD = {name: (f, rank) for f in _FIELDS for rank, (name, _) in enumerate(f.names)}
_TOPIC_NAMES = frozenset(f.topic_name for f in _FIELDS)

# Kafka topic configs that exist but mean nothing for a single-node, non-replicated log.
_KAFKA_NAMES_NOT_APPLICABLE = frozenset(
    {
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "message.downconversion.enable",
        "message.format.version",
        "preallocate",
        "message.timestamp.difference.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "local.retention.ms",
        "local.retention.bytes",
        "remote.storage.enable",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
    }
)


@dataclass(frozen=True)
class LogConfig:
    """The configuration of one log, one attribute per Kafka topic config (snake_case names).

    Defaults are Kafka's. ``flush_messages`` and ``flush_ms`` default to Long.MAX_VALUE, which means
    "never flush by count/time, leave it to the OS". ``cleanup_policy`` ``compact`` makes the log
    cleaner (``seglogfs.cleaner``) keep the latest record per key, driven by
    ``min_cleanable_dirty_ratio``, ``min_compaction_lag_ms``, ``max_compaction_lag_ms`` and
    ``delete_retention_ms`` (how long tombstones survive); a compacted log is exempt from time/size
    retention unless ``delete`` is listed too, as in Kafka.
    ``compression_type`` ``producer`` keeps the compression of batches handed in; batches seglogfs
    builds itself are then uncompressed (``codec``).
    The mount's own per-log settings (``fs.*``) are not here: ``seglogfs.fs.mount_config`` reads them
    from the same mappings (``from_mapping``'s ``foreign``).
    """

    segment_bytes: int = 1024**3
    segment_ms: int = 7 * 86_400_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 86_400_000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    file_delete_delay_ms: int = 60_000
    cleanup_policy: tuple[str, ...] = ("delete",)
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000

    def __post_init__(self) -> None:
        for field in _FIELDS:
            value = getattr(self, field.attr)
            key = field.topic_name
            if field.kind in ("int", "long"):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(key, value, "expected an integer")
                low, high = (INT_MIN, INT_MAX) if field.kind == "int" else (LONG_MIN, LONG_MAX)
                if field.minimum is not None:
                    low = field.minimum
                if value < low:
                    why = f": {field.why_minimum}" if field.why_minimum else ""
                    raise ConfigError(key, value, f"must be at least {low}{why}")
                if value > high:
                    raise ConfigError(key, value, f"must be at most {high}")
            elif field.kind == "double":
                _check_ratio(field, value)
                object.__setattr__(self, field.attr, float(value))
            elif field.kind == "str":
                _parse_choice(_CHOICES[field.attr])(value, key)
            else:
                if not isinstance(value, tuple):
                    raise ConfigError(key, value, "expected a tuple of policies")
                _parse_cleanup_policy(value, key)
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            # Kafka's LogConfig.validateValues: "conflict topic config setting ..."
            raise ConfigError(
                "min.compaction.lag.ms",
                self.min_compaction_lag_ms,
                f"must not exceed max.compaction.lag.ms ({self.max_compaction_lag_ms})",
            )
        if self.compression_type == "none":
            # "none" is the producer-side name; Kafka's topic config calls it "uncompressed".
            object.__setattr__(self, "compression_type", "uncompressed")

    @classmethod
    def from_mapping(
        cls,
        mapping: Mapping[str, object],
        base: LogConfig | None = None,
        *,
        source: str = "",
        broker_names: bool = True,
        foreign: Collection[str] = (),
    ) -> LogConfig:
        """``base`` (Kafka's defaults when None) overridden by the configs in ``mapping``.

        Keys are Kafka topic-config names and, when ``broker_names`` is true, the broker-level
        defaults from server.properties (``log.segment.bytes``, ``log.retention.hours``...). Kafka's
        precedence applies: a topic-level name beats a broker-level one, ``log.roll.ms`` beats
        ``log.roll.hours``, ``log.retention.ms`` beats ``.minutes`` beats ``.hours``. Shadowed keys are
        still validated. The broker-wide cleaner settings (``log.cleaner.threads``..., see
        ``CleanerConfig``) are skipped when ``broker_names`` is true, so one ``defaults`` mapping may
        hold both. ``foreign`` names keys another reader of the same mapping takes (the mount's
        ``fs.*`` settings): skipped. Other unknown keys are refused. Errors are ``ConfigError`` naming
        the key, the value and the reason, followed by ``(in <source>)`` when ``source`` is given.
        """
        try:
            return cls._from_mapping(mapping, base if base is not None else cls(), broker_names, foreign)
        except ConfigError as err:
            if not source:
                raise
            raise ConfigError(err.key, err.value, f"{err.reason} (in {source})") from None

    @classmethod
    def _from_mapping(
        cls, mapping: Mapping[str, object], base: LogConfig, broker_names: bool, foreign: Collection[str]
    ) -> LogConfig:
        if not isinstance(mapping, Mapping):
            raise ConfigError("<config>", mapping, "expected a mapping of config names to values")
        # attr -> (precedence rank, key as written, value as written, parsed value)
        chosen: dict[str, tuple[int, str, object, object]] = {}
        for key, value in mapping.items():
            if not isinstance(key, str):
                raise ConfigError(str(key), value, "config names are strings")
            entry = _NAME_TO_FIELD.get(key)
            if entry is None and broker_names and key in CLEANER_CONFIG_NAMES:
                continue  # a broker-wide cleaner setting: CleanerConfig.from_mapping reads it
            if entry is None and key in foreign:
                continue
            if entry is None or (entry[1] > 0 and not broker_names):
                raise ConfigError(key, value, _unknown_reason(key, broker_names, foreign))
            field, rank = entry
            parsed = field.names[rank][1](value, key)
            previous = chosen.get(field.attr)
            if previous is None or rank < previous[0]:
                chosen[field.attr] = (rank, key, value, parsed)
        try:
            changes: dict[str, Any] = {attr: c[3] for attr, c in chosen.items()}
            return dataclasses.replace(base, **changes)
        except ConfigError as err:
            # Name the key and value as the user wrote them, not the canonical name and parsed value.
            for attr, (_, key, value, _) in chosen.items():
                if _FIELD_BY_ATTR[attr].topic_name == err.key:
                    raise ConfigError(key, value, err.reason) from None
            raise

    def effective_index_bytes(self, entry_size: int) -> int:
        """``segment.index.bytes`` rounded down to whole entries (Kafka's roundDownToExactMultiple)."""
        return self.segment_index_bytes // entry_size * entry_size

    @property
    def offset_index_bytes(self) -> int:
        """Preallocated size of an active ``.index`` (8-byte entries)."""
        return self.effective_index_bytes(OFFSET_INDEX_ENTRY_SIZE)

    @property
    def time_index_bytes(self) -> int:
        """Preallocated size of an active ``.timeindex`` (12-byte entries)."""
        return self.effective_index_bytes(TIME_INDEX_ENTRY_SIZE)

    @property
    def codec(self) -> str:
        """Compression for batches seglogfs builds: none, gzip, snappy, lz4 or zstd."""
        return "none" if self.compression_type in ("producer", "uncompressed") else self.compression_type

    @property
    def log_append_time(self) -> bool:
        """True when the log stamps records with the append time (``LogAppendTime``)."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def deletes(self) -> bool:
        """True when time/size retention applies (``delete`` in ``cleanup.policy``)."""
        return "delete" in self.cleanup_policy

    def to_dict(self) -> dict[str, object]:
        """Kafka topic-config names -> values, as Kafka would describe the topic."""
        out: dict[str, object] = {}
        for field in _FIELDS:
            value = getattr(self, field.attr)
            out[field.topic_name] = ",".join(value) if field.kind == "list" else value
        return out


def _check_ratio(field: _Field, value: object) -> None:
    key = field.topic_name
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, value, "expected a number")
    if field.minimum is not None and value < field.minimum:
        raise ConfigError(key, value, f"must be at least {field.minimum}")
    if field.maximum is not None and value > field.maximum:
        raise ConfigError(key, value, f"must be at most {field.maximum:g}")


def _unknown_reason(key: str, broker_names: bool, foreign: Collection[str]) -> str:
    if key in _KAFKA_NAMES_NOT_APPLICABLE:
        return "a Kafka config that seglogfs does not support"
    if key in CLEANER_CONFIG_NAMES:
        return "a broker-wide log cleaner setting; it belongs in defaults"
    if key in _NAME_TO_FIELD:
        return "a broker-level name; per-log settings take the topic-level name " + (
            _NAME_TO_FIELD[key][0].topic_name
        )
    known = sorted((_TOPIC_NAMES if not broker_names else _NAME_TO_FIELD.keys()) | set(foreign))
    close = difflib.get_close_matches(key, known, n=1)
    return "unknown config" + (f"; did you mean {close[0]}?" if close else "")

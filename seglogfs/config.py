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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from seglogfs.errors import ConfigError
from seglogfs.index import OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE

__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "LogConfig",
    "parse_duration_ms",
    "parse_size",
]

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


_MS_PER_UNIT = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
}
_BYTES_PER_UNIT = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_NUMBER_UNIT = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")

_COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_CLEANUP_POLICIES = ("delete", "compact")
_CHOICES = {"message_timestamp_type": _TIMESTAMP_TYPES, "compression_type": _COMPRESSION_TYPES}


def _number(text: str, key: str, value: object) -> tuple[Decimal, str]:
    match = _NUMBER_UNIT.fullmatch(text)
    if match is None:
        raise ConfigError(key, value, "not a number with an optional unit")
    try:
        return Decimal(match.group(1)), match.group(2)
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        raise ConfigError(key, value, "not a number") from None


def _whole(amount: Decimal, key: str, value: object) -> int:
    if amount != amount.to_integral_value():
        raise ConfigError(key, value, "does not come to a whole number")
    return int(amount)


def _scalar_text(value: object, key: str) -> str | int:
    """An int, or the text of a string value; every other type is refused."""
    if isinstance(value, bool) or value is None:
        raise ConfigError(
            key, value, "expected a number" if value is None else "expected a number, not a boolean"
        )
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(key, value, "expected a whole number")
        return int(value)
    if isinstance(value, str):
        return value
    raise ConfigError(key, value, f"expected a number or a string, not {type(value).__name__}")


def parse_size(text: str | int, *, key: str = "size") -> int:
    """Bytes from ``1GiB``, ``512MiB``, ``10KB``, ``4096`` (see the module docstring for units)."""
    raw = _scalar_text(text, key)
    if isinstance(raw, int):
        return raw
    amount, unit = _number(raw, key, text)
    factor = _BYTES_PER_UNIT.get(unit.lower())
    if factor is None:
        hint = "; write KiB/MiB/GiB (1024) or KB/MB/GB (1000)" if unit.lower() in ("k", "m", "g", "t") else ""
        raise ConfigError(key, text, f"unknown size unit {unit!r}{hint}")
    return _whole(amount * factor, key, text)


def parse_duration_ms(text: str | int, *, key: str = "duration", plain_unit: str = "ms") -> int:
    """Milliseconds from ``7d``, ``12h``, ``30m``, ``10s``, ``500ms``.

    A bare number is in ``plain_unit`` (milliseconds unless told otherwise).
    """
    raw = _scalar_text(text, key)
    if isinstance(raw, int):
        return raw * _MS_PER_UNIT[plain_unit]
    amount, unit = _number(raw, key, text)
    factor = _MS_PER_UNIT.get(unit or plain_unit)
    if factor is None:
        raise ConfigError(key, text, f"unknown duration unit {unit!r}; use ms, s, m, h, d or w")
    return _whole(amount * factor, key, text)


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


def _size(value: object, key: str) -> int:
    return parse_size(value, key=key)  # type: ignore[arg-type]


def _ms(value: object, key: str) -> int:
    return parse_duration_ms(value, key=key)  # type: ignore[arg-type]


def _minutes(value: object, key: str) -> int:
    return parse_duration_ms(value, key=key, plain_unit="min")  # type: ignore[arg-type]


def _hours(value: object, key: str) -> int:
    return parse_duration_ms(value, key=key, plain_unit="h")  # type: ignore[arg-type]


def _count(value: object, key: str) -> int:
    raw = _scalar_text(value, key)
    if isinstance(raw, int):
        return raw
    amount, unit = _number(raw, key, value)
    if unit:
        raise ConfigError(key, value, "a count takes no unit")
    return _whole(amount, key, value)


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
        if ms < minimum * _MS_PER_UNIT["h"]:
            raise ConfigError(key, value, f"must be at least {minimum} hour(s)")
        return ms

    return parse


@dataclass(frozen=True)
class _Field:
    attr: str
    kind: str  # "int" (Java int), "long", "str", "list"
    minimum: int | None
    # (name, parser) in precedence order: the topic-level name first, then broker-level names.
    names: tuple[tuple[str, Callable[[object, str], object]], ...]
    why_minimum: str = ""  # said after "must be at least N" when the minimum is not Kafka's

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
    _Field("fs_listing_limit", "int", 1, (("fs.listing.limit", _count),)),
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
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
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
    "never flush by count/time, leave it to the OS". ``cleanup_policy`` accepts ``compact``, as Kafka
    does, but seglogfs never runs compaction: a compacted log simply keeps all its records (and is
    then exempt from time/size retention unless ``delete`` is listed too, as in Kafka).
    ``compression_type`` ``producer`` keeps the compression of batches handed in; batches seglogfs
    builds itself are then uncompressed (``codec``).
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
    fs_listing_limit: int = 100_000

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
            elif field.kind == "str":
                _parse_choice(_CHOICES[field.attr])(value, key)
            else:
                if not isinstance(value, tuple):
                    raise ConfigError(key, value, "expected a tuple of policies")
                _parse_cleanup_policy(value, key)
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
    ) -> LogConfig:
        """``base`` (Kafka's defaults when None) overridden by the configs in ``mapping``.

        Keys are Kafka topic-config names and, when ``broker_names`` is true, the broker-level
        defaults from server.properties (``log.segment.bytes``, ``log.retention.hours``...). Kafka's
        precedence applies: a topic-level name beats a broker-level one, ``log.roll.ms`` beats
        ``log.roll.hours``, ``log.retention.ms`` beats ``.minutes`` beats ``.hours``. Shadowed keys are
        still validated. Unknown keys are refused. Errors are ``ConfigError`` naming the key, the value
        and the reason, followed by ``(in <source>)`` when ``source`` is given.
        """
        try:
            return cls._from_mapping(mapping, base if base is not None else cls(), broker_names)
        except ConfigError as err:
            if not source:
                raise
            raise ConfigError(err.key, err.value, f"{err.reason} (in {source})") from None

    @classmethod
    def _from_mapping(cls, mapping: Mapping[str, object], base: LogConfig, broker_names: bool) -> LogConfig:
        if not isinstance(mapping, Mapping):
            raise ConfigError("<config>", mapping, "expected a mapping of config names to values")
        # attr -> (precedence rank, key as written, value as written, parsed value)
        chosen: dict[str, tuple[int, str, object, object]] = {}
        for key, value in mapping.items():
            if not isinstance(key, str):
                raise ConfigError(str(key), value, "config names are strings")
            entry = _NAME_TO_FIELD.get(key)
            if entry is None or (entry[1] > 0 and not broker_names):
                raise ConfigError(key, value, _unknown_reason(key, broker_names))
            field, rank = entry
            parsed = field.names[rank][1](value, key)
            previous = chosen.get(field.attr)
            if previous is None or rank < previous[0]:
                chosen[field.attr] = (rank, key, value, parsed)
        try:
            return dataclasses.replace(base, **{attr: c[3] for attr, c in chosen.items()})
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


def _unknown_reason(key: str, broker_names: bool) -> str:
    if key in _KAFKA_NAMES_NOT_APPLICABLE:
        return "a Kafka config that seglogfs does not support"
    if key in _NAME_TO_FIELD:
        return "a broker-level name; per-log settings take the topic-level name " + (
            _NAME_TO_FIELD[key][0].topic_name
        )
    known = sorted(_TOPIC_NAMES) if not broker_names else sorted(_NAME_TO_FIELD)
    close = difflib.get_close_matches(key, known, n=1)
    return "unknown config" + (f"; did you mean {close[0]}?" if close else "")

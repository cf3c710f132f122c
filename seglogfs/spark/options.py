"""Parsing of the ``seglog`` source's options (Spark hands every key lower-cased, every value as text).

Offsets JSON (``startingOffsets`` / ``endingOffsets``) is Spark's Kafka form, keyed by topic and
partition, plus a flat form keyed by log directory name::

    {"events": {"0": 23, "1": -2}}     # topic -> partition -> offset (Kafka's form)
    {"events-0": 23, "audit": -1}      # log name -> offset

``-2`` means earliest and ``-1`` latest. An offset is the *next* offset to read, so ranges are
``[start, end)``. Logs a JSON start does not name start at earliest, logs a JSON end does not name end
at latest. A log whose directory name has no ``-<digits>`` suffix is partition 0 of the topic of that
name.

``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` take the same two JSON forms with epoch
milliseconds (or ISO-8601 text) as values, and, as Spark's Kafka source requires, must name every log
the query reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from seglogfs.config_units import parse_duration_ms
from seglogfs.errors import ConfigError
from seglogfs.read_committed import READ_UNCOMMITTED, Isolation, isolation_level
from seglogfs.timestamps import parse_iso8601_ms

EARLIEST = -2
LATEST = -1
#: the negative times Kafka's ListOffsets (behind Spark's Kafka source) reads as earliest / latest
_SPECIAL = (EARLIEST, LATEST)

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


#: Spark's Kafka source option (lower-cased, as Spark hands options over)
ISOLATION_OPTION = "kafka.isolation.level"
#: Spark's Kafka source default for ``maxTriggerDelay``: 15 minutes
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000
#: what ``startingOffsetsByTimestampStrategy`` accepts
TIMESTAMP_STRATEGIES = ("error", "latest")


class OptionError(ValueError):
    """An option value the source cannot accept; the message names the option."""


def parse_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    """A boolean option (true/false, 1/0, yes/no, on/off; looked up lower-cased, named as given)."""
    raw = options.get(key.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise OptionError(f"option {key}={raw!r}: expected true or false")


def parse_int(options: Mapping[str, str], key: str, default: int | None, *, minimum: int = 0) -> int | None:
    """An integer option no smaller than ``minimum`` (looked up lower-cased, named as given)."""
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {key}={raw!r}: expected an integer") from None
    if value < minimum:
        raise OptionError(f"option {key}={raw!r}: must be >= {minimum}")
    return value


def parse_timestamp_ms(options: Mapping[str, str], key: str) -> int | None:
    """Epoch milliseconds >= 0, given as an integer or an ISO-8601 text (naive = UTC); looked up
    lower-cased, named as given. As Kafka's ListOffsets, -2 is earliest and -1 latest (returned as
    :data:`EARLIEST` / :data:`LATEST`); any other negative number is refused."""
    raw = options.get(key.lower())
    if raw is None:
        return None
    text = str(raw).strip()
    if re.fullmatch(r"-?\d+", text):
        value = int(text)
        if value < 0 and value not in _SPECIAL:
            raise OptionError(
                f"option {key}={raw!r}: must be epoch milliseconds >= 0 or ISO-8601 (or -2 / -1: "
                "earliest / latest)"
            )
        return value
    try:
        return parse_iso8601_ms(text)
    except ValueError:
        raise OptionError(f"option {key}={raw!r}: expected epoch milliseconds or ISO-8601") from None


def parse_duration(options: Mapping[str, str], key: str, default_ms: int) -> int:
    """A duration in Spark's notation (``15m``, ``30s``, ``500ms``, ``1h``; a bare number is ms)."""
    raw = options.get(key.lower())
    if raw is None:
        return default_ms
    try:
        value = parse_duration_ms(str(raw).strip(), key=key)
    except ConfigError as exc:
        raise OptionError(f"option {key}={raw!r}: {exc.reason} (e.g. 15m, 30s, 500ms)") from None
    if value < 0:
        raise OptionError(f"option {key}={raw!r}: must not be negative")
    return value


def parse_choice(options: Mapping[str, str], key: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (case-insensitive); the first is the default."""
    raw = options.get(key.lower())
    if raw is None:
        return choices[0]
    text = str(raw).strip().lower()
    if text not in choices:
        raise OptionError(f"option {key}={raw!r}: expected {' or '.join(choices)}")
    return text


def parse_isolation(options: Mapping[str, str]) -> Isolation:
    """``kafka.isolation.level`` (Spark's Kafka source passes it to its consumer): read_uncommitted
    (the default) or read_committed."""
    try:
        return isolation_level(str(options.get(ISOLATION_OPTION, READ_UNCOMMITTED)))
    except ValueError as exc:
        raise OptionError(f"option {ISOLATION_OPTION}: {exc}") from None


def parse_name_list(options: Mapping[str, str], key: str) -> list[str] | None:
    """A comma-separated list (or a JSON list) of names."""
    raw = options.get(key)
    if raw is None:
        return None
    text = str(raw).strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise OptionError(f"option {key}: invalid JSON list: {exc}") from None
        if not all(isinstance(item, str) for item in items):
            raise OptionError(f"option {key}: a JSON list of strings is expected")
        return [item.strip() for item in items if item.strip()]
    return [item.strip() for item in text.split(",") if item.strip()]


#: Spark's Kafka source: one way of choosing what to read (``topics`` is our name for ``subscribe``)
_STRATEGIES = ("assign", "subscribe", "subscribePattern")


def parse_topics(options: Mapping[str, str]) -> list[str] | None:
    """``subscribe`` (or its alias ``topics``): a comma-separated or JSON list of topic names; at
    most one of assign / subscribe / subscribePattern, as Spark's Kafka source requires."""
    given = [key for key in (*_STRATEGIES, "topics") if key.lower() in options]
    if len(given) > 1:
        raise OptionError(
            f"options {', '.join(given)}: only one of assign, subscribe (topics) or subscribePattern "
            "can be specified"
        )
    key = "topics" if "topics" in options else "subscribe"
    topics = parse_name_list(options, key)
    if topics is not None and not topics:
        raise OptionError(f"option {key}={options[key]!r}: no topics to subscribe to")
    return topics


def parse_pattern(options: Mapping[str, str], key: str) -> str | None:
    """``subscribePattern``: a regular expression a whole topic name must match."""
    raw = options.get(key.lower())
    if raw is None:
        return None
    text = str(raw).strip()
    if not text:
        raise OptionError(f"option {key}={raw!r}: the pattern to subscribe to is empty")
    try:
        re.compile(text)
    except re.error as exc:
        raise OptionError(f"option {key}={raw!r}: invalid regular expression: {exc}") from None
    return text


def parse_assign(options: Mapping[str, str], key: str) -> dict[str, list[int]] | None:
    """``assign``: JSON ``{"topicA": [0, 1], "topicB": [2]}``, the exact partitions to read."""
    raw = options.get(key.lower())
    if raw is None:
        return None
    obj = _json_object(key, str(raw).strip(), 'JSON such as {"topicA": [0, 1]}')
    for topic, parts in obj.items():
        if not isinstance(parts, list) or not all(type(p) is int and p >= 0 for p in parts):
            raise OptionError(f"option {key}: partitions of {topic!r} must be a list of integers >= 0")
    if not any(obj.values()):
        raise OptionError(f"option {key}={raw!r}: no topic partitions to assign")
    return obj


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: ``earliest``, ``latest`` or explicit offsets per log."""

    default: int  # EARLIEST or LATEST, for logs not named in ``per_log``
    per_log: Mapping[str, int] = field(default_factory=dict)  # log name -> offset, -2 / -1 allowed

    def for_log(self, name: str) -> int:
        """The offset (or EARLIEST / LATEST) for log ``name``."""
        return self.per_log.get(name, self.default)


def _offset_value(key: str, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
        raise OptionError(f"option {key}: offset of {where} must be an integer >= -2, got {value!r}")
    return value


def _timestamp_value(key: str, where: str, value: Any) -> int:
    """Epoch ms, or -2 / -1 for earliest / latest (Kafka's ListOffsets, behind Spark's Kafka source)."""
    if isinstance(value, str):
        try:
            return parse_iso8601_ms(value.strip())
        except ValueError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool) and (value >= 0 or value in _SPECIAL):
        return value
    raise OptionError(
        f"option {key}: timestamp of {where} must be epoch milliseconds >= 0 or ISO-8601, got {value!r} "
        "(or -2 / -1: earliest / latest)"
    )


def _json_object(key: str, text: str, expected: str) -> dict:
    try:
        obj = json.loads(text)
    except ValueError:
        raise OptionError(f"option {key}={text!r}: expected {expected}") from None
    if not isinstance(obj, dict):
        raise OptionError(f"option {key}: {expected} must be a JSON object")
    return obj


def _per_log(
    key: str, obj: Mapping[str, Any], log_names: Mapping[tuple[str, int], str], value: Any
) -> dict[str, Any]:
    """log name -> ``value(key, log name, item)`` of a JSON object in Kafka's topic -> partition form
    or the flat log-name form; a name that matches no log is an error (a typo must not read all)."""
    known = set(log_names.values())
    per_log: dict[str, Any] = {}
    for outer, inner in obj.items():
        if isinstance(inner, dict):
            for part, item in inner.items():
                try:
                    part_no = int(part)
                except ValueError:
                    raise OptionError(
                        f"option {key}: partition {part!r} of {outer!r} is not a number"
                    ) from None
                name = log_names.get((outer, part_no))
                if name is None:
                    raise OptionError(f"option {key}: no log for topic {outer!r} partition {part_no}")
                per_log[name] = value(key, name, item)
        else:
            if outer not in known:
                raise OptionError(f"option {key}: no log named {outer!r}")
            per_log[outer] = value(key, outer, inner)
    return per_log


def parse_offsets(
    options: Mapping[str, str],
    key: str,
    default: int,
    log_names: Mapping[tuple[str, int], str],
) -> OffsetSpec:
    """Parse ``startingOffsets`` / ``endingOffsets``; ``log_names`` maps (topic, partition) -> log name.

    Names that match no log are errors, so a typo does not silently read everything.
    """
    raw = options.get(key)
    if raw is None:
        return OffsetSpec(default)
    text = str(raw).strip()
    if text.lower() == "earliest":
        return OffsetSpec(EARLIEST)
    if text.lower() == "latest":
        return OffsetSpec(LATEST)
    obj = _json_object(key, text, "earliest, latest or offsets JSON")
    return OffsetSpec(default, _per_log(key, obj, log_names, _offset_value))


@dataclass(frozen=True)
class TimestampSpec:
    """Epoch-ms positions from ``startingTimestamp`` (one for every log) or ``...OffsetsByTimestamp``
    (one per log); ``option`` names where they came from, for error messages."""

    option: str
    default: int | None = None
    per_log: Mapping[str, int] = field(default_factory=dict)

    def for_log(self, name: str) -> int | None:
        """The timestamp for log ``name`` (None: the offsets options decide)."""
        return self.per_log.get(name, self.default)


def parse_timestamps(
    options: Mapping[str, str],
    key: str,
    log_names: Mapping[tuple[str, int], str],
) -> TimestampSpec | None:
    """Parse ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (``key`` as Spark's docs
    spell it). As Spark's Kafka source, the JSON must name every log read: a partition left out is
    an error, not a silent fallback."""
    raw = options.get(key.lower())
    if raw is None:
        return None
    obj = _json_object(key, str(raw).strip(), 'timestamps JSON such as {"topic": {"0": 1700000000000}}')
    per_log = _per_log(key, obj, log_names, _timestamp_value)
    missing = sorted(set(log_names.values()) - set(per_log))
    if missing:
        raise OptionError(
            f"option {key}: must name every log read (as Spark's Kafka source requires every "
            f"partition); missing: {', '.join(missing)}"
        )
    return TimestampSpec(key, None, per_log)


def timestamp_bound(
    options: Mapping[str, str],
    global_key: str,
    global_ms: int | None,
    by_log_key: str,
    log_names: Mapping[tuple[str, int], str],
) -> TimestampSpec | None:
    """Kafka's precedence: ``startingTimestamp`` over ``startingOffsetsByTimestamp`` (likewise for
    the ending pair); None when neither is set (the offsets option decides)."""
    if global_ms is not None:
        return TimestampSpec(global_key, global_ms)
    return parse_timestamps(options, by_log_key, log_names)


@dataclass(frozen=True)
class ReadOptions:
    """The batch and streaming read options, parsed and checked."""

    include_headers: bool = False
    fail_on_data_loss: bool = True
    fail_on_no_logs: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    timestamp_strategy: str = "error"
    logs: list[str] | None = None
    topics: list[str] | None = None
    topic_pattern: str | None = None
    assign: dict[str, list[int]] | None = None
    max_batch_rows: int = 65_536
    push_filters: bool = False
    isolation: Isolation = READ_UNCOMMITTED

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """The read options from Spark's (lower-cased) option map."""
        lowered = {str(k).lower(): v for k, v in options.items()}
        opts = cls(
            include_headers=parse_bool(lowered, "includeHeaders", False),
            fail_on_data_loss=parse_bool(lowered, "failOnDataLoss", True),
            fail_on_no_logs=parse_bool(lowered, "failOnNoLogs", True),
            min_partitions=parse_int(lowered, "minPartitions", None, minimum=1),
            max_records_per_partition=parse_int(lowered, "maxRecordsPerPartition", None, minimum=1),
            max_offsets_per_trigger=parse_int(lowered, "maxOffsetsPerTrigger", None, minimum=1),
            min_offsets_per_trigger=parse_int(lowered, "minOffsetsPerTrigger", None, minimum=1),
            max_trigger_delay_ms=parse_duration(lowered, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
            starting_timestamp=parse_timestamp_ms(lowered, "startingTimestamp"),
            ending_timestamp=parse_timestamp_ms(lowered, "endingTimestamp"),
            timestamp_strategy=parse_choice(
                lowered, "startingOffsetsByTimestampStrategy", TIMESTAMP_STRATEGIES
            ),
            logs=parse_name_list(lowered, "logs"),
            topics=parse_topics(lowered),
            topic_pattern=parse_pattern(lowered, "subscribePattern"),
            assign=parse_assign(lowered, "assign"),
            max_batch_rows=parse_int(lowered, "maxBatchRows", 65_536, minimum=1) or 65_536,
            push_filters=parse_bool(lowered, "pushFilters", False),
            isolation=parse_isolation(lowered),
        )
        low, high = opts.min_offsets_per_trigger, opts.max_offsets_per_trigger
        if low is not None and high is not None and low > high:
            raise OptionError(f"option minOffsetsPerTrigger={low} is higher than maxOffsetsPerTrigger={high}")
        return opts


def lowered(options: Mapping[str, Any]) -> dict[str, str]:
    """A plain dict copy of ``options`` with lower-case keys (picklable, unlike Spark's map)."""
    return {str(k).lower(): str(v) for k, v in options.items()}

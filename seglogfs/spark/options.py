"""Parsing of the ``seglog`` source's options (Spark hands every key lower-cased, every value as text).

Offsets JSON (``startingOffsets`` / ``endingOffsets``) is Spark's Kafka form, keyed by topic and
partition, plus a flat form keyed by log directory name::

    {"events": {"0": 23, "1": -2}}     # topic -> partition -> offset (Kafka's form)
    {"events-0": 23, "audit": -1}      # log name -> offset

``-2`` means earliest and ``-1`` latest. An offset is the *next* offset to read, so ranges are
``[start, end)``. Logs a JSON start does not name start at earliest, logs a JSON end does not name end
at latest (as Kafka). A log whose directory name has no ``-<digits>`` suffix is partition 0 of the
topic of that name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from seglogfs.read_committed import READ_UNCOMMITTED, Isolation, isolation_level
from seglogfs.timestamps import parse_iso8601_ms

EARLIEST = -2
LATEST = -1

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


#: Spark's Kafka source option (lower-cased, as Spark hands options over)
ISOLATION_OPTION = "kafka.isolation.level"


class OptionError(ValueError):
    """An option value the source cannot accept; the message names the option."""


def parse_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    """A boolean option (true/false, 1/0, yes/no, on/off)."""
    raw = options.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise OptionError(f"option {key}={raw!r}: expected true or false")


def parse_int(options: Mapping[str, str], key: str, default: int | None, *, minimum: int = 0) -> int | None:
    """An integer option no smaller than ``minimum``."""
    raw = options.get(key)
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
    """Epoch milliseconds, given as an integer or an ISO-8601 text (naive = UTC)."""
    raw = options.get(key)
    if raw is None:
        return None
    text = str(raw).strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        return parse_iso8601_ms(text)
    except ValueError:
        raise OptionError(f"option {key}={raw!r}: expected epoch milliseconds or ISO-8601") from None


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
    try:
        obj = json.loads(text)
    except ValueError:
        raise OptionError(f"option {key}={raw!r}: expected earliest, latest or offsets JSON") from None
    if not isinstance(obj, dict):
        raise OptionError(f"option {key}: offsets JSON must be an object")
    known = set(log_names.values())
    per_log: dict[str, int] = {}
    for outer, inner in obj.items():
        if isinstance(inner, dict):
            for part, value in inner.items():
                try:
                    part_no = int(part)
                except ValueError:
                    raise OptionError(
                        f"option {key}: partition {part!r} of {outer!r} is not a number"
                    ) from None
                name = log_names.get((outer, part_no))
                if name is None:
                    raise OptionError(f"option {key}: no log for topic {outer!r} partition {part_no}")
                per_log[name] = _offset_value(key, name, value)
        else:
            if outer not in known:
                raise OptionError(f"option {key}: no log named {outer!r}")
            per_log[outer] = _offset_value(key, outer, inner)
    return OffsetSpec(default, per_log)


@dataclass(frozen=True)
class ReadOptions:
    """The batch and streaming read options, parsed and checked."""

    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    logs: list[str] | None = None
    topics: list[str] | None = None
    max_batch_rows: int = 65_536
    push_filters: bool = False
    isolation: Isolation = READ_UNCOMMITTED

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """The read options from Spark's (lower-cased) option map."""
        lowered = {str(k).lower(): v for k, v in options.items()}
        return cls(
            include_headers=parse_bool(lowered, "includeheaders", False),
            fail_on_data_loss=parse_bool(lowered, "failondataloss", True),
            min_partitions=parse_int(lowered, "minpartitions", None, minimum=1),
            max_offsets_per_trigger=parse_int(lowered, "maxoffsetspertrigger", None, minimum=1),
            starting_timestamp=parse_timestamp_ms(lowered, "startingtimestamp"),
            ending_timestamp=parse_timestamp_ms(lowered, "endingtimestamp"),
            logs=parse_name_list(lowered, "logs"),
            topics=parse_name_list(lowered, "topics") or parse_name_list(lowered, "subscribe"),
            max_batch_rows=parse_int(lowered, "maxbatchrows", 65_536, minimum=1) or 65_536,
            push_filters=parse_bool(lowered, "pushfilters", False),
            isolation=parse_isolation(lowered),
        )


def lowered(options: Mapping[str, Any]) -> dict[str, str]:
    """A plain dict copy of ``options`` with lower-case keys (picklable, unlike Spark's map)."""
    return {str(k).lower(): str(v) for k, v in options.items()}

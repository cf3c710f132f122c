"""Broker-wide settings of the log cleaner (Kafka's ``log.cleaner.*`` server configs).

Per-log compaction settings (``min.cleanable.dirty.ratio``, ``delete.retention.ms``...) live in
``LogConfig``; these are the ones that belong to the cleaner itself, read from the same ``defaults``
mapping by ``CleanerConfig.from_mapping``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from seglogfs.config_units import (
    INT_MAX,
    LONG_MAX,
    boolean_value,
    count_value,
    ms_value,
    real_value,
    size_value,
)
from seglogfs.errors import ConfigError

__all__ = ["CLEANER_CONFIG_NAMES", "OFFSET_MAP_BYTES_PER_ENTRY", "CleanerConfig"]

# A 16-byte key digest plus an 8-byte offset per slot (Kafka's SkimpyOffsetMap with MD5).
OFFSET_MAP_BYTES_PER_ENTRY = 24


def _rate(value: object, key: str) -> float:
    # A Java double of bytes per second; sizes with a unit (10MiB) are accepted as well.
    if isinstance(value, str) and value.strip() and value.strip()[-1].isalpha():
        return float(size_value(value, key))
    return real_value(value, key)


# Kafka's name -> (attribute, parser).
_PARSERS: dict[str, tuple[str, Callable[[object, str], object]]] = {
    "log.cleaner.enable": ("enable", boolean_value),
    "log.cleaner.threads": ("threads", count_value),
    "log.cleaner.backoff.ms": ("backoff_ms", ms_value),
    "log.cleaner.dedupe.buffer.size": ("dedupe_buffer_size", size_value),
    "log.cleaner.io.buffer.size": ("io_buffer_size", size_value),
    "log.cleaner.io.buffer.load.factor": ("io_buffer_load_factor", real_value),
    "log.cleaner.io.max.bytes.per.second": ("io_max_bytes_per_second", _rate),
}
CLEANER_CONFIG_NAMES = frozenset(_PARSERS)
_NAME_BY_ATTR = {attr: name for name, (attr, _) in _PARSERS.items()}


@dataclass(frozen=True)
class CleanerConfig:
    """The cleaner's broker-wide settings; defaults are Kafka's.

    ``dedupe_buffer_size`` is shared by all threads: each builds an offset map of
    ``dedupe_buffer_size // threads`` bytes and fills it to ``io_buffer_load_factor`` of its slots.
    ``io_max_bytes_per_second`` throttles the cleaner's reads and writes together (inf: unlimited).
    ``io_buffer_size`` is how many bytes the cleaner reads from a segment at a time.
    """

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = math.inf

    def __post_init__(self) -> None:
        self._check_int("threads", 0, INT_MAX)
        self._check_int("backoff_ms", 0, LONG_MAX)
        self._check_int("dedupe_buffer_size", 0, LONG_MAX)
        self._check_int("io_buffer_size", 0, INT_MAX)
        if not isinstance(self.enable, bool):
            raise ConfigError("log.cleaner.enable", self.enable, "expected true or false")
        factor = self.io_buffer_load_factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
            raise ConfigError("log.cleaner.io.buffer.load.factor", factor, "must be above 0 and at most 1")
        rate = self.io_max_bytes_per_second
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
            raise ConfigError("log.cleaner.io.max.bytes.per.second", rate, "must be above 0")
        if self.threads > 0 and self.map_capacity < 1:
            raise ConfigError(
                "log.cleaner.dedupe.buffer.size",
                self.dedupe_buffer_size,
                f"leaves each of the {self.threads} cleaner thread(s) no room for one key "
                f"({OFFSET_MAP_BYTES_PER_ENTRY} bytes a slot, filled to {factor:g})",
            )

    def _check_int(self, attr: str, low: int, high: int) -> None:
        value = getattr(self, attr)
        key = _NAME_BY_ATTR[attr]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, value, "expected an integer")
        if value < low:
            raise ConfigError(key, value, f"must be at least {low}")
        if value > high:
            raise ConfigError(key, value, f"must be at most {high}")

    @property
    def map_bytes_per_thread(self) -> int:
        """The memory of one cleaner thread (Kafka's dedupe buffer / threads): its offset map and, when
        the budget is large enough, its read windows too (``seglogfs.cleaner.Cleaner``)."""
        return self.dedupe_buffer_size // max(self.threads, 1)

    @property
    def map_capacity(self) -> int:
        """How many keys one thread's map could take if it had the whole budget (slots x load factor):
        the check that the budget holds at least one key."""
        return int(self.map_bytes_per_thread // OFFSET_MAP_BYTES_PER_ENTRY * self.io_buffer_load_factor)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object], *, source: str = "") -> CleanerConfig:
        """The ``log.cleaner.*`` keys of ``mapping`` (other keys are ignored: they are LogConfig's).

        Errors are ``ConfigError`` naming the key and the value, followed by ``(in <source>)``.
        """
        values: dict[str, Any] = {}
        try:
            for key, value in mapping.items():
                if key in _PARSERS:
                    attr, parse = _PARSERS[key]
                    values[attr] = parse(value, key)
            return cls(**values)
        except ConfigError as err:
            if not source:
                raise
            raise ConfigError(err.key, err.value, f"{err.reason} (in {source})") from None

    def to_dict(self) -> dict[str, object]:
        """Kafka's names -> values."""
        return {name: getattr(self, attr) for name, (attr, _) in _PARSERS.items()}

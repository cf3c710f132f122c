"""Unit parsing shared by the config modules: sizes, durations, counts and Kafka's type limits.

See ``seglogfs.config`` for the accepted units.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from seglogfs.errors import ConfigError

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


def parse_size(text: object, *, key: str = "size") -> int:
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


def parse_duration_ms(text: object, *, key: str = "duration", plain_unit: str = "ms") -> int:
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


def size_value(value: object, key: str) -> int:
    """A ``*.bytes`` setting: bytes with an optional size unit."""
    return parse_size(value, key=key)


def ms_value(value: object, key: str) -> int:
    """A ``*.ms`` setting: milliseconds with an optional duration unit."""
    return parse_duration_ms(value, key=key)


def minutes_value(value: object, key: str) -> int:
    """A ``*.minutes`` setting, in milliseconds (a plain number is minutes)."""
    return parse_duration_ms(value, key=key, plain_unit="min")


def hours_value(value: object, key: str) -> int:
    """A ``*.hours`` setting, in milliseconds (a plain number is hours)."""
    return parse_duration_ms(value, key=key, plain_unit="h")


def count_value(value: object, key: str) -> int:
    """A plain count: an integer without a unit."""
    raw = _scalar_text(value, key)
    if isinstance(raw, int):
        return raw
    amount, unit = _number(raw, key, value)
    if unit:
        raise ConfigError(key, value, "a count takes no unit")
    return _whole(amount, key, value)


def real_value(value: object, key: str) -> float:
    """A Java double setting (``min.cleanable.dirty.ratio``): a number without a unit."""
    if isinstance(value, bool) or value is None:
        raise ConfigError(key, value, "expected a number")
    if isinstance(value, int | float):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            raise ConfigError(key, value, "expected a number") from None
    else:
        raise ConfigError(key, value, f"expected a number, not {type(value).__name__}")
    if result != result:  # NaN
        raise ConfigError(key, value, "expected a number")
    return result


def boolean_value(value: object, key: str) -> bool:
    """A Java boolean setting: true/false (YAML booleans or the strings)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(key, value, "expected true or false")

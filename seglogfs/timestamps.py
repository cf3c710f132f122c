"""Kafka's epoch milliseconds from what gives a time: ISO-8601 text as people type it, and a clock."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_iso8601_ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 timestamp (``Z`` accepted, naive times are UTC, sub-millisecond
    digits truncated); ValueError if malformed."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def clock_ms(clock: Callable[[], float]) -> int:
    """``clock()`` (seconds, as ``time.time``) in epoch milliseconds."""
    return int(clock() * 1000)

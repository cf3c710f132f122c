"""read_committed: which batches a Kafka consumer with ``isolation.level=read_committed`` sees.

The consumer gets, with every fetch, the aborted transactions overlapping the fetched range (from the
``.txnindex`` files) and the last stable offset (LSO), and walks the batches in offset order: an
aborted transaction's producer is marked from its first offset on and unmarked by its ABORT marker,
and a marked producer's transactional data batches are dropped (docs/kafka-format.md section 8.7).
:func:`hidden_batches` tells the same per batch without walking, so a reader may start anywhere; the
tests check it against that walk (tests/support/consumer_walk.py). Nothing at or past the LSO is
seen: that bound is the caller's.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from enum import StrEnum
from operator import attrgetter
from typing import Protocol

from .records import BatchHeader

__all__ = [
    "READ_COMMITTED", "READ_UNCOMMITTED", "AbortedLike", "Isolation", "hidden_batches", "isolation_level",
]

class Isolation(StrEnum):
    """Kafka's ``isolation.level``: every record (the consumer default), or only committed ones."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


READ_UNCOMMITTED = Isolation.READ_UNCOMMITTED
READ_COMMITTED = Isolation.READ_COMMITTED


def isolation_level(value: object) -> Isolation:
    """``value`` as an :class:`Isolation` (the one check of the level's name); ValueError naming the
    accepted values otherwise."""
    if isinstance(value, str):
        try:
            return Isolation(value)
        except ValueError:
            pass
    accepted = " or ".join(repr(level.value) for level in Isolation)
    raise ValueError(f"isolation level {value!r}: must be {accepted}")


class AbortedLike(Protocol):
    """An aborted transaction as a ``.txnindex`` entry describes it."""

    @property
    def producer_id(self) -> int: ...
    @property
    def first_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...


def hidden_batches(aborted: Iterable[AbortedLike]) -> Callable[[BatchHeader], bool]:
    """``hidden(header)``: True for a transactional data batch of one of the ``aborted`` transactions
    (its base offset in [first offset, marker offset] of an aborted transaction of its producer): the
    consumer's walk, told without walking, for readers that jump into the middle of a log. What lies
    at or past the last stable offset is the caller's to leave out."""
    ranges: dict[int, tuple[list[int], list[int]]] = {}
    for txn in sorted(aborted, key=attrgetter("first_offset")):
        firsts, lasts = ranges.setdefault(txn.producer_id, ([], []))
        firsts.append(txn.first_offset)
        lasts.append(txn.last_offset)

    def hidden(header: BatchHeader) -> bool:
        if not ranges or not header.is_transactional or header.is_control:
            return False
        found = ranges.get(header.producer_id)
        if found is None:
            return False
        i = bisect.bisect_right(found[0], header.base_offset) - 1
        return i >= 0 and header.base_offset <= found[1][i]

    return hidden

"""read_committed: which batches a Kafka consumer with ``isolation.level=read_committed`` returns.

The consumer gets, with every fetch, the aborted transactions overlapping the fetched range (from the
``.txnindex`` files) and the last stable offset (LSO); it then walks the batches in offset order:

- before each batch, every aborted transaction whose first offset is at or below the batch's last
  offset marks its producer "aborted";
- a transactional data batch of an aborted producer is dropped;
- a control batch is never returned; an ABORT marker of an aborted producer ends that producer's
  aborted state (its later transactions may commit);
- nothing at or past the LSO is returned (the broker never sends it).

Everything here works per batch, from the header; only control batches of aborted producers are asked
for their marker type.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Literal, Protocol, TypeVar, cast

from .producer_state import ControlType
from .records import BatchHeader

__all__ = [
    "READ_COMMITTED", "READ_UNCOMMITTED", "AbortedLike", "Isolation", "committed_batches", "hidden_batches",
    "isolation_level",
]

#: Kafka's isolation.level values: every record (the consumer default), or only committed ones
Isolation = Literal["read_uncommitted", "read_committed"]
READ_UNCOMMITTED: Isolation = "read_uncommitted"
READ_COMMITTED: Isolation = "read_committed"


def isolation_level(value: str) -> Isolation:
    """``value`` as an :data:`Isolation`; ValueError naming the accepted values otherwise."""
    if value in (READ_UNCOMMITTED, READ_COMMITTED):
        return cast(Isolation, value)
    raise ValueError(f"isolation level {value!r}: must be {READ_UNCOMMITTED!r} or {READ_COMMITTED!r}")

Payload = TypeVar("Payload")


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


def committed_batches(
    batches: Iterable[tuple[BatchHeader, Payload]],
    aborted: Sequence[AbortedLike],
    last_stable_offset: int,
    marker_type: Callable[[BatchHeader, Payload], int | None],
) -> Iterator[tuple[BatchHeader, Payload]]:
    """The (header, payload) pairs of ``batches`` whose records a read_committed reader sees.

    ``batches`` are in offset order; ``aborted`` are the aborted transactions overlapping them (any
    order); ``marker_type(header, payload)`` is the control record type of a control batch (a
    :class:`~seglogfs.producer_state.ControlType`, another type, or None when it holds no transaction
    marker). The iteration ends at the first batch whose base offset is at or past
    ``last_stable_offset``. A batch straddling the LSO
    (base below, last offset at or past it) is yielded whole: the caller drops its records at or past
    the LSO. A broker never writes one (an LSO is the first offset of a batch or the log end), but a
    caller reading a range may pass a smaller bound.
    """
    pending = sorted(aborted, key=attrgetter("first_offset"))
    # first offsets ending in a sentinel, so the loop needs no bounds check
    firsts = [txn.first_offset for txn in pending] + [math.inf]
    next_pending = 0
    next_first = firsts[0]
    aborted_producers: set[int] = set()
    for item in batches:
        header = item[0]
        if header.base_offset >= last_stable_offset:
            return
        while next_first <= header.last_offset:
            aborted_producers.add(pending[next_pending].producer_id)
            next_pending += 1
            next_first = firsts[next_pending]
        if not (aborted_producers or header.is_control):
            yield item  # the common case: no producer to drop, a data batch
        elif header.is_control:
            producer_id = header.producer_id
            if producer_id in aborted_producers and marker_type(header, item[1]) == ControlType.ABORT:
                aborted_producers.discard(producer_id)
        elif not (header.is_transactional and header.producer_id in aborted_producers):
            yield item


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

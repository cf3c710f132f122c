"""The consumer's read_committed walk, as a Kafka consumer does it over a fetch: the tests' reference
for :func:`seglogfs.read_committed.hidden_batches` (which tells the same per batch without walking)
and for every read path under read_committed (docs/kafka-format.md section 8.7)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import TypeVar

from seglogfs.producer_state import ControlType
from seglogfs.read_committed import AbortedLike
from seglogfs.records import BatchHeader

Payload = TypeVar("Payload")


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

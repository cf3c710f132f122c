"""BatchLocator: the batches that lookups found lately, by offset range, so that the next read of an
offset in one of them skips the offset index and the header read (and, for an uncompressed batch
whose record bounds it keeps, the :class:`~seglogfs.batch_cache.BatchCache` too).

A batch found once (by the trusted header walk or the CRC-checked survey) stays at its position in
its segment object, with the same offsets, for the object's life; segments leave a log only through
retention and compaction, which count :attr:`~seglogfs.log.Log.removals`. So an entry is kept with
the count read before its lookup began and served only while the count is unchanged; the caller still
checks the offset against the log's range (the start offset moves without removing a segment). The
log also clears it with its :class:`~seglogfs.batch_cache.BatchCache`. Bounded: emptied when full;
what it holds counts in the :class:`~seglogfs.read_cache_budget.ReadCacheBudget` too.
"""

from __future__ import annotations

import threading
from bisect import bisect_right, insort
from collections.abc import Callable
from typing import NamedTuple

from .records import BatchHeader, RecordBounds
from .segment import LogSegment

__all__ = ["DEFAULT_LOCATED_BATCHES", "DEFAULT_LOCATED_BOUNDS_BYTES", "BatchLocator", "Located"]

#: batches remembered per log (about 300 bytes each, a header and its entry)
DEFAULT_LOCATED_BATCHES = 1024
#: bytes of record bounds (4 a record) the entries may keep per log; past it they keep none
DEFAULT_LOCATED_BOUNDS_BYTES = 4 << 20
#: what an entry without bounds costs (its header and its place in the lists), for the budget
LOCATED_ENTRY_BYTES = 300


class Located(NamedTuple):
    """A remembered batch: its segment, its header and, when kept, its CRC-checked record bounds."""

    removals: int
    segment: LogSegment
    header: BatchHeader
    bounds: RecordBounds | None = None


class BatchLocator:
    """Recently found batches, searched by offset. Thread-safe."""

    __slots__ = (
        "_bases", "_bounds_bytes", "_found", "_lock", "_on_growth", "max_batches", "max_bounds_bytes",
    )

    def __init__(self, max_batches: int = DEFAULT_LOCATED_BATCHES,
                 max_bounds_bytes: int = DEFAULT_LOCATED_BOUNDS_BYTES,
                 on_growth: Callable[[], None] = lambda: None) -> None:
        """``on_growth``: called (without the lock) after an entry or bounds were added."""
        self.max_batches = max_batches
        self.max_bounds_bytes = max_bounds_bytes
        self._on_growth = on_growth
        self._bases: list[int] = []  # sorted base offsets of the entries of _found
        self._found: dict[int, Located] = {}
        self._bounds_bytes = 0
        self._lock = threading.Lock()

    def find(self, offset: int, removals: int) -> Located | None:
        """The remembered batch holding ``offset``, found while the log's removals were ``removals``
        as they are now; None when there is none."""
        with self._lock:
            bases = self._bases
            i = bisect_right(bases, offset) - 1
            if i < 0:
                return None
            entry = self._found[bases[i]]
        if entry.removals != removals or entry.header.last_offset < offset:
            return None
        return entry

    def remember(self, segment: LogSegment, header: BatchHeader, removals: int) -> None:
        """Keep the batch ``header`` of ``segment``, found while the log's removals were ``removals``."""
        base = header.base_offset
        with self._lock:
            old = self._found.get(base)
            if old is None:
                if len(self._bases) >= self.max_batches:
                    self._clear()
                insort(self._bases, base)
            elif old.bounds is not None:
                self._bounds_bytes -= old.bounds.nbytes
            self._found[base] = Located(removals, segment, header)
        self._on_growth()

    def keep_bounds(self, entry: Located, bounds: RecordBounds) -> None:
        """Keep ``bounds`` (taken once the batch's CRC held) with ``entry``, while within the budget."""
        base = entry.header.base_offset
        with self._lock:
            if self._found.get(base) is not entry:
                return
            if self._bounds_bytes + bounds.nbytes > self.max_bounds_bytes:
                return
            self._found[base] = entry._replace(bounds=bounds)
            self._bounds_bytes += bounds.nbytes
        self._on_growth()

    @property
    def size_bytes(self) -> int:
        """About what the entries hold (for the budget)."""
        return len(self._bases) * LOCATED_ENTRY_BYTES + self._bounds_bytes

    def clear(self) -> None:
        """Forget every batch (segments left the log, or it closed)."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._bases.clear()
        self._found.clear()
        self._bounds_bytes = 0

    def __len__(self) -> int:
        return len(self._bases)

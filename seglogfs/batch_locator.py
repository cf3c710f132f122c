"""BatchLocator: the batches that lookups found lately, by offset range, so that the next read of an
offset in one of them skips the offset index and the header read.

A batch found once (by the trusted header walk or the CRC-checked survey) stays at its position in
its segment object, with the same offsets, for the object's life; segments leave a log only through
retention and compaction, which count :attr:`~seglogfs.log.Log.removals`. So an entry is kept with
the count read before its lookup began and served only while the count is unchanged; the caller still
checks the offset against the log's range (the start offset moves without removing a segment). The
log also clears it with its :class:`~seglogfs.batch_cache.BatchCache`. Bounded: emptied when full.
"""

from __future__ import annotations

import threading
from bisect import bisect_right, insort

from .records import BatchHeader
from .segment import LogSegment

__all__ = ["DEFAULT_LOCATED_BATCHES", "BatchLocator"]

#: batches remembered per log (about 300 bytes each, a header and its entry)
DEFAULT_LOCATED_BATCHES = 1024


class BatchLocator:
    """(segment, header) of recently found batches, searched by offset. Thread-safe."""

    __slots__ = ("_bases", "_found", "_lock", "max_batches")

    def __init__(self, max_batches: int = DEFAULT_LOCATED_BATCHES) -> None:
        self.max_batches = max_batches
        self._bases: list[int] = []  # sorted base offsets of the entries of _found
        self._found: dict[int, tuple[int, LogSegment, BatchHeader]] = {}  # base -> (removals, ...)
        self._lock = threading.Lock()

    def find(self, offset: int, removals: int) -> tuple[LogSegment, BatchHeader] | None:
        """The remembered batch holding ``offset``, found while the log's removals were ``removals``
        as they are now; None when there is none."""
        with self._lock:
            bases = self._bases
            i = bisect_right(bases, offset) - 1
            if i < 0:
                return None
            entry = self._found[bases[i]]
        header = entry[2]
        if entry[0] != removals or header.last_offset < offset:
            return None
        return entry[1], header

    def remember(self, segment: LogSegment, header: BatchHeader, removals: int) -> None:
        """Keep the batch ``header`` of ``segment``, found while the log's removals were ``removals``."""
        base = header.base_offset
        with self._lock:
            if base not in self._found:
                if len(self._bases) >= self.max_batches:
                    self._bases.clear()
                    self._found.clear()
                insort(self._bases, base)
            self._found[base] = (removals, segment, header)

    def clear(self) -> None:
        """Forget every batch (segments left the log, or it closed)."""
        with self._lock:
            self._bases.clear()
            self._found.clear()

    def __len__(self) -> int:
        return len(self._bases)

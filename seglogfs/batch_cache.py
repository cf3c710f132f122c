"""BatchCache: what reads learn from one batch (its record bounds or its decoded columns), kept in a
byte-bounded LRU so that the next read of the same batch skips the CRC check and the decode.

One cache per log, bounded per log and, with every other log's, by the process-wide
:class:`~seglogfs.read_cache_budget.ReadCacheBudget`. Entries are keyed by (segment, batch position):
a batch never moves within its segment, and the log clears the cache whenever segments leave it
(retention, compaction, close). The segment is the object, not its base offset: compaction replaces
a segment by another with the same base, and a reader still on the old segment list may store an
entry after the clear (a weak reference confirms the object on a hit, so a recycled ``id`` never
matches).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from .batch_locator import BatchLocator
from .errors import CorruptRecordError
from .read_cache_budget import READ_CACHE_BUDGET, ReadCacheBudget
from .records import (
    BatchHeader,
    RecordBounds,
    RecordColumns,
    decode_batch_columns,
    record_bounds,
    validate_batch,
)
from .segment import LogSegment

__all__ = ["DEFAULT_BATCH_CACHE_BYTES", "BatchCache"]

DEFAULT_BATCH_CACHE_BYTES = 32 * 1024 * 1024  # per log: bounds of ~8M records, or decoded batches

# The first item of a key: which view of the batch the entry holds.
_BOUNDS = 0
_COLUMNS = 1

_View = TypeVar("_View", RecordBounds, RecordColumns)


class BatchCache:
    """Record bounds and decoded columns of CRC-checked batches; the least recently used go first
    once their arrays together exceed ``max_bytes``. Thread-safe: concurrent readers share it."""

    def __init__(
        self, max_bytes: int = DEFAULT_BATCH_CACHE_BYTES, budget: ReadCacheBudget | None = None
    ) -> None:
        """``budget``: the process-wide one unless given."""
        self.max_bytes = max_bytes
        self._budget = budget if budget is not None else READ_CACHE_BUDGET
        # (view, id(segment), batch position) -> (value, its bytes, weak reference to the segment)
        self._entries: OrderedDict[tuple[int, int, int], tuple[Any, int, weakref.ref[LogSegment]]] = (
            OrderedDict()
        )
        self._bytes = 0
        self._lock = threading.Lock()
        #: the batches lookups found, by offset: cleared with this cache
        self.locator = BatchLocator(on_growth=self._report)

    # bounds() and columns() repeat their few lines of lookup rather than share a helper: a cache
    # hit is every warm Log.read, and an extra call there is measurable.

    def bounds(self, segment: LogSegment, header: BatchHeader) -> RecordBounds:
        """Where each record of an uncompressed v2 batch lies (8 bytes a record), CRC-checked."""
        key = (_BOUNDS, id(segment), header.position)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[2]() is segment:
                self._entries.move_to_end(key)
                cached: RecordBounds = entry[0]
                return cached
        bounds = _decode(segment, header, record_bounds)
        self._store(key, bounds, bounds.nbytes, segment)
        return bounds

    def columns(self, segment: LogSegment, header: BatchHeader) -> RecordColumns:
        """The decoded columns of one batch, CRC-checked."""
        key = (_COLUMNS, id(segment), header.position)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[2]() is segment:
                self._entries.move_to_end(key)
                found: RecordColumns = entry[0]
                return found
        columns = _decode(segment, header, decode_batch_columns)
        self._store(key, columns, columns.data.nbytes, segment)
        return columns

    def clear(self) -> None:
        """Forget every entry (segments left the log, it closed, or the budget needs the memory)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
        self.locator.clear()
        self._budget.report(self, 0)

    def _report(self) -> None:
        """Tell the budget what this cache and its locator hold, after they grew."""
        self._budget.report(self, self._bytes + self.locator.size_bytes)

    @property
    def size_bytes(self) -> int:
        """The bytes the cached arrays hold (what ``max_bytes`` bounds)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def _store(
        self, key: tuple[int, int, int], value: RecordBounds | RecordColumns, weight: int, segment: LogSegment
    ) -> None:
        """Insert ``value`` (replacing an entry of a dead segment whose ``id`` was recycled, but not a
        concurrent reader's), then evict down to ``max_bytes``."""
        with self._lock:
            old = self._entries.get(key)
            if old is None or old[2]() is not segment:
                if old is not None:
                    self._bytes -= old[1]
                self._entries[key] = (value, weight, weakref.ref(segment))
                self._bytes += weight
            while self._bytes > self.max_bytes and self._entries:
                _, (_, evicted_weight, _) = self._entries.popitem(last=False)
                self._bytes -= evicted_weight
        self._report()


def _decode(segment: LogSegment, header: BatchHeader, decode: Callable[..., _View]) -> _View:
    """``decode`` applied to the batch ``header`` of ``segment`` once its CRC is checked."""
    data = segment.read(header.position, header.size)
    local = header.at(0)
    try:
        validate_batch(data, local, path=segment.log_path)
        return decode(data, local, path=segment.log_path)
    except CorruptRecordError as exc:  # positions within ``data``: name the file's
        raise exc.at(segment.log_path, header.position) from None

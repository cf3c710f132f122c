"""BatchCache: what reads learn from one batch (its record bounds or its decoded columns), kept in a
byte-bounded LRU so that the next read of the same batch skips the CRC check and the decode.

One cache per log. Entries are keyed by (segment base offset, batch position): a batch never moves
within its segment, and the log clears the cache whenever segments leave it (retention, close).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import CorruptRecordError
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

    def __init__(self, max_bytes: int = DEFAULT_BATCH_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        # (view, segment base offset, batch position) -> (value, its bytes)
        self._entries: OrderedDict[tuple[int, int, int], tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    # bounds() and columns() repeat their few lines of lookup rather than share a helper: a cache
    # hit is every warm Log.read, and an extra call there is measurable.

    def bounds(self, segment: LogSegment, header: BatchHeader) -> RecordBounds:
        """Where each record of an uncompressed v2 batch lies (8 bytes a record), CRC-checked."""
        key = (_BOUNDS, segment.base_offset, header.position)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry[0]
        bounds = _decode(segment, header, record_bounds)
        self._store(key, bounds, bounds.nbytes)
        return bounds

    def columns(self, segment: LogSegment, header: BatchHeader) -> RecordColumns:
        """The decoded columns of one batch, CRC-checked."""
        key = (_COLUMNS, segment.base_offset, header.position)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry[0]
        columns = _decode(segment, header, decode_batch_columns)
        self._store(key, columns, columns.data.nbytes)
        return columns

    def clear(self) -> None:
        """Forget every entry (segments left the log, or it closed)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def size_bytes(self) -> int:
        """The bytes the cached arrays hold (what ``max_bytes`` bounds)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def _store(self, key: tuple[int, int, int], value: RecordBounds | RecordColumns, weight: int) -> None:
        """Insert ``value`` (unless a concurrent reader did first), then evict down to ``max_bytes``."""
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, weight)
                self._bytes += weight
            while self._bytes > self.max_bytes and self._entries:
                _, (_, evicted_weight) = self._entries.popitem(last=False)
                self._bytes -= evicted_weight


def _decode(segment: LogSegment, header: BatchHeader, decode: Callable[..., _View]) -> _View:
    """``decode`` applied to the batch ``header`` of ``segment`` once its CRC is checked."""
    data = segment.read(header.position, header.size)
    local = header.at(0)
    try:
        validate_batch(data, local, path=segment.log_path)
        return decode(data, local, path=segment.log_path)
    except CorruptRecordError as exc:  # positions within ``data``: name the file's
        raise exc.at(segment.log_path, header.position) from None

"""``OffsetIndex``: Kafka's ``.index`` file, which maps an offset to the byte position of a batch.

The rules shared with the time index (preallocation, warm-section search, read-only copies) are in
:mod:`seglogfs.abstract_index`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from .abstract_index import INT32_MAX, INT32_MIN, AbstractIndex, InvalidIndexAppendError
from .errors import CorruptIndexError

__all__ = ["OFFSET_INDEX_ENTRY_SIZE", "OffsetIndex", "OffsetPosition"]

_ENTRY = struct.Struct(">ii")  # one entry: relative offset, position (big-endian int32s)
OFFSET_INDEX_ENTRY_SIZE = _ENTRY.size  # 8 bytes
# NamedTuple's own constructor is a Python call; lookups build their results with the C one.
_new_tuple = tuple.__new__
_PACK = _ENTRY.pack


class OffsetPosition(NamedTuple):
    """An offset-index entry (Kafka's OffsetPosition): the batch at byte ``position`` of the .log
    ends at ``offset`` (the entry's offset is the last offset of that batch)."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """The .index file: 8-byte entries (relative offset int32, position int32), big-endian.

    Maps an offset to the byte position in the .log of the batch to start scanning from.
    """

    ENTRY_SIZE = OFFSET_INDEX_ENTRY_SIZE
    DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])
    KEY_FIELD = "rel"
    VALUE_FIELD = "pos"
    KIND = "offset index"

    def _after_entries_changed(self) -> None:
        n = self._entries
        self._last_offset = self.base_offset + int(self._keys[n - 1]) if n else self.base_offset

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty."""
        return self._last_offset

    @property
    def last_entry(self) -> OffsetPosition:
        """The last entry, or (base_offset, 0) when empty."""
        with self._lock:
            n = self._entries
            if n == 0:
                return OffsetPosition(self.base_offset, 0)
            return OffsetPosition(self.base_offset + int(self._keys[n - 1]), int(self._values[n - 1]))

    def entry(self, i: int) -> OffsetPosition:
        """The i-th entry (absolute offset, position)."""
        with self._lock:
            if not 0 <= i < self._entries:
                raise IndexError(f"attempt to fetch the {i}th entry from {self._path} of {self._entries}")
            return OffsetPosition(self.base_offset + int(self._keys[i]), int(self._values[i]))

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offset must exceed the last one (Kafka's OffsetIndex.append)."""
        self._require_writable()
        with self._lock:
            n = self._entries
            if n >= self.max_entries:
                raise InvalidIndexAppendError(f"Attempt to append to a full index (size = {n}) {self._path}")
            if n != 0 and offset <= self._last_offset:
                raise InvalidIndexAppendError(
                    f"Attempt to append an offset ({offset}) to position {n} no larger than the last "
                    f"offset appended ({self._last_offset}) to {self._path}."
                )
            rel = self.relative_offset(offset)
            if not 0 <= position <= INT32_MAX:
                raise ValueError(f"position {position} does not fit an int32 ({self._path})")
            # Bytes first, then the count: readers only look at [0, entries).
            self._store(n, _PACK(rel, position))
            self._entries = n + 1
            self._last_offset = offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry with offset <= target, else (base_offset, 0)."""
        target = target_offset - self.base_offset
        if target > INT32_MAX:
            target = INT32_MAX
        elif target < INT32_MIN:
            target = INT32_MIN
        with self._lock:
            slot = self._largest_lower_bound(self._keys, target)
            if slot == -1:
                return _new_tuple(OffsetPosition, (self.base_offset, 0))
            return _new_tuple(
                OffsetPosition, (self.base_offset + int(self._keys[slot]), int(self._values[slot]))
            )

    def lookup_bounds(self, target_offset: int) -> tuple[OffsetPosition, OffsetPosition | None]:
        """``lookup(target)`` plus the first entry with offset >= target (None when there is none).

        The batch at that upper entry's position ends at or after the target; when it also starts at
        or before it, it holds the target and a reader needs no scan from the lower entry.
        """
        target = min(max(target_offset - self.base_offset, INT32_MIN), INT32_MAX)
        base = self.base_offset
        with self._lock:
            slot = self._largest_lower_bound(self._keys, target)
            # Both entries straight from the bytes: cheaper than numpy scalar conversions.
            if slot == -1:
                lower = _new_tuple(OffsetPosition, (base, 0))
            else:
                # numpy's stubs give an ndarray the buffer protocol on Python 3.12 and later only
                rel, pos = _ENTRY.unpack_from(self._arr, slot * OFFSET_INDEX_ENTRY_SIZE)  # type: ignore[arg-type]
                lower = _new_tuple(OffsetPosition, (base + rel, pos))
                if rel == target:
                    return lower, lower
            if slot + 1 >= self._entries:
                return lower, None
            rel, pos = _ENTRY.unpack_from(self._arr, (slot + 1) * OFFSET_INDEX_ENTRY_SIZE)  # type: ignore[arg-type]
            return lower, _new_tuple(OffsetPosition, (base + rel, pos))

    def fetch_upper_bound_offset(self, position: int, fetch_size: int) -> OffsetPosition | None:
        """The first entry whose position is >= position + fetch_size, or None (Kafka's
        ``fetchUpperBoundOffset``): a byte bound for reading ``fetch_size`` bytes from ``position``."""
        target = min(position + fetch_size, INT32_MAX)
        with self._lock:
            slot = self._smallest_upper_bound(self._values, target)
            if slot == -1:
                return None
            return OffsetPosition(self.base_offset + int(self._keys[slot]), int(self._values[slot]))

    def position_floor(self, position: int) -> int:
        """The largest indexed position <= ``position`` (a batch start), or -1: where a walk to the
        last batch ending before ``position`` begins, at most ``index.interval.bytes`` and one batch
        before it."""
        with self._lock:
            slot = self._largest_lower_bound(self._values, position)
            return -1 if slot < 0 else int(self._values[slot])

    def sanity_check(self) -> None:
        """Kafka's OffsetIndex.sanityCheck: last offset >= base offset, length a multiple of 8."""
        with self._lock:
            if self._entries != 0 and self._last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"Corrupt index found, index file ({self._path.absolute()}) has non-zero size but the "
                    f"last offset is {self._last_offset} which is less than the base offset "
                    f"{self.base_offset}."
                )
            self._file_length_check("Index")

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the entries in use as native int64 arrays: (absolute offsets, positions)."""
        with self._lock:
            n = self._entries
            return (self._keys[:n].astype(np.int64) + self.base_offset, self._values[:n].astype(np.int64))

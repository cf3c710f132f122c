"""``TimeIndex``: Kafka's ``.timeindex`` file, which maps a timestamp to an offset.

The rules shared with the offset index (preallocation, warm-section search, read-only copies) are in
:mod:`seglogfs.abstract_index`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from .abstract_index import AbstractIndex, InvalidIndexAppendError
from .errors import CorruptIndexError

__all__ = ["TIME_INDEX_ENTRY_SIZE", "TimeIndex", "TimestampOffset"]

_ENTRY = struct.Struct(">qi")  # one entry: timestamp (int64), relative offset (int32), big-endian
TIME_INDEX_ENTRY_SIZE = _ENTRY.size  # 12 bytes
_PACK = _ENTRY.pack


class TimestampOffset(NamedTuple):
    """A time-index entry (Kafka's TimestampOffset): ``timestamp`` is the largest timestamp seen in
    the segment up to ``offset``."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """The .timeindex file: 12-byte entries (timestamp int64, relative offset int32), big-endian.

    An entry (T, O) means: the largest timestamp seen in the segment up to offset O is T.
    """

    ENTRY_SIZE = TIME_INDEX_ENTRY_SIZE
    DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])
    KEY_FIELD = "ts"
    VALUE_FIELD = "rel"
    KIND = "time index"
    ALLOCATES_NEXT_SLOT = True  # the final entry of a roll or a close must not meet a full disk

    def _after_entries_changed(self) -> None:
        n = self._entries
        if n:
            self._last_entry = TimestampOffset(
                int(self._keys[n - 1]), self.base_offset + int(self._values[n - 1])
            )
        else:
            self._last_entry = TimestampOffset(-1, self.base_offset)

    def is_full(self) -> bool:
        """True once one slot is left: it is reserved for the entry written on roll or close."""
        return self._entries >= self.max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base_offset) when empty."""
        return self._last_entry

    def entry(self, i: int) -> TimestampOffset:
        """The i-th entry (timestamp, absolute offset)."""
        with self._lock:
            if not 0 <= i < self._entries:
                raise IndexError(f"attempt to fetch the {i}th entry from {self._path} of {self._entries}")
            return TimestampOffset(int(self._keys[i]), self.base_offset + int(self._values[i]))

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if timestamp is larger than the last one (Kafka's maybeAppend).

        Raises on an offset or timestamp smaller than the last entry's; an equal offset is
        accepted (the same entry offered again on roll/close).
        """
        self._require_writable()
        with self._lock:
            n = self._entries
            if not skip_full_check and self.is_full():
                raise InvalidIndexAppendError(
                    f"Attempt to append to a full time index (size = {n}) {self._path}"
                )
            last_ts, last_off = self._last_entry
            if n != 0 and offset < last_off:
                raise InvalidIndexAppendError(
                    f"Attempt to append an offset ({offset}) to slot {n} no larger than the last offset "
                    f"appended ({last_off}) to {self._path}."
                )
            if n != 0 and timestamp < last_ts:
                raise InvalidIndexAppendError(
                    f"Attempt to append a timestamp ({timestamp}) to slot {n} no larger than the last "
                    f"timestamp appended ({last_ts}) to {self._path}."
                )
            if timestamp > last_ts:
                if n >= self.max_entries:
                    raise InvalidIndexAppendError(
                        f"No room left in time index {self._path} (size = {n}), even with skip_full_check"
                    )
                rel = self.relative_offset(offset)
                self._store(n, _PACK(timestamp, rel), final=skip_full_check)
                self._entries = n + 1
                self._last_entry = TimestampOffset(timestamp, offset)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry with timestamp <= target, else (-1, base_offset)."""
        with self._lock:
            slot = self._largest_lower_bound(self._keys, target_timestamp)
            if slot == -1:
                return TimestampOffset(-1, self.base_offset)
            return TimestampOffset(int(self._keys[slot]), self.base_offset + int(self._values[slot]))

    def lookup_with_previous(self, target_timestamp: int) -> tuple[TimestampOffset, TimestampOffset]:
        """(the entry before the one :meth:`lookup` finds, that entry), each (-1, base_offset) when
        there is none: one search."""
        with self._lock:
            slot = self._largest_lower_bound(self._keys, target_timestamp)
            return self._entry_or_none(slot - 1), self._entry_or_none(slot)

    def _entry_or_none(self, slot: int) -> TimestampOffset:
        if slot < 0:
            return TimestampOffset(-1, self.base_offset)
        return TimestampOffset(int(self._keys[slot]), self.base_offset + int(self._values[slot]))

    def sanity_check(self) -> None:
        """Kafka's TimeIndex.sanityCheck: last timestamp >= first, last offset >= base offset,
        length a multiple of 12."""
        with self._lock:
            last_ts, last_off = self._last_entry
            if self._entries != 0:
                first_ts = int(self._keys[0])
                if last_ts < first_ts:
                    raise CorruptIndexError(
                        f"Corrupt time index found, time index file ({self._path.absolute()}) has non-zero "
                        f"size but the last timestamp is {last_ts} which is less than the first timestamp "
                        f"{first_ts}"
                    )
                if last_off < self.base_offset:
                    raise CorruptIndexError(
                        f"Corrupt time index found, time index file ({self._path.absolute()}) has non-zero "
                        f"size but the last offset is {last_off} which is less than the first offset "
                        f"{self.base_offset}"
                    )
            self._file_length_check("Time index")

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the entries in use as native int64 arrays: (timestamps, absolute offsets)."""
        with self._lock:
            n = self._entries
            return self._keys[:n].astype(np.int64), self._values[:n].astype(np.int64) + self.base_offset

"""Kafka's sparse segment indexes: ``OffsetIndex`` (.index) and ``TimeIndex`` (.timeindex).

Both are memory-mapped files of fixed-size big-endian entries, read through numpy views over the
mmap, with Kafka's rules (docs/kafka-format.md sections 2 and 3):

* a new file is preallocated to ``roundDown(max_index_size, entry_size)``; an existing file is taken
  as ``floor(length / entry_size)`` entries ("assume it is valid"), zero-filled tails included;
* unlike Kafka's sparse ``setLength``, preallocated space is allocated for real (``posix_fallocate``)
  before anything is stored through the mapping: on a full disk a store into a hole is a SIGBUS that
  kills the process, while an allocation fails with ENOSPC where it can be handled (the roll);
* ``trim_to_valid_size()`` cuts the file to exactly its entries (roll, clean close);
* lookups are a binary search restricted to the 8 KiB "warm section" at the end when the target
  lies there, so in-sync lookups keep touching the same few pages.

Thread-safety: the owning ``LogSegment`` serialises writers (append, truncate, resize, close).
Readers may call ``lookup`` / ``entry`` concurrently with an append: an append writes the entry's
bytes before it bumps ``entries``, so a reader sees either the old or the new last entry. A small
lock also keeps a reader off a mapping while ``resize`` swaps it (a shrinking remap under a reader
would otherwise fault on pages past the new end of file).

Each mapping keeps one file descriptor open (Python's mmap duplicates it). Read-only indexes
(``writable=False``) are a private copy of the file, not a mapping, so a reader survives the owning
writer truncating the file under it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
from bisect import bisect_right
from pathlib import Path
from typing import ClassVar

import numpy as np

from .errors import CorruptIndexError, IndexOffsetOverflowError, ReadOnlyLogError, SeglogError

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "WARM_SECTION_BYTES",
    "AbstractIndex",
    "InvalidIndexAppendError",
    "OffsetIndex",
    "TimeIndex",
]

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes / log.index.size.max.bytes
WARM_SECTION_BYTES = 8192  # Kafka: 8 KiB, at most 3 pages touched per in-sync lookup
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_ENTRY = struct.Struct(">ii")  # one offset-index entry: relative offset, position


# Every open of an index file: a symlink planted in a log dir is never followed (ELOOP).
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class InvalidIndexAppendError(SeglogError, ValueError):
    """An index append that breaks Kafka's rules: full index, or an offset/timestamp going backwards."""


class AbstractIndex:
    """What OffsetIndex and TimeIndex share: the mapping, entry count, search, resize and lifecycle.

    Subclasses define the numpy record dtype (big-endian fields), which field is the search *key*
    (offset index: relative offset; time index: timestamp) and which the *value* (position;
    relative offset).
    """

    ENTRY_SIZE: ClassVar[int]
    DTYPE: ClassVar[np.dtype]
    KEY_FIELD: ClassVar[str]
    VALUE_FIELD: ClassVar[str]
    KIND: ClassVar[str] = "index"

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        *,
        writable: bool = True,
    ) -> None:
        self._path = Path(path)
        self.base_offset = int(base_offset)
        self.max_index_size = int(max_index_size)
        self.writable = writable
        self._lock = threading.RLock()
        self._warm_entries = WARM_SECTION_BYTES // self.ENTRY_SIZE
        self._mm: mmap.mmap | None = None
        self._closed = False
        # Bytes of the file known to be allocated for real: a store into the mapping past them could
        # need a block the filesystem no longer has, which is a SIGBUS, not an error (see ``reserve``).
        self._reserved = 0

        if writable:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(self._path, os.O_RDWR | _NO_FOLLOW)
                newly_created = False
            try:
                if newly_created:
                    try:
                        if self.max_index_size < self.ENTRY_SIZE:
                            raise ValueError(
                                f"max_index_size {self.max_index_size} is smaller than one "
                                f"{self.ENTRY_SIZE}-byte entry ({self._path})"
                            )
                        # Kafka preallocates a sparse file; we allocate it for real (ENOSPC here, on
                        # the roll, rather than a SIGBUS at a later store into the mapping).
                        self._reserve(fd, self._round(self.max_index_size))
                    except BaseException:
                        os.close(fd)
                        fd = -1
                        self._path.unlink(missing_ok=True)
                        raise
                length = os.fstat(fd).st_size
                self._map(fd, length)
            finally:
                if fd >= 0:
                    os.close(fd)
            # Kafka: a new file starts empty; an existing one is "assumed valid" up to its length.
            self._entries = 0 if newly_created else length // self.ENTRY_SIZE
        else:
            fd = os.open(self._path, os.O_RDONLY | _NO_FOLLOW)
            try:
                length = os.fstat(fd).st_size
                self._map(fd, length)
            finally:
                os.close(fd)
            self._entries = self.max_entries  # the file may have shrunk between fstat and pread
        self._after_entries_changed()

    # ------------------------------------------------------------------ mapping

    def _round(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _reserve(self, fd: int, length: int) -> None:
        """Allocate the first ``length`` bytes of ``fd`` for real (``posix_fallocate``; the file grows
        to at least ``length``). OSError (ENOSPC...) naming the file when the filesystem has no room."""
        if length > 0:
            try:
                os.posix_fallocate(fd, 0, length)
            except OSError as exc:
                reason = f"{exc.strerror}: cannot reserve {length} bytes for the {self.KIND}"
                raise OSError(exc.errno, reason, str(self._path)) from None
        self._reserved = length

    def reserve(self) -> None:
        """Make sure every byte of the file is allocated, so no store into the mapping can fault.

        A file this object created or grew already is; one found on disk may be sparse (Kafka
        preallocates with ``setLength``), and a store into a hole of a full filesystem is a SIGBUS.
        Raises OSError (ENOSPC...) when the filesystem cannot give the blocks.
        """
        self._require_writable()
        with self._lock:
            if self._reserved >= self._length:
                return
            fd = os.open(self._path, os.O_RDWR | _NO_FOLLOW)
            try:
                self._reserve(fd, self._length)
            finally:
                os.close(fd)

    def _ensure_reserved(self, end: int) -> None:
        """Before a store into the mapping up to byte ``end``: reserve the file if that is not yet done."""
        if end > self._reserved:
            self.reserve()

    def _map(self, fd: int, length: int) -> None:
        """(Re)create the mapping and its numpy views over ``length`` bytes of ``fd``."""
        self._length = length
        self.max_entries = length // self.ENTRY_SIZE
        if length == 0:
            # mmap() of 0 bytes fails in Python: use empty views.
            self._mm = None
            arr = np.zeros(0, dtype=self.DTYPE)
        elif self.writable:
            self._mm = mmap.mmap(fd, length, access=mmap.ACCESS_WRITE)
            arr = np.frombuffer(self._mm, dtype=self.DTYPE, count=self.max_entries)
        else:
            # Readers take a private copy instead of a mapping: the owning writer may trim this very
            # file (on roll or close), and touching a mapped page past the new end is a SIGBUS.
            self._mm = None
            data = os.pread(fd, length, 0)
            self._length = len(data)  # kept as read, so sanity_check still sees a torn length
            self.max_entries = self._length // self.ENTRY_SIZE
            arr = np.frombuffer(data, dtype=self.DTYPE, count=self.max_entries)
        self._arr = arr
        self._keys = arr[self.KEY_FIELD]
        self._values = arr[self.VALUE_FIELD]

    def _unmap(self) -> None:
        mm = self._mm
        self._arr = self._keys = self._values = np.zeros(0, dtype=self.DTYPE)
        self._mm = None
        if mm is not None:
            # BufferError: something still holds a view; the mapping then goes with its last reference.
            with contextlib.suppress(BufferError):
                mm.close()

    def _require_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyLogError(f"{self.KIND} {self._path} is open read-only")
        if self._closed:
            raise ValueError(f"{self.KIND} {self._path} is closed")

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> Path:
        """The index file."""
        return self._path

    @property
    def entries(self) -> int:
        """Number of entries in use."""
        return self._entries

    @property
    def length(self) -> int:
        """Current file (and mapping) length in bytes."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by the entries (``entries * ENTRY_SIZE``)."""
        return self._entries * self.ENTRY_SIZE

    def is_full(self) -> bool:
        """True when no entry can be appended."""
        return self._entries >= self.max_entries

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``, which must fit a non-negative int32 (IndexOffsetOverflowError)."""
        rel = offset - self.base_offset
        if rel < 0 or rel > _INT32_MAX:
            raise IndexOffsetOverflowError(
                f"Integer overflow for offset: {offset} ({self._path}, base offset {self.base_offset})"
            )
        return rel

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` can be stored relative to this index's base offset."""
        return 0 <= offset - self.base_offset <= _INT32_MAX

    # ------------------------------------------------------------------ search

    def _largest_lower_bound(self, arr: np.ndarray, target: int) -> int:
        """Kafka's ``largestLowerBoundSlotFor`` over ``arr`` (the key or value column): the largest
        slot with arr[slot] <= target, or -1. Searches only the warm section (the last 8 KiB of
        entries) when the target lies in it. Must be called with the lock held."""
        n = self._entries
        if n == 0:
            return -1
        if self._closed:
            raise ValueError(f"{self.KIND} {self._path} is closed")
        first_hot = n - 1 - self._warm_entries
        if first_hot < 0:
            first_hot = 0
        if arr[first_hot] < target:
            lo, hi = first_hot, n
        elif arr[0] > target:
            return -1
        else:
            lo, hi = 0, first_hot + 1
        # bisect in C over the numpy column: O(log n) element reads, no copy.
        return bisect_right(arr, target, lo, hi) - 1

    def _smallest_upper_bound(self, arr: np.ndarray, target: int) -> int:
        """Kafka's ``smallestUpperBoundSlotFor``: the smallest slot with arr[slot] >= target, or -1."""
        slot = self._largest_lower_bound(arr, target)
        if slot >= 0 and arr[slot] == target:
            return slot
        return -1 if slot == self._entries - 1 else slot + 1

    # ------------------------------------------------------------------ lifecycle

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to whole entries and remap.

        Returns False when the length is already that. The entries in use must still fit. Growing
        allocates the new space for real first: on ENOSPC the OSError propagates and the index is left
        exactly as it was.
        """
        self._require_writable()
        with self._lock:
            rounded = self._round(int(new_size))
            if rounded == self._length:
                return False
            if rounded < self._entries * self.ENTRY_SIZE:
                raise ValueError(
                    f"cannot resize {self._path} to {rounded} bytes: it holds {self._entries} entries"
                )
            fd = os.open(self._path, os.O_RDWR | _NO_FOLLOW)
            try:
                if rounded > self._length:
                    try:
                        self._reserve(fd, rounded)
                    except OSError:
                        os.ftruncate(fd, self._length)  # a partial allocation may have grown the file
                        raise
                self._unmap()
                os.ftruncate(fd, rounded)
                self._map(fd, rounded)
                self._reserved = min(self._reserved, rounded)
            finally:
                os.close(fd)
            return True

    def trim_to_valid_size(self) -> None:
        """Cut the file to exactly its entries (done on roll and on close)."""
        self.resize(self._entries * self.ENTRY_SIZE)

    def _truncate_to_entries(self, n: int) -> None:
        with self._lock:
            self._entries = n
            self._after_entries_changed()

    def reset(self, size: int | None = None) -> None:
        """Drop every entry and size the file to ``size`` (default ``max_index_size``), all of it
        allocated (OSError such as ENOSPC when the filesystem has no room)."""
        self._require_writable()
        with self._lock:
            self._truncate_to_entries(0)
            self.resize(self.max_index_size if size is None else size)
            self.reserve()

    def flush(self) -> None:
        """Write the mapped pages to disk (msync)."""
        with self._lock:
            if self._mm is not None and self.writable:
                self._mm.flush()

    def close_handler(self) -> None:
        """Unmap without trimming (Kafka's ``closeHandler``)."""
        with self._lock:
            self._unmap()
            self._closed = True

    def close(self) -> None:
        """Trim to the valid size (writable indexes) and unmap."""
        with self._lock:
            if self._closed:
                return
            if self.writable:
                self.trim_to_valid_size()
            self.close_handler()

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Rename the file (e.g. to ``.deleted``); the mapping stays valid."""
        new_path = Path(new_path)
        with self._lock:
            os.replace(self._path, new_path)
            self._path = new_path

    def delete_if_exists(self) -> bool:
        """Unmap and delete the file; False when it was already gone."""
        with self._lock:
            self._unmap()
            self._closed = True
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def __enter__(self) -> AbstractIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self._path)!r}, base_offset={self.base_offset}, "
            f"entries={self._entries}, max_entries={self.max_entries})"
        )

    # ------------------------------------------------------------------ for readers / tools

    def entries_before_zero_tail(self) -> int:
        """Entries before the first entry i > 0 whose relative offset is 0.

        This is how kafka-dump-log.sh tells real entries from the zero-filled preallocated tail
        of an active (untrimmed) index; the broker itself never does this.
        """
        with self._lock:
            n = self._entries
            if n <= 1:
                return n
            rel = self._arr["rel"][1:n]
            zeros = np.flatnonzero(rel == 0)
            return int(zeros[0]) + 1 if zeros.size else n

    def limit_entries(self, n: int) -> None:
        """Use only the first ``n`` entries; writes nothing, so read-only indexes allow it.

        For readers of an active segment's preallocated index:
        ``index.limit_entries(index.entries_before_zero_tail())``.
        """
        if not 0 <= n <= self._entries:
            raise ValueError(f"cannot limit {self._path} with {self._entries} entries to {n}")
        self._truncate_to_entries(n)

    def _after_entries_changed(self) -> None:
        """Hook: refresh cached last-entry values after ``entries`` changed."""

    def sanity_check(self) -> None:
        """Kafka's sanity check; raises CorruptIndexError naming the file."""
        raise NotImplementedError

    def _file_length_check(self, label: str) -> None:
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{label} file {self._path.absolute()} is corrupt, found {self._length} bytes which is "
                f"neither positive nor a multiple of {self.ENTRY_SIZE}."
            )


class OffsetIndex(AbstractIndex):
    """The .index file: 8-byte entries (relative offset int32, position int32), big-endian.

    Maps an offset to the byte position in the .log of the batch to start scanning from.
    """

    ENTRY_SIZE = 8
    DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])
    KEY_FIELD = "rel"
    VALUE_FIELD = "pos"
    KIND = "offset index"
    _PACK = struct.Struct(">ii").pack_into

    def _after_entries_changed(self) -> None:
        n = self._entries
        self._last_offset = self.base_offset + int(self._keys[n - 1]) if n else self.base_offset

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty."""
        return self._last_offset

    @property
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        with self._lock:
            n = self._entries
            if n == 0:
                return self.base_offset, 0
            return self.base_offset + int(self._keys[n - 1]), int(self._values[n - 1])

    def entry(self, i: int) -> tuple[int, int]:
        """The i-th entry as (absolute offset, position)."""
        with self._lock:
            if not 0 <= i < self._entries:
                raise IndexError(f"attempt to fetch the {i}th entry from {self._path} of {self._entries}")
            return self.base_offset + int(self._keys[i]), int(self._values[i])

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
            if not 0 <= position <= _INT32_MAX:
                raise ValueError(f"position {position} does not fit an int32 ({self._path})")
            self._ensure_reserved((n + 1) * 8)
            assert self._mm is not None
            # Bytes first, then the count: concurrent readers only look at [0, entries).
            self._PACK(self._mm, n * 8, rel, position)
            self._entries = n + 1
            self._last_offset = offset

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (base_offset, 0)."""
        target = target_offset - self.base_offset
        if target > _INT32_MAX:
            target = _INT32_MAX
        elif target < _INT32_MIN:
            target = _INT32_MIN
        with self._lock:
            slot = self._largest_lower_bound(self._keys, target)
            if slot == -1:
                return self.base_offset, 0
            return self.base_offset + int(self._keys[slot]), int(self._values[slot])

    def lookup_bounds(self, target_offset: int) -> tuple[tuple[int, int], tuple[int, int] | None]:
        """``lookup(target)`` plus the first entry with offset >= target (None when there is none).

        The batch at that upper entry's position ends at or after the target; when it also starts at
        or before it, it holds the target and a reader needs no scan from the lower entry.
        """
        target = min(max(target_offset - self.base_offset, _INT32_MIN), _INT32_MAX)
        base = self.base_offset
        with self._lock:
            slot = self._largest_lower_bound(self._keys, target)
            # Both entries straight from the bytes: cheaper than numpy scalar conversions.
            if slot == -1:
                lower = (base, 0)
            else:
                rel, pos = _ENTRY.unpack_from(self._arr, slot * 8)
                lower = (base + rel, pos)
                if rel == target:
                    return lower, lower
            if slot + 1 >= self._entries:
                return lower, None
            rel, pos = _ENTRY.unpack_from(self._arr, (slot + 1) * 8)
            return lower, (base + rel, pos)

    def fetch_upper_bound_offset(self, position: int, fetch_size: int) -> tuple[int, int] | None:
        """The first entry whose position is >= position + fetch_size, or None (Kafka's
        ``fetchUpperBoundOffset``): a byte bound for reading ``fetch_size`` bytes from ``position``."""
        target = min(position + fetch_size, _INT32_MAX)
        with self._lock:
            slot = self._smallest_upper_bound(self._values, target)
            if slot == -1:
                return None
            return self.base_offset + int(self._keys[slot]), int(self._values[slot])

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= ``offset`` (the file keeps its length)."""
        self._require_writable()
        target = min(max(offset - self.base_offset, _INT32_MIN), _INT32_MAX)
        with self._lock:
            slot = self._largest_lower_bound(self._keys, target)
            if slot < 0:
                n = 0
            elif int(self._keys[slot]) == offset - self.base_offset:
                n = slot
            else:
                n = slot + 1
            self._truncate_to_entries(n)

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


class TimeIndex(AbstractIndex):
    """The .timeindex file: 12-byte entries (timestamp int64, relative offset int32), big-endian.

    An entry (T, O) means: the largest timestamp seen in the segment up to offset O is T.
    """

    ENTRY_SIZE = 12
    DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])
    KEY_FIELD = "ts"
    VALUE_FIELD = "rel"
    KIND = "time index"
    _PACK = struct.Struct(">qi").pack_into

    def _after_entries_changed(self) -> None:
        n = self._entries
        if n:
            self._last_entry = (int(self._keys[n - 1]), self.base_offset + int(self._values[n - 1]))
        else:
            self._last_entry = (-1, self.base_offset)

    def is_full(self) -> bool:
        """True once one slot is left: it is reserved for the entry written on roll or close."""
        return self._entries >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        return self._last_entry

    def entry(self, i: int) -> tuple[int, int]:
        """The i-th entry as (timestamp, absolute offset)."""
        with self._lock:
            if not 0 <= i < self._entries:
                raise IndexError(f"attempt to fetch the {i}th entry from {self._path} of {self._entries}")
            return int(self._keys[i]), self.base_offset + int(self._values[i])

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
                self._ensure_reserved((n + 1) * 12)
                assert self._mm is not None
                self._PACK(self._mm, n * 12, timestamp, rel)
                self._entries = n + 1
                self._last_entry = (timestamp, offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, else (-1, base_offset)."""
        with self._lock:
            slot = self._largest_lower_bound(self._keys, target_timestamp)
            if slot == -1:
                return -1, self.base_offset
            return int(self._keys[slot]), self.base_offset + int(self._values[slot])

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= ``offset`` (the file keeps its length)."""
        self._require_writable()
        target = min(max(offset - self.base_offset, _INT32_MIN), _INT32_MAX)
        with self._lock:
            slot = self._largest_lower_bound(self._values, target)
            if slot < 0:
                n = 0
            elif int(self._values[slot]) == offset - self.base_offset:
                n = slot
            else:
                n = slot + 1
            self._truncate_to_entries(n)

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

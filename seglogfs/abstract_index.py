"""``AbstractIndex``: what Kafka's sparse segment indexes, ``OffsetIndex`` (.index) and ``TimeIndex``
(.timeindex), share.

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
import threading
from bisect import bisect_right
from pathlib import Path
from typing import ClassVar

import numpy as np

from .errors import CorruptIndexError, IndexOffsetOverflowError, ReadOnlyLogError, SeglogError

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "INT32_MAX",
    "INT32_MIN",
    "WARM_SECTION_BYTES",
    "AbstractIndex",
    "InvalidIndexAppendError",
]

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes / log.index.size.max.bytes
WARM_SECTION_BYTES = 8192  # Kafka: 8 KiB, at most 3 pages touched per in-sync lookup
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # relative offsets and positions are int32 on disk


# Every open of an index file: a symlink planted in a log dir is never followed (ELOOP).
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class InvalidIndexAppendError(SeglogError, ValueError):
    """An index append that breaks Kafka's rules: full index, or an offset/timestamp going backwards."""


class AbstractIndex:
    """What OffsetIndex and TimeIndex share: the mapping, entry count, search, resize and lifecycle.

    Subclasses define the numpy record dtype (big-endian fields), which field is the search *key*
    (offset index: relative offset; time index: timestamp) and which the *value* (position;
    relative offset). Both name their relative-offset field ``rel`` (``RELATIVE_OFFSET_FIELD``).
    """

    ENTRY_SIZE: ClassVar[int]
    DTYPE: ClassVar[np.dtype]
    KEY_FIELD: ClassVar[str]
    VALUE_FIELD: ClassVar[str]
    KIND: ClassVar[str] = "index"
    RELATIVE_OFFSET_FIELD: ClassVar[str] = "rel"

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
        if rel < 0 or rel > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"Integer overflow for offset: {offset} ({self._path}, base offset {self.base_offset})"
            )
        return rel

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` can be stored relative to this index's base offset."""
        return 0 <= offset - self.base_offset <= INT32_MAX

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

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= ``offset`` (the file keeps its length; Kafka's truncateTo)."""
        self._require_writable()
        target = min(max(offset - self.base_offset, INT32_MIN), INT32_MAX)
        with self._lock:
            relative_offsets = self._arr[self.RELATIVE_OFFSET_FIELD]
            slot = self._largest_lower_bound(relative_offsets, target)
            if slot < 0:
                n = 0
            elif int(relative_offsets[slot]) == offset - self.base_offset:
                n = slot
            else:
                n = slot + 1
            self._truncate_to_entries(n)

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
            rel = self._arr[self.RELATIVE_OFFSET_FIELD][1:n]
            zeros = np.flatnonzero(rel == 0)
            return int(zeros[0]) + 1 if zeros.size else n

    def is_zero_filled(self) -> bool:
        """True when every byte of the file is zero: preallocated, and no entry was ever written."""
        with self._lock:
            return not np.frombuffer(self._arr.tobytes(), np.uint8).any()

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



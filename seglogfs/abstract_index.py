"""``AbstractIndex``: what Kafka's sparse segment indexes, ``OffsetIndex`` (.index) and ``TimeIndex``
(.timeindex), share.

Both are files of fixed-size big-endian entries with Kafka's rules (docs/kafka-format.md sections 2
and 3):

* a new file is preallocated to ``roundDown(max_index_size, entry_size)`` sparse, as Kafka's
  ``setLength`` (``ftruncate``): it costs no disk until entries are written; an existing file is taken
  as ``floor(length / entry_size)`` entries ("assume it is valid"), zero-filled tails included;
* entries are written with ``pwrite`` (a full disk is ENOSPC, raised to the append) and kept in a
  process-memory copy the size of the entries in use, which the searches read through numpy views.
  Nothing is memory-mapped: a store into a hole of a full disk, and on tmpfs even a load from one,
  is a SIGBUS; reading the file is ``pread``, which returns zeros for holes;
* ``trim_to_valid_size()`` cuts the file to exactly its entries (roll, clean close);
* lookups are a binary search restricted to the 8 KiB "warm section" at the end when the target
  lies there.

Thread-safety: the owning ``LogSegment`` serialises writers (append, truncate, resize, close).
Readers may call ``lookup`` / ``entry`` concurrently with an append; the lock keeps them off the
copy while an append grows it.

An index holds no descriptor while idle: the write descriptor opens at the first append and
``close_files`` (the descriptor budget) closes it again; reopening refuses a symlink (O_NOFOLLOW)
and names a file that vanished (``SegmentFileMissingError``).
"""

from __future__ import annotations

import errno
import os
import threading
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np

from .errors import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    ReadOnlyLogError,
    SeglogError,
    SegmentFileMissingError,
)

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


_FIRST_CAPACITY = 64  # entries of a copy's first allocation; it doubles from there

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
    #: keep the slot after the last entry allocated: an entry that must not fail (the time index's
    #: final entry, written on roll and close) then lands where the disk already gave room
    ALLOCATES_NEXT_SLOT: ClassVar[bool] = False

    _buf: np.ndarray  # the memory copy of the entries' bytes (uint8)
    _arr: np.ndarray  # the same bytes as entries (DTYPE)
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
        self._closed = False
        self._fd = -1  # the write descriptor: opened by the first store, closed by close_files()
        self._dirty = False  # stored since the last flush
        #: called when the write descriptor opens (the owning segment tells the descriptor budget)
        self.on_descriptor_opened: Callable[[], None] | None = None

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
                        # Kafka's setLength: sparse, no block allocated until an entry is written.
                        os.ftruncate(fd, self._round(self.max_index_size))
                        if self.ALLOCATES_NEXT_SLOT:
                            self._allocate_slot(fd, 0, os.fstat(fd).st_size)
                    except BaseException:
                        os.close(fd)
                        fd = -1
                        self._path.unlink(missing_ok=True)
                        raise
                self._load(fd, empty=newly_created)
            finally:
                if fd >= 0:
                    os.close(fd)
            # Kafka: a new file starts empty; an existing one is "assumed valid" up to its length.
            self._entries = 0 if newly_created else self.max_entries
        else:
            fd = os.open(self._path, os.O_RDONLY | _NO_FOLLOW)
            try:
                self._load(fd, empty=False)
            finally:
                os.close(fd)
            self._entries = self.max_entries  # the file may have shrunk between fstat and pread
        self._after_entries_changed()

    # ------------------------------------------------------------------ the entries' copy

    def _round(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _load(self, fd: int, *, empty: bool) -> None:
        """Take the file's length, and its entries into memory (none when ``empty``)."""
        length = os.fstat(fd).st_size
        self._length = length
        self.max_entries = length // self.ENTRY_SIZE
        data = b"" if empty or length == 0 else os.pread(fd, length, 0)
        if not self.writable:
            self._length = len(data)  # kept as read, so sanity_check still sees a torn length
            self.max_entries = self._length // self.ENTRY_SIZE
        count = len(data) // self.ENTRY_SIZE
        if self.writable:
            self._set_capacity(count)
            used = count * self.ENTRY_SIZE
            self._buf[:used] = np.frombuffer(data, dtype=np.uint8, count=used)
        else:
            # Readers keep the bytes as read: the owning writer may trim or grow the file under them.
            self._buf = np.frombuffer(data, dtype=np.uint8, count=count * self.ENTRY_SIZE)
            self._set_views()

    def _set_capacity(self, entries: int) -> None:
        """Make the copy hold ``entries`` entries, keeping those in use (the lock held)."""
        buf = np.zeros(entries * self.ENTRY_SIZE, dtype=np.uint8)
        old = getattr(self, "_buf", None)
        if old is not None:
            keep = min(old.size, buf.size)
            buf[:keep] = old[:keep]
        self._buf = buf
        self._set_views()

    def _set_views(self) -> None:
        arr = self._buf.view(self.DTYPE)
        self._arr = arr
        self._keys = arr[self.KEY_FIELD]
        self._values = arr[self.VALUE_FIELD]

    def _write_fd(self) -> int:
        """The write descriptor, opened when needed (never creating: a vanished file is an error)."""
        if self._fd < 0:
            try:
                self._fd = os.open(self._path, os.O_RDWR | _NO_FOLLOW)
            except FileNotFoundError:
                raise SegmentFileMissingError(
                    errno.ENOENT, f"the {self.KIND} is gone from disk", str(self._path)
                ) from None
            if self.on_descriptor_opened is not None:
                self.on_descriptor_opened()
        return self._fd

    def _allocate_slot(self, fd: int, slot: int, length: int) -> None:
        """Write zeros over ``slot`` when the file has it (what a sparse file reads there anyway)."""
        offset = slot * self.ENTRY_SIZE
        if offset + self.ENTRY_SIZE <= length:
            zeros = bytes(self.ENTRY_SIZE)
            if os.pwrite(fd, zeros, offset) != len(zeros):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self._path))

    def _store(self, slot: int, entry: bytes, *, final: bool = False) -> None:
        """Write entry ``slot`` to the file, then to the copy (the caller bumps ``entries``).
        ``final``: the last entry of a roll or close, which allocates no slot after it.

        OSError (ENOSPC...) naming the file when the filesystem cannot take it; the copy is then
        unchanged."""
        offset = slot * self.ENTRY_SIZE
        if self.ALLOCATES_NEXT_SLOT and not final and offset + 2 * self.ENTRY_SIZE <= self._length:
            entry += bytes(self.ENTRY_SIZE)
        try:
            written = os.pwrite(self._write_fd(), entry, offset)
        except SegmentFileMissingError:
            raise
        except OSError as exc:
            reason = f"{exc.strerror}: cannot write to the {self.KIND}"
            raise OSError(exc.errno, reason, str(self._path)) from None
        if written != len(entry):
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: short write", str(self._path))
        self._dirty = True
        entry = entry[: self.ENTRY_SIZE]
        if offset + len(entry) > self._buf.size:
            capacity = max(2 * (self._buf.size // self.ENTRY_SIZE), _FIRST_CAPACITY, slot + 1)
            self._set_capacity(min(capacity, max(self.max_entries, slot + 1)))
        self._buf[offset : offset + len(entry)] = np.frombuffer(entry, dtype=np.uint8)

    def close_files(self) -> bool:
        """Close the write descriptor unless a writer is using it (False then); the next store
        reopens it. Nothing else is held."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            return True
        finally:
            self._lock.release()

    @property
    def holds_descriptor(self) -> bool:
        """Whether the write descriptor is open."""
        return self._fd >= 0

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
        """Current file length in bytes."""
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
        """Set the file length to ``new_size`` rounded down to whole entries (sparse when growing:
        ``ftruncate``, as Kafka's ``setLength``). Returns False when the length is already that.
        The entries in use must still fit. OSError (ENOSPC) when the next slot must be allocated
        and cannot: the file is then left as it was."""
        self._require_writable()
        with self._lock:
            rounded = self._round(int(new_size))
            if rounded == self._length:
                return False
            if rounded < self._entries * self.ENTRY_SIZE:
                raise ValueError(
                    f"cannot resize {self._path} to {rounded} bytes: it holds {self._entries} entries"
                )
            fd = self._write_fd()
            os.ftruncate(fd, rounded)
            if self.ALLOCATES_NEXT_SLOT and rounded > self._length:
                try:
                    self._allocate_slot(fd, self._entries, rounded)
                except OSError:
                    os.ftruncate(fd, self._length)
                    raise
            self._length = rounded
            self.max_entries = rounded // self.ENTRY_SIZE
            if self._buf.size > rounded:
                self._set_capacity(self.max_entries)
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
        """Drop every entry and size the file to ``size`` (default ``max_index_size``), sparse."""
        self._require_writable()
        with self._lock:
            self._truncate_to_entries(0)
            # Zero length first: the stale entries' blocks go back to the filesystem.
            self.resize(0)
            self.resize(self.max_index_size if size is None else size)

    def flush(self) -> None:
        """Write the entries stored so far to disk (fsync)."""
        with self._lock:
            if self._dirty and self.writable and not self._closed:
                os.fsync(self._write_fd())
                self._dirty = False

    def close_handler(self) -> None:
        """Drop the copy and the descriptor without trimming (Kafka's ``closeHandler``)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._buf = np.zeros(0, dtype=np.uint8)
            self._set_views()
            self._closed = True

    def close(self) -> None:
        """Trim to the valid size (writable indexes) and let go of the file."""
        with self._lock:
            if self._closed:
                return
            try:
                if self.writable:
                    self.trim_to_valid_size()
            finally:
                self.close_handler()

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Rename the file (e.g. to ``.deleted``); an open descriptor follows it."""
        new_path = Path(new_path)
        with self._lock:
            os.replace(self._path, new_path)
            self._path = new_path

    def delete_if_exists(self) -> bool:
        """Close and delete the file; False when it was already gone."""
        with self._lock:
            self.close_handler()
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



"""LogSegment: one ``<base>.log`` with its ``.index`` and ``.timeindex``, as Kafka lays them out.

Appends follow Kafka's LogSegment.append (docs/kafka-format.md section 3): the index test
runs before the current append is counted, the offset entry pairs the append's last offset with its
first byte, and the time entry pairs the segment's max timestamp so far with the last offset of the
batch holding it. Recovery rebuilds both indexes per batch with the same rule.

Writers are serialised by the owning Log; readers use ``pread`` and may run concurrently with an
append (a batch becomes visible once ``size`` covers it, and ``size`` moves only after the write).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import random
import stat
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from .descriptor_budget import BUDGET
from .errors import CorruptIndexError, CorruptRecordError, SegmentFileMissingError
from .index import DEFAULT_MAX_INDEX_SIZE, AbstractIndex, EmptyIndex, OffsetIndex, TimeIndex
from .log_files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_file_name
from .records import (
    HEADER_SIZE_UP_TO_MAGIC,
    V2_HEADER_SIZE,
    BatchHeader,
    Record,
    RecordBounds,
    iter_batch_headers,
    read_batch_header,
    read_record_in_batch,
)
from .segment_lookup import SegmentLookup
from .segment_recovery import Rebuilt, SegmentRecovery
from .segment_survey import Damage, SegmentSurvey
from .segment_totals import SegmentTotals
from .transaction_index import TransactionIndex

__all__ = [
    "Damage", "LogSegment", "next_offset_of_file", "pread_header", "pread_within", "random_roll_jitter",
]

_READ_CHUNK = 4 * 1024 * 1024
_UIDS = itertools.count(1)
_NO_LIMIT = 1 << 62
_Index = TypeVar("_Index", OffsetIndex, TimeIndex)

log = logging.getLogger(__name__)


class LogSegment:
    """A segment of a log. ``writable=False`` opens it for reading only and never touches the files.

    Three collaborators, each in its own module, do the segment's harder walks through its public
    reads: finding an offset's batch (:class:`~seglogfs.segment_lookup.SegmentLookup`), the damage
    survey (:class:`~seglogfs.segment_survey.SegmentSurvey`), and the index checks, recovery and
    tail-finding (:class:`~seglogfs.segment_recovery.SegmentRecovery`).
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        roll_jitter_ms: int = 0,
        writable: bool = True,
        created_ms: int = 0,
        file_suffix: str = "",
    ):
        self.dir = Path(directory)
        self.base_offset = base_offset
        #: unique for the process's life, unlike id(): a compacted copy never passes for the original
        self.uid = next(_UIDS)
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.writable = writable
        self.created_ms = created_ms
        # ``file_suffix``: the log cleaner writes a segment as ``<base>.log.cleaned`` and its indexes.
        self.log_path = self.dir / (segment_file_name(base_offset, LOG_SUFFIX) + file_suffix)
        self.index_path = self.dir / (segment_file_name(base_offset, INDEX_SUFFIX) + file_suffix)
        self.time_index_path = self.dir / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + file_suffix)
        #: the aborted transactions whose markers this segment holds (no file until the first one)
        self.txn_index = TransactionIndex(
            self.dir / (segment_file_name(base_offset, TXN_INDEX_SUFFIX) + file_suffix), base_offset,
            writable=writable,
        )
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        self._open_flags = flags | os.O_CLOEXEC | os.O_NOFOLLOW  # a planted symlink is ELOOP
        self._fd_value = -1
        # One item per reader or writer using the descriptor now (append and pop are atomic under the
        # GIL, so the hot paths take no lock): the budget leaves it open while there are any.
        self._users: list[None] = []
        self._pinned = False  # hold_open(): this very file, never closed by the budget
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the .log first opened
        if writable and not self.log_path.exists():
            self._fd_value = os.open(self.log_path, self._open_flags, 0o644)
            self._identity = _identity(self._fd_value)
        # Existing segments open their .log only when first read or written, and the descriptor
        # budget closes it again when the segment is idle (5000 logs must not hold 5000
        # descriptors); the size comes from the directory entry, and (st_dev, st_ino) the identity
        # every reopen and :meth:`vanished` check.
        try:
            st = os.lstat(self.log_path)  # the entry itself: a planted symlink is not the file it names
            self._identity = (st.st_dev, st.st_ino)
            self.size = os.stat(self.log_path).st_size if stat.S_ISLNK(st.st_mode) else st.st_size
        except FileNotFoundError:
            if writable:
                raise
            # A reader of a log dir with no segment yet, or of one retention just removed: empty.
            self.size = 0
        self._lock = threading.Lock()
        # a reader's EmptyIndex stands in for a missing or wrong index (lookups then scan)
        self._offset_index: OffsetIndex | EmptyIndex | None = None
        self._time_index: TimeIndex | EmptyIndex | None = None
        self._bytes_since_last_index_entry = 0
        self._max_timestamp: int | None = None  # loaded lazily from the time index
        self._offset_of_max_timestamp = base_offset
        self._rolling_based_timestamp: int | None = None
        self.needs_index_rebuild = writable and not self.index_path.exists()
        self.offset_limit: int | None = None  # the next segment's base offset (the Log sets it)
        self._index_lock = threading.RLock()
        self._indexes_ready = False  # both indexes open (and checked once)
        self._indexes_checked = False  # checked against the .log (or rebuilt) since this object exists
        self._checking_indexes = False
        self.totals = SegmentTotals(self)  # the views' byte counts (seglogfs.segment_totals)
        # Its parts see it through a proxy: no reference cycle, so a segment retention or the cleaner
        # removed is freed at once, without the garbage collector (whose full passes hold the GIL)
        me = weakref.proxy(self)
        self._survey = SegmentSurvey(me)
        self._lookup = SegmentLookup(me, self._survey)
        self._recovery = SegmentRecovery(me, self._survey)
        if self._fd_value >= 0:
            BUDGET.touch(self)

    @contextlib.contextmanager
    def _log_fd(self) -> Iterator[int]:
        """The .log's descriptor for the length of the block: opened when the budget closed it (or
        never opened it), and left open by the budget while the block runs."""
        fd = self._acquire_fd()
        try:
            yield fd
        finally:
            self._release_fd()

    def _acquire_fd(self) -> int:
        """:meth:`_log_fd` for the hot paths (no generator): pair with :meth:`_release_fd`.

        Registers the use before reading the descriptor; ``release_files`` clears the descriptor
        before it looks for uses (and puts it back when it finds one), so a use either sees a
        descriptor nobody closes under it or none at all (and opens one under the lock)."""
        users = self._users
        users.append(None)
        fd = self._fd_value
        if fd < 0:
            try:
                with self._lock:
                    fd = self._fd_value
                    if fd < 0:
                        fd = self._fd_value = self._reopen_log()
            except BaseException:
                users.pop()
                raise
        BUDGET.touch(self)
        return fd

    def _release_fd(self) -> None:
        self._users.pop()

    def _reopen_log(self) -> int:
        """Open the .log (the lock held). Never O_CREAT: a reader reopening a segment retention has
        deleted must fail, not bring back an empty .log; a writer's .log that vanished is
        ``SegmentFileMissingError`` (a FileNotFoundError) naming it."""
        try:
            fd = os.open(self.log_path, self._open_flags & ~os.O_CREAT)
        except FileNotFoundError:
            if not self.writable:
                raise
            raise SegmentFileMissingError(
                errno.ENOENT, "the segment's .log is gone from disk", str(self.log_path)
            ) from None
        identity = _identity(fd)
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:  # another file under the name: never read it as this one
            os.close(fd)
            raise SegmentFileMissingError(
                errno.ENOENT, "the segment's .log was replaced on disk", str(self.log_path)
            )
        return fd

    def release_files(self) -> bool:
        """Close the .log and the indexes' write descriptors unless they are in use (False then);
        they reopen on the next use. Called by the descriptor budget."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._pinned:
                return False
            fd, self._fd_value = self._fd_value, -1  # first: see _acquire_fd
            if self._users or not all(
                index.close_files()
                for index in (self._offset_index, self._time_index)
                if isinstance(index, AbstractIndex)
            ):
                self._fd_value = fd
                return False
            if fd >= 0:
                os.close(fd)
            self._drop_sealed_indexes()
            return True
        finally:
            self._lock.release()

    def _drop_sealed_indexes(self) -> None:
        """A sealed segment's index copies go too (memory the size of their entries); they load
        again on the next lookup. Readers holding them keep theirs. Skipped while they are being
        opened or checked."""
        if self.offset_limit is None or not self._index_lock.acquire(blocking=False):
            return
        try:
            if not self._checking_indexes:
                self._offset_index = self._time_index = None
                self._indexes_ready = False
        finally:
            self._index_lock.release()

    def _touch_budget(self) -> None:
        BUDGET.touch(self)

    def vanished(self) -> str | None:
        """Why the file at ``log_path`` is no longer this segment's .log, or None while it is: removed
        (the directory too), replaced by another file, or cut below the bytes the segment holds.
        Two cheap calls (a stat of the path, an fstat of the open descriptor), for a writer to make
        before it acknowledges an append."""
        try:
            st = os.stat(self.log_path, follow_symlinks=False)
        except FileNotFoundError:
            return f"{self.log_path} is gone (removed, or its directory was)"
        users = self._users
        users.append(None)  # a use first, then the descriptor: the budget never closes it under us
        try:
            fd = self._fd_value
            own = os.fstat(fd) if fd >= 0 else None
        finally:
            users.pop()
        if own is not None and own.st_nlink == 0:
            return f"{self.log_path} was removed and another file made in its place"
        identity = (own.st_dev, own.st_ino) if own is not None else self._identity
        if identity is not None and (st.st_dev, st.st_ino) != identity:
            return f"{self.log_path} is another file than the one written (replaced, or its directory was)"
        if st.st_size < self.size:
            return f"{self.log_path} was cut to {st.st_size} bytes while it holds {self.size}"
        return None

    def cut_short(self) -> str | None:
        """Why the .log is shorter than the bytes the segment holds (cut under the process), or None:
        a writer's look before it writes at the end (one fstat)."""
        with self._log_fd() as fd:
            size = os.fstat(fd).st_size
        if size < self.size:
            return f"{self.log_path} was cut to {size} bytes while it holds {self.size}"
        return None

    def hold_open(self) -> None:
        """Open the .log now rather than at the first read, and keep it open: the segment then reads
        the same file whatever renames follow (a reader's view of a ``.swap`` its owner is about to
        install). FileNotFoundError when it is gone already."""
        with self._log_fd():
            self._pinned = True

    def open_reader_fd(self) -> int:
        """A descriptor of the .log that the caller owns (and closes), for a reader that must outlive
        the segment's own: retention's purge closes that one, and its number may then be reused.

        A duplicate of the segment's descriptor when it is open (the same file whatever renames
        happened since, and no path lookup), else an open of the current ``log_path`` (``.deleted``
        once retention renamed it; the segment does not keep it, so 1000 segments do not hold 1000
        descriptors). FileNotFoundError once the files are purged; nothing is ever created.
        """
        with self._lock:  # against close() and rename_suffix(): the descriptor and path stay valid
            if self._fd_value >= 0:
                return os.dup(self._fd_value)
            fd = os.open(self.log_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            if self._identity is not None and _identity(fd) != self._identity:
                os.close(fd)  # another file took the name: this segment's bytes are gone
                raise SegmentFileMissingError(
                    errno.ENOENT, "the segment's .log was replaced on disk", str(self.log_path)
                )
            return fd

    # ------------------------------------------------------------------ indexes (opened lazily)

    @property
    def offset_index(self) -> OffsetIndex:
        if not self._indexes_ready:
            self._open_indexes()
        # open now; a reader's EmptyIndex answers every lookup an OffsetIndex does
        return self._offset_index  # type: ignore[return-value]

    @property
    def time_index(self) -> TimeIndex:
        if not self._indexes_ready:
            self._open_indexes()
        # open now; a reader's EmptyIndex answers every lookup a TimeIndex does
        return self._time_index  # type: ignore[return-value]

    def _open_indexes(self) -> None:
        """Open both indexes; the first time, check them against the .log and rebuild them if wrong."""
        with self._index_lock:
            if self._indexes_ready:
                return
            if self._offset_index is None:
                self._offset_index = self._open_index(OffsetIndex, self.index_path)
            if self._time_index is None:
                self._time_index = self._open_index(TimeIndex, self.time_index_path)
            if self._checking_indexes:  # the check below reads batches through the indexes
                return
            if not self._indexes_checked and not self.needs_index_rebuild and self.size > 0:
                self._checking_indexes = True
                try:
                    problem = self._recovery.index_problem(self._offset_index, self._time_index)
                    if problem is not None:
                        self._index_failed(problem)
                finally:
                    self._checking_indexes = False
            elif not self._indexes_checked and self.writable and self.size == 0:
                # An empty .log has nothing to index: what its preallocated files hold are zeros a
                # power loss kept with the files' length and not their trim (taken as entries, they
                # would fill the index).
                for index in (self._offset_index, self._time_index):
                    if isinstance(index, AbstractIndex) and index.entries:
                        index.limit_entries(0)
            self._indexes_checked = True
            self._indexes_ready = True

    def _open_index(self, cls: type[_Index], path: Path) -> _Index | EmptyIndex:
        """One index: the writer's (created when missing), or a reader's checked copy (an
        ``EmptyIndex`` when it is missing or fails Kafka's sanity check: lookups then scan)."""
        if self.writable:
            index = cls(path, self.base_offset, self.max_index_size, writable=True)
            index.on_descriptor_opened = self._touch_budget
            return index
        if not path.exists():
            return EmptyIndex(cls is OffsetIndex, self.base_offset)
        try:
            index = cls(path, self.base_offset, writable=False)
        except FileNotFoundError:  # removed (retention) since the check above
            return EmptyIndex(cls is OffsetIndex, self.base_offset)
        # A reader may meet the preallocated, zero-filled tail of an active segment's index.
        index.limit_entries(index.entries_before_zero_tail())
        if cls is OffsetIndex:
            # The owner may have appended since ``size`` was read: entries at or past it point at
            # batches this reader does not see (its end offset stops before them).
            _, positions = index.to_arrays()
            index.limit_entries(int(np.searchsorted(positions, self.size)))
        try:
            index.sanity_check()
        except CorruptIndexError:
            index.close()
            return EmptyIndex(cls is OffsetIndex, self.base_offset)
        return index

    def index_problem(self) -> str | None:
        """Why the indexes cannot be trusted, naming the file, or None
        (:meth:`~seglogfs.segment_recovery.SegmentRecovery.index_problem`)."""
        self.offset_index  # noqa: B018  (opened, and checked the first time)
        assert self._offset_index is not None and self._time_index is not None
        return self._recovery.index_problem(self._offset_index, self._time_index)

    def index_contradicted(self, problem: str) -> None:
        """An index entry in use was found wrong: rebuild the indexes of a sealed (or read-only)
        segment now. The active segment's are a writer's, never rebuilt under its feet: that waits for
        the next load, which checks them."""
        if self.offset_limit is not None or not self.writable:
            with self._index_lock:  # the descriptor budget leaves the indexes alone meanwhile
                self._index_failed(problem)

    def _index_failed(self, problem: str) -> None:
        """Log why the indexes are wrong; rebuild them from the .log (read-only: scan instead)."""
        log.warning("%s; rebuilding the indexes of %s from the .log", problem, self.log_path)
        if self.writable:
            self.rebuild_indexes()
            return
        # Not closed: a concurrent reader may still be searching them (they go with their last use).
        self._offset_index = EmptyIndex(True, self.base_offset)
        self._time_index = EmptyIndex(False, self.base_offset)
        self._max_timestamp = None

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the intact batches of the .log, leaving the .log untouched
        (:meth:`~seglogfs.segment_recovery.SegmentRecovery.rebuild_indexes`)."""
        self._take_rebuilt(self._recovery.rebuild_indexes())

    def recover(self, *, cut_torn_tail: bool = True, recovery_point: int | None = None) -> int:
        """Rebuild both indexes from the intact batches of the .log; with ``cut_torn_tail`` (the active
        segment) cut its torn tail (:meth:`~seglogfs.segment_recovery.SegmentRecovery.recover`).
        Returns the number of bytes cut."""
        self._indexes_checked = True  # rebuilt now: opening them need not check them first
        self._rolling_based_timestamp = None
        rebuilt = self._recovery.recover(cut_torn_tail=cut_torn_tail, recovery_point=recovery_point)
        self._take_rebuilt(rebuilt)
        return rebuilt.truncated

    def _take_rebuilt(self, rebuilt: Rebuilt) -> None:
        self._max_timestamp = rebuilt.max_timestamp
        self._offset_of_max_timestamp = rebuilt.offset_of_max_timestamp
        self._bytes_since_last_index_entry = rebuilt.bytes_since_last_index_entry
        self._indexes_checked = True
        self.needs_index_rebuild = False

    def truncate(self, size: int) -> None:
        """Cut the .log to ``size`` bytes (recovery's cut of a torn tail)."""
        with self._log_fd() as fd:
            os.ftruncate(fd, size)
        self.size = size

    def release_indexes(self) -> None:
        """Close the indexes until they are next used (a sealed segment need not hold them open)."""
        with self._index_lock:
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.close()
            self._offset_index = self._time_index = None
            self._indexes_ready = False

    # ------------------------------------------------------------------ facts

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp in the segment so far (-1 when unknown), Kafka's maxTimestampSoFar."""
        if self._max_timestamp is None:
            ts, offset = self.time_index.last_entry
            if self.time_index.entries == 0 and not self.writable:
                # A reader whose time index is missing or was found wrong: from the batch headers.
                for header in self.iter_intact_headers():
                    if header.max_timestamp > ts:
                        ts, offset = header.max_timestamp, header.last_offset
            self._max_timestamp, self._offset_of_max_timestamp = ts, offset
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """The last offset of the first batch holding :attr:`max_timestamp` (Kafka's shallow
        offsetOfMaxTimestampSoFar)."""
        _ = self.max_timestamp
        return self._offset_of_max_timestamp

    def largest_timestamp(self) -> int:
        """The timestamp retention judges this segment by: max timestamp, else the .log mtime."""
        ts = self.max_timestamp
        if ts >= 0:
            return ts
        return int(os.stat(self.log_path).st_mtime * 1000)

    @property
    def rolling_based_timestamp(self) -> int:
        """The first batch's max timestamp (-1 when the segment is empty or has none); past a damaged
        first batch (recovery keeps damage that intact batches follow), the first intact one's."""
        if self._rolling_based_timestamp is None:
            first = next(self.iter_intact_headers(0), None)
            self._rolling_based_timestamp = first.max_timestamp if first is not None else -1
        return self._rolling_based_timestamp

    # ------------------------------------------------------------------ appending

    def append(self, batch: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        """Write one batch at the end of the .log and maintain the indexes (Kafka's append rule)."""
        self.append_batches([(batch, last_offset, max_timestamp)])

    def append_batches(self, batches: Sequence[tuple[bytes | memoryview, int, int]]) -> None:
        """:meth:`write_batches`, then :meth:`publish` them."""
        self.publish(self.write_batches(batches), batches)

    def write_batches(self, batches: Sequence[tuple[bytes | memoryview, int, int]]) -> int:
        """Write consecutive ``(batch, last offset, max timestamp)`` at the end of the .log with one
        write, then maintain the indexes batch by batch (Kafka's append rule). Returns where they
        end; readers see them only once :meth:`publish` moves :attr:`size` there (a log publishes
        after it checked that the file is still the one the next start finds).

        All or nothing: when any step fails (the write: ENOSPC or a short write; an index entry), the
        .log is cut back to its previous size, the indexes drop what this append added, and the error
        propagates. No byte of a failed append stays in the file, so none can reappear after a crash.
        An index that fills up part-way (the roll rule checked it before the first batch only) gets no
        more entries: lookups past its last entry scan further, and the next append rolls.
        """
        position = self.size
        # Opening the indexes may fail too (a missing file, ENOSPC): before anything is written.
        max_ts, max_ts_offset = self.max_timestamp, self._offset_of_max_timestamp
        since_entry = self._bytes_since_last_index_entry
        offset_index, time_index = self.offset_index, self.time_index
        entries_before = (offset_index.entries, time_index.entries)
        data = batches[0][0] if len(batches) == 1 else b"".join(batch for batch, _, _ in batches)
        with self._log_fd() as fd:
            try:
                written = os.pwrite(fd, data, position)
                if written != len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.log_path))
                batch_position = position
                for batch, last_offset, max_timestamp in batches:
                    if max_timestamp > max_ts:
                        max_ts, max_ts_offset = max_timestamp, last_offset
                    if since_entry > self.index_interval_bytes and not (
                        offset_index.is_full() or time_index.is_full()
                    ):
                        offset_index.append(last_offset, batch_position)
                        time_index.maybe_append(max_ts, max_ts_offset)
                        since_entry = 0
                    since_entry += len(batch)
                    batch_position += len(batch)
            except BaseException:
                os.ftruncate(fd, position)
                offset_index.limit_entries(entries_before[0])
                time_index.limit_entries(entries_before[1])
                raise
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_ts_offset
        if position == 0:
            self._rolling_based_timestamp = batches[0][2]
        self._bytes_since_last_index_entry = since_entry
        return position + len(data)

    def publish(self, end: int, batches: Sequence[tuple[bytes | memoryview, int, int]]) -> None:
        """Make batches :meth:`write_batches` wrote, ending at ``end``, visible to readers (and counted
        in the views' totals)."""
        position = self.size
        self.size = end
        self.totals.appended(position, [batch for batch, _, _ in batches])

    def should_roll(
        self,
        *,
        segment_bytes: int,
        segment_ms: int,
        messages_size: int,
        max_timestamp: int,
        last_offset: int,
        now_ms: int,
    ) -> bool:
        """Kafka's shouldRoll: size, age (with jitter), a full index, or a relative-offset overflow."""
        if self.size > segment_bytes - messages_size:
            return True
        if self.size > 0:
            rolling_ts = self.rolling_based_timestamp
            waited = max_timestamp - rolling_ts if rolling_ts >= 0 else now_ms - self.created_ms
            if waited > segment_ms - self.roll_jitter_ms:
                return True
        if self.offset_index.is_full() or self.time_index.is_full():
            return True
        return not (0 <= last_offset - self.base_offset <= 2**31 - 1)

    def on_become_inactive(self) -> None:
        """On roll: record the segment's max timestamp as the final time entry, then trim the indexes."""
        max_ts = self.max_timestamp
        if max_ts >= 0:
            self.time_index.maybe_append(max_ts, self._offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        """Grow the indexes of the active segment back to their preallocated size (creating them if
        needed), sparse as Kafka's: no block is allocated until an entry is written."""
        for index in (self.offset_index, self.time_index):
            index.resize(size)

    # ------------------------------------------------------------------ reading

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the .log at ``position`` (CorruptRecordError when the file
        ends before the segment's size: cut under the process)."""
        fd = self._acquire_fd()
        try:
            return pread_within(fd, size, position, self.size, self.log_path)
        finally:
            self._release_fd()

    def read_record(self, header: BatchHeader, bounds: RecordBounds, offset: int) -> Record | None:
        """The record at ``offset`` of the uncompressed v2 batch ``header``, whose ``bounds`` were taken
        once its CRC held: one C call finds and reads it (None when the batch holds no record at that
        offset; CorruptRecordError as :meth:`read` for a file cut under the reader)."""
        fd = self._acquire_fd()
        try:
            return read_record_in_batch(fd, header, bounds, offset, self.size, path=self.log_path)
        finally:
            self._release_fd()

    def read_raw(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``position``, however short the file now is (for the survey, which
        judges a short file itself)."""
        fd = self._acquire_fd()
        try:
            return os.pread(fd, size, position)
        finally:
            self._release_fd()

    def read_header(self, position: int, end: int | None = None) -> BatchHeader | None:
        """The batch header at ``position`` (None past the end or at a torn tail)."""
        end = self.size if end is None else end
        # before touching the file: an empty reader's .log may not exist
        if position + HEADER_SIZE_UP_TO_MAGIC > end:
            return None
        fd = self._acquire_fd()
        try:
            return pread_header(fd, position, end, self.log_path)
        finally:
            self._release_fd()

    def header_or_none(self, position: int, end: int) -> BatchHeader | None:
        """The header at ``position`` when it parses and its batch fits before ``end``, else None."""
        try:
            return self.read_header(position, end)
        except CorruptRecordError:
            return None

    def find_batch(self, offset: int, *, surveyed: bool = False) -> BatchHeader | None:
        """The first intact batch whose last offset is >= ``offset`` (Kafka's translateOffset), or None
        (:meth:`~seglogfs.segment_lookup.SegmentLookup.find_batch`). CorruptRecordError, naming the
        file and position, when ``offset`` lies in a damaged stretch."""
        return self._lookup.find_batch(offset, surveyed=surveyed)

    def iter_intact_headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Batch headers from ``position`` on, past damage
        (:meth:`~seglogfs.segment_survey.SegmentSurvey.iter_intact_headers`)."""
        return self._survey.iter_intact_headers(position)

    def intact_end(self) -> tuple[int, int]:
        """(next offset, end position) of the last intact batch
        (:meth:`~seglogfs.segment_recovery.SegmentRecovery.intact_end`)."""
        return self._recovery.intact_end()

    def read_next_offset(self) -> int:
        """The offset after the last batch, from the last offset-index entry on."""
        return self._recovery.read_next_offset()

    def last_intact_batch(self) -> BatchHeader | None:
        """The last batch whose header reads, found past any damage (None when there is none)."""
        return self._recovery.last_intact_batch()

    def iter_headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Batch headers from ``position`` on, one small read each (no batch body is read)."""
        end = self.size
        while True:
            header = self.read_header(position, end)
            if header is None:
                return
            yield header
            position += header.size

    def iter_batches(
        self,
        start_position: int = 0,
        end_position: int | None = None,
        *,
        fd: int | None = None,
        sealed: bool | None = None,
        on_damage: Callable[[Damage], None] | None = None,
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        """(header, batch bytes) of every complete batch from ``start_position`` (file positions in headers).

        Reads in large chunks. A batch running past the end is a torn tail (a batch still being
        written: the walk stops silently) only where the segment can still grow; in a ``sealed``
        segment (by default: one a later segment follows) walked to its end it is damage, like a size
        field no batch can have. Damage raises CorruptRecordError naming the file and position, and
        so does a batch whose offsets nothing vouches for (:meth:`_vouched_offsets`), unless
        ``on_damage`` is given: then every batch is also CRC-checked, and from the first damage or
        break in the offsets on (a gap is no break: offsets strictly increasing and CRCs holding,
        as in a compacted log), the walk continues with :meth:`find_batch`'s careful survey: each
        damaged stretch (or batch whose offsets contradict its neighbours') goes to ``on_damage`` and
        the walk resumes at the next intact batch. ``fd``: a descriptor of this .log the caller owns,
        to read through instead of the segment's own (the survey reads through the segment's).
        """
        if fd is None:
            with self._log_fd() as own:
                yield from self.iter_batches(start_position, end_position, fd=own, sealed=sealed,
                                             on_damage=on_damage)
            return
        sealed = self.offset_limit is not None if sealed is None else sealed
        end = self.size if end_position is None else min(end_position, self.size)
        walk = self._walk_batches(fd, start_position, end, tail_is_damage=sealed and end == self.size)
        if on_damage is None:
            yield from self._vouched_offsets(walk)
            return
        previous, finished = yield from self._survey.intact_run(walk)
        if finished:
            return
        yield from self._survey.batches_past_damage(fd, start_position, end, previous, on_damage)

    def _vouched_offsets(
        self, walk: Iterator[tuple[BatchHeader, bytes]]
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        """``walk``'s batches, each once something vouches for its offsets (a baseOffset lies outside
        the CRC): the batch before it ending right before it (or, for the first at position 0, the
        segment's base offset); past a gap, the batch after it starting after it ends (it is held
        until then), as :meth:`find_batch` crosses gaps. Offsets that overlap the batch before, or run
        past the segment's range, raise CorruptRecordError; the first batch of a walk from inside the
        segment is the caller's (found through the index). The CRCs are the caller's to check."""
        previous: BatchHeader | None = None
        pending: tuple[BatchHeader, bytes] | None = None  # past a gap: waits for the next batch
        for item in walk:
            header = item[0]
            why = self._offsets_break(previous, header)
            if why:
                at = pending[0] if pending is not None else header  # a moved baseOffset shows past it
                raise CorruptRecordError(f"damaged batch: {why}", self.log_path, at.position)
            if pending is not None:
                yield pending
                pending = None
            expected = self.base_offset if previous is None else previous.last_offset + 1
            if header.magic >= 2 and header.base_offset > expected and (previous or header.position == 0):
                pending = item
            else:
                yield item
            previous = header
        if pending is not None:
            yield pending

    def offsets_fit(self, h: BatchHeader) -> bool:
        """Whether the last offset of ``h`` can be in this segment: below the next segment's base
        offset, within 2**31 - 1 of this one's (offsets are stored relative to it in the indexes)."""
        if self.offset_limit is not None and h.last_offset >= self.offset_limit:
            return False
        return h.last_offset - self.base_offset <= 2**31 - 1

    def _offsets_break(self, previous: BatchHeader | None, header: BatchHeader) -> str:
        """Why ``header``'s offsets cannot follow ``previous``'s in this segment ("" when they can)."""
        if not self.offsets_fit(header):
            return f"offsets up to {header.last_offset} run past the segment's range"
        if previous is None:
            if header.position == 0 and header.magic >= 2 and header.base_offset < self.base_offset:
                return f"baseOffset {header.base_offset} is below the base offset {self.base_offset}"
            return ""
        first = header.base_offset if header.magic >= 2 else header.last_offset
        if first <= previous.last_offset:
            return f"offsets from {first} overlap the batch before's (up to {previous.last_offset})"
        return ""

    def _walk_batches(
        self, fd: int, position: int, end: int, *, tail_is_damage: bool
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        """:meth:`iter_batches` without resync: a batch running past ``end`` is a torn tail, or
        CorruptRecordError when ``tail_is_damage``."""
        while position < end:
            chunk = pread_within(fd, min(_READ_CHUNK, end - position), position, end, self.log_path)
            consumed = 0
            for header in iter_batch_headers(
                chunk, 0, len(chunk), path=self.log_path, base_position=position
            ):
                local = header.position - position
                yield header, chunk[local : local + header.size]
                consumed = local + header.size
            if consumed == 0:
                # The next batch is larger than the chunk: read exactly it, or stop at a torn tail.
                whole = pread_header(fd, position, end, self.log_path)
                if whole is None:
                    if tail_is_damage:
                        raise CorruptRecordError(
                            "a batch runs past the end of the sealed segment", self.log_path, position
                        )
                    return
                data = pread_within(fd, whole.size, position, end, self.log_path)
                yield whole, data
                consumed = whole.size
            position += consumed

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fsync the .log and both indexes."""
        with self._log_fd() as fd:
            os.fsync(fd)
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()
        self.txn_index.flush()

    def close(self, *, trim: bool = True) -> None:
        """Close the files; a writable segment first records its final time entry and trims its indexes."""
        if self.writable and trim:
            self.on_become_inactive()
        self.release_indexes()
        self.txn_index.close()
        with self._lock:  # a reader duplicating the descriptor (open_reader_fd) sees it open or closed
            if self._fd_value >= 0:
                os.close(self._fd_value)
                self._fd_value = -1
        BUDGET.forget(self)

    def rename_suffix(self, suffix: str) -> list[Path]:
        """Append ``suffix`` (``.deleted``) to every file of the segment; returns the new paths.

        The segment then refers to the renamed files and is read-only (as Kafka's changeFileSuffixes):
        a reader still holding it reads them until they are removed, and nothing recreates a file.
        """
        renamed = []
        self.writable = False
        self.txn_index.writable = False
        with self._lock:
            # The .log first, the .txnindex last (Kafka's changeFileSuffixes): a kill in between leaves
            # indexes without a .log, which the next load deletes. The other way round, the segment
            # would come back without its aborted transactions (read_committed would show them).
            files = (
                ("log_path", None),
                ("index_path", self._offset_index),
                ("time_index_path", self._time_index),
            )
            for name, index in files:
                path = getattr(self, name)
                target = path.with_name(path.name + suffix)
                if path.exists():
                    if isinstance(index, AbstractIndex):
                        index.rename_to(target)  # an open index follows its file
                    else:
                        os.replace(path, target)
                    renamed.append(target)
                setattr(self, name, target)
            txn_target = self.txn_index.path.with_name(self.txn_index.path.name + suffix)
            if self.txn_index.path.exists():
                self.txn_index.rename_to(txn_target)
                renamed.append(txn_target)
            else:
                self.txn_index.path = txn_target
        return renamed

    def __repr__(self) -> str:
        return f"LogSegment({str(self.log_path)!r}, size={self.size})"


def pread_header(fd: int, position: int, end: int, path: Path) -> BatchHeader | None:
    """The header of the batch at ``position`` of an open .log, or None when no complete batch
    ends by ``end`` (a torn tail). One small read: the batch body is not touched."""
    if position + HEADER_SIZE_UP_TO_MAGIC > end:
        return None
    head = pread_within(fd, V2_HEADER_SIZE, position, end, path)
    # Parse just the header; whether the whole batch fits is checked against ``end`` below.
    padded = head + b"\0" * (V2_HEADER_SIZE - len(head))
    header = read_batch_header(padded, 0, _NO_LIMIT, path=path, base_position=position)
    if header is None or position + header.size > end:
        return None
    return header


def pread_within(fd: int, size: int, position: int, known_size: int, path: Path | str) -> bytes:
    """``os.pread`` of up to ``size`` bytes of a .log whose size is known to be ``known_size``: a read
    that comes back shorter than that size allows is damage (the file was cut under the reader),
    CorruptRecordError naming the file and where it now ends."""
    data = os.pread(fd, size, position)
    if len(data) < size and len(data) < known_size - position:
        ends = position + len(data)
        raise CorruptRecordError(
            f"the file ends at position {ends}, before the {known_size} bytes it held (cut while open)",
            path, ends,
        )
    return data


def next_offset_of_file(path: Path, base_offset: int) -> int:
    """The offset after the last complete batch of a .log file (``base_offset`` when it has none),
    from its batch headers alone: one small read a batch, never the whole file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        end = os.fstat(fd).st_size
        position, next_offset = 0, base_offset
        while (header := pread_header(fd, position, end, path)) is not None:
            next_offset = header.next_offset
            position += header.size
        return next_offset
    finally:
        os.close(fd)


def random_roll_jitter(segment_jitter_ms: int, segment_ms: int) -> int:
    """Kafka's per-segment jitter: 0, or a random value below min(jitter, segment.ms)."""
    if segment_jitter_ms <= 0:
        return 0
    return random.randrange(min(segment_jitter_ms, segment_ms))


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino

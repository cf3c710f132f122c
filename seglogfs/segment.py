"""LogSegment: one ``<base>.log`` with its ``.index`` and ``.timeindex``, as Kafka lays them out.

Appends follow Kafka's LogSegment.append (docs/kafka-format.md section 3): the index test
runs before the current append is counted, the offset entry pairs the append's last offset with its
first byte, and the time entry pairs the segment's max timestamp so far with the last offset of the
batch holding it. Recovery rebuilds both indexes per batch with the same rule.

Writers are serialised by the owning Log; readers use ``pread`` and may run concurrently with an
append (a batch becomes visible once ``size`` covers it, and ``size`` moves only after the write).
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .errors import CorruptRecordError
from .index import DEFAULT_MAX_INDEX_SIZE, AbstractIndex, OffsetIndex, TimeIndex
from .log_files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_file_name
from .records import (
    HEADER_SIZE_UP_TO_MAGIC,
    V2_HEADER_SIZE,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
)
from .segment_lookup import SegmentLookup
from .segment_recovery import SegmentRecovery
from .segment_survey import Damage, SegmentSurvey
from .segment_totals import SegmentTotals
from .transaction_index import TransactionIndex

__all__ = ["Damage", "LogSegment", "next_offset_of_file", "pread_header", "random_roll_jitter"]

_READ_CHUNK = 4 * 1024 * 1024
_UIDS = itertools.count(1)
_NO_LIMIT = 1 << 62

log = logging.getLogger(__name__)


class LogSegment(SegmentLookup, SegmentSurvey, SegmentRecovery):
    """A segment of a log. ``writable=False`` opens it for reading only and never touches the files.

    Finding an offset's batch (:class:`~seglogfs.segment_lookup.SegmentLookup`), the damage survey
    (:class:`~seglogfs.segment_survey.SegmentSurvey`) and the index checks and recovery
    (:class:`~seglogfs.segment_recovery.SegmentRecovery`) live in their own modules.
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
        if writable and not self.log_path.exists():
            self._fd_value = os.open(self.log_path, self._open_flags, 0o644)
        # Existing segments open their .log only when first read or written (1000 segments must not
        # hold 1000 descriptors); the size comes from the directory entry.
        try:
            self.size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            if writable:
                raise
            # A reader of a log dir with no segment yet, or of one retention just removed: empty.
            self.size = 0
        self._lock = threading.Lock()
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
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

    @property
    def _fd(self) -> int:
        if self._fd_value < 0:
            with self._lock:
                if self._fd_value < 0:
                    # Never O_CREAT here: a reader reopening a segment retention has deleted must
                    # fail (FileNotFoundError), not bring back an empty .log.
                    self._fd_value = os.open(self.log_path, self._open_flags & ~os.O_CREAT)
        return self._fd_value

    def hold_open(self) -> None:
        """Open the .log now rather than at the first read: the segment then reads the same file
        whatever renames follow (a reader's view of a ``.swap`` its owner is about to install).
        FileNotFoundError when it is gone already."""
        self._fd  # noqa: B018 - the property opens and keeps the descriptor

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
            return os.open(self.log_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)

    # ------------------------------------------------------------------ indexes (opened lazily)

    @property
    def offset_index(self) -> OffsetIndex:
        if not self._indexes_ready:
            self._open_indexes()
        return self._offset_index  # type: ignore[return-value]

    @property
    def time_index(self) -> TimeIndex:
        if not self._indexes_ready:
            self._open_indexes()
        return self._time_index  # type: ignore[return-value]

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

    def append(self, batch: bytes, last_offset: int, max_timestamp: int) -> None:
        """Write one batch at the end of the .log and maintain the indexes (Kafka's append rule)."""
        self.append_batches([(batch, last_offset, max_timestamp)])

    def append_batches(self, batches: Sequence[tuple[bytes, int, int]]) -> None:
        """Write consecutive ``(batch, last offset, max timestamp)`` at the end of the .log with one
        write, then maintain the indexes batch by batch (Kafka's append rule).

        All or nothing: when any step fails (the write: ENOSPC or a short write; an index entry), the
        .log is cut back to its previous size, the indexes drop what this append added, and the error
        propagates. No byte of a failed append stays in the file, so none can reappear after a crash.
        An index that fills up part-way (the roll rule checked it before the first batch only) gets no
        more entries: lookups past its last entry scan further, and the next append rolls.
        """
        position = self.size
        # Opening the indexes may fail too (a missing file, ENOSPC): before anything is written.
        previous_max = (self.max_timestamp, self._offset_of_max_timestamp)
        since_entry = self._bytes_since_last_index_entry
        offset_index, time_index = self.offset_index, self.time_index
        entries_before = (offset_index.entries, time_index.entries)
        data = batches[0][0] if len(batches) == 1 else b"".join(batch for batch, _, _ in batches)
        try:
            written = os.pwrite(self._fd, data, position)
            if written != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.log_path))
            batch_position = position
            for batch, last_offset, max_timestamp in batches:
                if max_timestamp > self._max_timestamp:
                    self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, last_offset
                if since_entry > self.index_interval_bytes and not (
                    offset_index.is_full() or time_index.is_full()
                ):
                    offset_index.append(last_offset, batch_position)
                    time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
                    since_entry = 0
                since_entry += len(batch)
                batch_position += len(batch)
        except BaseException:
            os.ftruncate(self._fd, position)
            self._max_timestamp, self._offset_of_max_timestamp = previous_max
            offset_index.limit_entries(entries_before[0])
            time_index.limit_entries(entries_before[1])
            raise
        if position == 0:
            self._rolling_based_timestamp = batches[0][2]
        self._bytes_since_last_index_entry = since_entry
        self.size = position + len(data)
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
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        """Grow the indexes of the active segment back to their preallocated size (creating them if
        needed), every byte allocated: OSError (ENOSPC...) when the filesystem has no room, the
        indexes then left as they were."""
        for index in (self.offset_index, self.time_index):
            index.resize(size)
            index.reserve()

    # ------------------------------------------------------------------ reading

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the .log at ``position``."""
        return os.pread(self._fd, size, position)

    def read_header(self, position: int, end: int | None = None) -> BatchHeader | None:
        """The batch header at ``position`` (None past the end or at a torn tail)."""
        end = self.size if end is None else end
        # before touching the file: an empty reader's .log may not exist
        if position + HEADER_SIZE_UP_TO_MAGIC > end:
            return None
        return pread_header(self._fd, position, end, self.log_path)

    def _header_or_none(self, position: int, end: int) -> BatchHeader | None:
        """The header at ``position`` when it parses and its batch fits before ``end``, else None."""
        try:
            return self.read_header(position, end)
        except CorruptRecordError:
            return None

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
        field no batch can have. Damage raises CorruptRecordError naming the file and position, unless
        ``on_damage`` is given: then every batch is also CRC-checked, and from the first damage or
        break in the offsets on (a gap is no break: offsets strictly increasing and CRCs holding,
        as in a compacted log), the walk continues with :meth:`find_batch`'s careful survey: each
        damaged stretch (or batch whose offsets contradict its neighbours') goes to ``on_damage`` and
        the walk resumes at the next intact batch. ``fd``: a descriptor of this .log the caller owns,
        to read through instead of the segment's own (the survey reads through the segment's).
        """
        fd = self._fd if fd is None else fd
        sealed = self.offset_limit is not None if sealed is None else sealed
        end = self.size if end_position is None else min(end_position, self.size)
        walk = self._walk_batches(fd, start_position, end, tail_is_damage=sealed and end == self.size)
        if on_damage is None:
            yield from walk
            return
        previous, finished = yield from self._intact_run(walk)
        if finished:
            return
        yield from self._batches_past_damage(fd, start_position, end, previous, on_damage)

    def _walk_batches(
        self, fd: int, position: int, end: int, *, tail_is_damage: bool
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        """:meth:`iter_batches` without resync: a batch running past ``end`` is a torn tail, or
        CorruptRecordError when ``tail_is_damage``."""
        while position < end:
            chunk = os.pread(fd, min(_READ_CHUNK, end - position), position)
            consumed = 0
            for header in iter_batch_headers(
                chunk, 0, len(chunk), path=self.log_path, base_position=position
            ):
                local = header.position - position
                yield header, chunk[local : local + header.size]
                consumed = local + header.size
            if consumed == 0:
                # The next batch is larger than the chunk: read exactly it, or stop at a torn tail.
                header = pread_header(fd, position, end, self.log_path)
                if header is None:
                    if tail_is_damage:
                        raise CorruptRecordError(
                            "a batch runs past the end of the sealed segment", self.log_path, position
                        )
                    return
                data = os.pread(fd, header.size, position)
                yield header, data
                consumed = header.size
            position += consumed

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fsync the .log and both indexes."""
        os.fsync(self._fd)
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
    head = os.pread(fd, V2_HEADER_SIZE, position)
    # Parse just the header; whether the whole batch fits is checked against ``end`` below.
    padded = head + b"\0" * (V2_HEADER_SIZE - len(head))
    header = read_batch_header(padded, 0, _NO_LIMIT, path=path, base_position=position)
    if header is None or position + header.size > end:
        return None
    return header


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

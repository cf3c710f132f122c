"""LogSegment: one ``<base>.log`` with its ``.index`` and ``.timeindex``, as Kafka lays them out.

Appends follow Kafka's LogSegment.append (shared/reference/kafka-format.md section 3): the index test
runs before the current append is counted, the offset entry pairs the append's last offset with its
first byte, and the time entry pairs the segment's max timestamp so far with the last offset of the
batch holding it. Recovery rebuilds both indexes per batch with the same rule.

Writers are serialised by the owning Log; readers use ``pread`` and may run concurrently with an
append (a batch becomes visible once ``size`` covers it, and ``size`` moves only after the write).
"""

from __future__ import annotations

import errno
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .errors import CorruptIndexError, CorruptRecordError
from .index import OffsetIndex, TimeIndex
from .records import (
    V2_HEADER_SIZE,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
    validate_batch,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
_READ_CHUNK = 4 * 1024 * 1024
_NO_LIMIT = 1 << 62


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset as 20 zero-padded digits, then the suffix."""
    return f"{base_offset:020d}{suffix}"


def base_offset_from_name(name: str) -> int:
    """The base offset encoded before the first '.' of a segment file name."""
    return int(name.split(".", 1)[0])


class LogSegment:
    """A segment of a log. ``writable=False`` opens it for reading only and never touches the files."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        roll_jitter_ms: int = 0,
        writable: bool = True,
        created_ms: int = 0,
    ):
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.writable = writable
        self.created_ms = created_ms
        self.log_path = self.dir / segment_file_name(base_offset, LOG_SUFFIX)
        self.index_path = self.dir / segment_file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = self.dir / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        self._open_flags = flags | os.O_CLOEXEC
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

    @property
    def _fd(self) -> int:
        if self._fd_value < 0:
            with self._lock:
                if self._fd_value < 0:
                    self._fd_value = os.open(self.log_path, self._open_flags)
        return self._fd_value

    # ------------------------------------------------------------------ indexes (opened lazily)

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            with self._lock:
                if self._offset_index is None:
                    self._offset_index = self._open_index(OffsetIndex, self.index_path)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            with self._lock:
                if self._time_index is None:
                    self._time_index = self._open_index(TimeIndex, self.time_index_path)
        return self._time_index

    def _open_index(self, cls, path: Path):
        if self.writable:
            return cls(path, self.base_offset, self.max_index_size, writable=True)
        if not path.exists():
            return _EmptyIndex(cls is OffsetIndex, self.base_offset)
        try:
            index = cls(path, self.base_offset, writable=False)
        except FileNotFoundError:  # removed (retention) since the check above
            return _EmptyIndex(cls is OffsetIndex, self.base_offset)
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
            return _EmptyIndex(cls is OffsetIndex, self.base_offset)
        return index

    def release_indexes(self) -> None:
        """Close the indexes until they are next used (a sealed segment need not hold them open)."""
        with self._lock:
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.close()
            self._offset_index = self._time_index = None

    def sanity_check_indexes(self) -> None:
        """Raise CorruptIndexError when either index fails Kafka's sanity check, or holds zero-filled
        entries (which Kafka's check lets through since 2.1: a zeroed time index would make the
        segment look 56 years old to retention)."""
        for index in (self.offset_index, self.time_index):
            index.sanity_check()
            if index.entries_before_zero_tail() < index.entries:
                raise CorruptIndexError(f"{index.path} has zero-filled entries after entry 0")

    # ------------------------------------------------------------------ facts

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp in the segment so far (-1 when unknown), Kafka's maxTimestampSoFar."""
        if self._max_timestamp is None:
            ts, offset = self.time_index.last_entry
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
        """The first batch's max timestamp (-1 when the segment is empty or has none)."""
        if self._rolling_based_timestamp is None:
            first = self.read_header(0)
            self._rolling_based_timestamp = first.max_timestamp if first is not None else -1
        return self._rolling_based_timestamp

    # ------------------------------------------------------------------ appending

    def append(self, batch: bytes, last_offset: int, max_timestamp: int) -> None:
        """Write one batch at the end of the .log and maintain the indexes (Kafka's append rule).

        All or nothing: if the write fails (ENOSPC...), the file is cut back to its previous size
        and the OSError propagates.
        """
        position = self.size
        try:
            written = os.pwrite(self._fd, batch, position)
            if written != len(batch):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.log_path))
        except OSError:
            os.ftruncate(self._fd, position)
            raise
        if position == 0:
            self._rolling_based_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, last_offset
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += len(batch)
        self.size = position + len(batch)

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
        """Grow the indexes of the active segment back to their preallocated size."""
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # ------------------------------------------------------------------ reading

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the .log at ``position``."""
        return os.pread(self._fd, size, position)

    def read_header(self, position: int, end: int | None = None) -> BatchHeader | None:
        """The batch header at ``position`` (None past the end or at a torn tail)."""
        end = self.size if end is None else end
        if position + 17 > end:  # before touching the file: an empty reader's .log may not exist
            return None
        return pread_header(self._fd, position, end, self.log_path)

    def find_batch(self, offset: int, start_position: int | None = None) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset`` (Kafka's translateOffset), or None."""
        end = self.size
        if start_position is None:
            (_, position), upper = self.offset_index.lookup_bounds(offset)
            if upper is not None:
                # One read when the next indexed batch already starts at or before the offset
                # (always so when batches are larger than index.interval.bytes).
                header = self.read_header(upper[1], end)
                if (
                    header is not None
                    and header.magic >= 2
                    and header.base_offset <= offset <= header.last_offset
                ):
                    return header
        else:
            position = start_position
        while True:
            header = self.read_header(position, end)
            if header is None:
                return None
            if header.last_offset >= offset:
                return header
            position += header.size

    def iter_batches(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        """(header, batch bytes) of every complete batch from ``start_position`` (file positions in headers).

        Reads in large chunks; stops silently at a torn tail (a batch still being written).
        """
        end = self.size if end_position is None else min(end_position, self.size)
        position = start_position
        while position < end:
            chunk = os.pread(self._fd, min(_READ_CHUNK, end - position), position)
            consumed = 0
            for header in iter_batch_headers(
                chunk, 0, len(chunk), path=self.log_path, base_position=position
            ):
                local = header.position - position
                yield header, chunk[local : local + header.size]
                consumed = local + header.size
            if consumed == 0:
                # The next batch is larger than the chunk: read exactly it, or stop at a torn tail.
                header = self.read_header(position, end)
                if header is None:
                    return
                data = os.pread(self._fd, header.size, position)
                yield header, data
                consumed = header.size
            position += consumed

    # ------------------------------------------------------------------ recovery

    def recover(self) -> int:
        """Rebuild both indexes from the .log, validating every batch; cut a corrupt or torn tail.

        Returns the number of bytes truncated. Kafka's LogSegment.recover, per batch.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._rolling_based_timestamp = None
        valid = 0
        last_indexed = 0
        try:
            for header, data in self.iter_batches(0):
                validate_batch(data, header.at(0), path=self.log_path)
                if header.base_offset < self.base_offset and header.magic >= 2:
                    raise CorruptRecordError(
                        f"batch offset {header.base_offset} is below the segment base {self.base_offset}",
                        self.log_path,
                        header.position,
                    )
                if header.max_timestamp > self._max_timestamp:
                    self._max_timestamp, self._offset_of_max_timestamp = (
                        header.max_timestamp,
                        header.last_offset,
                    )
                if valid - last_indexed > self.index_interval_bytes:
                    self.offset_index.append(header.last_offset, valid)
                    self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
                    last_indexed = valid
                valid = header.position + header.size
        except CorruptRecordError:
            pass  # everything from the first bad batch on is cut below
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self._fd, valid)
            self.size = valid
        self._bytes_since_last_index_entry = valid - last_indexed
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.needs_index_rebuild = False
        return truncated

    def read_next_offset(self) -> int:
        """The offset after the last batch: scan from the last offset-index entry to the end."""
        position = self.offset_index.lookup(2**62)[1] if self.offset_index.entries else 0
        next_offset = self.base_offset
        for header in self.iter_headers(position):
            next_offset = header.next_offset
        return next_offset

    def iter_headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Batch headers from ``position`` on, one small read each (no batch body is read)."""
        end = self.size
        while True:
            header = self.read_header(position, end)
            if header is None:
                return
            yield header
            position += header.size

    def last_batch(self) -> BatchHeader | None:
        """The last complete batch of the segment, or None when it is empty."""
        position = self.offset_index.lookup(2**62)[1] if self.offset_index.entries else 0
        last = None
        for last in self.iter_headers(position):  # noqa: B007
            pass
        return last

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fsync the .log and both indexes."""
        os.fsync(self._fd)
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()

    def close(self, *, trim: bool = True) -> None:
        """Close the files; a writable segment first records its final time entry and trims its indexes."""
        if self.writable and trim:
            self.on_become_inactive()
        self.release_indexes()
        if self._fd_value >= 0:
            os.close(self._fd_value)
            self._fd_value = -1

    def rename_suffix(self, suffix: str) -> list[Path]:
        """Append ``suffix`` (``.deleted``) to every file of the segment; returns the new paths."""
        renamed = []
        for path in (self.log_path, self.index_path, self.time_index_path):
            if path.exists():
                target = path.with_name(path.name + suffix)
                os.replace(path, target)
                renamed.append(target)
        return renamed

    def __repr__(self) -> str:
        return f"LogSegment({str(self.log_path)!r}, size={self.size})"


def pread_header(fd: int, position: int, end: int, path: Path) -> BatchHeader | None:
    """The header of the batch at ``position`` of an open .log, or None when no complete batch
    ends by ``end`` (a torn tail). One small read: the batch body is not touched."""
    if position + 17 > end:
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


class _EmptyIndex:
    """A missing or corrupt index when reading only: every lookup falls back to a scan from the start."""

    entries = 0

    def __init__(self, is_offset_index: bool, base_offset: int):
        self._is_offset_index = is_offset_index
        self.base_offset = base_offset

    def lookup(self, target: int) -> tuple[int, int]:
        return (self.base_offset, 0) if self._is_offset_index else (-1, self.base_offset)

    def lookup_bounds(self, target: int) -> tuple[tuple[int, int], None]:
        return (self.base_offset, 0), None

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)

    @property
    def last_entry(self) -> tuple[int, int]:
        return -1, self.base_offset

    def is_full(self) -> bool:
        return False

    def sanity_check(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

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
import logging
import os
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CorruptIndexError, CorruptRecordError
from .index import OffsetIndex, TimeIndex
from .log_files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file_name
from .records import (
    V2_HEADER_SIZE,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
    validate_batch,
)

_READ_CHUNK = 4 * 1024 * 1024
_NO_LIMIT = 1 << 62

log = logging.getLogger(__name__)


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

    @property
    def _fd(self) -> int:
        if self._fd_value < 0:
            with self._lock:
                if self._fd_value < 0:
                    # Never O_CREAT here: a reader reopening a segment retention has deleted must
                    # fail (FileNotFoundError), not bring back an empty .log.
                    self._fd_value = os.open(self.log_path, self._open_flags & ~os.O_CREAT)
        return self._fd_value

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
                    problem = self.index_problem()
                    if problem is not None:
                        self._index_failed(problem)
                finally:
                    self._checking_indexes = False
            self._indexes_checked = True
            self._indexes_ready = True

    def index_problem(self) -> str | None:
        """Why the indexes cannot be trusted, naming the file, or None. Beyond Kafka's sanity check:
        entries strictly increasing, inside the segment's offsets and its .log, the first and last
        offset entries at batches they fit, and the last time entry equal to the max timestamp of the
        batch it names, which no later batch exceeds."""
        offset_index, time_index = self._offset_index, self._time_index
        assert offset_index is not None and time_index is not None
        try:
            for index in (offset_index, time_index):
                index.sanity_check()
        except CorruptIndexError as exc:
            return str(exc)
        offsets, positions = offset_index.to_arrays()
        if offsets.size:
            name = offset_index.path
            if (np.diff(offsets) <= 0).any() or (np.diff(positions) <= 0).any():
                return f"{name}: entries are not strictly increasing"
            if positions[0] < 0 or positions[-1] >= self.size:
                where = f"outside {self.log_path} ({self.size} bytes)"
                return f"{name}: position {int(positions[-1])} is {where}"
            if offsets[-1] - self.base_offset > 2**31 - 1:
                return f"{name}: offset {int(offsets[-1])} is outside the segment"
            for slot in (0, -1):
                offset, position = int(offsets[slot]), int(positions[slot])
                header = self._header_or_none(position, self.size)
                if header is None or header.last_offset > offset:
                    return f"{name}: the entry for offset {offset} names no batch at position {position}"
        last = None
        for last in self.iter_intact_headers(int(positions[-1]) if positions.size else 0):  # noqa: B007
            pass
        stamps, stamp_offsets = time_index.to_arrays()
        if not self.writable and last is not None and isinstance(time_index, TimeIndex):
            # A reader of a log being written: entries past the batches it sees are not its concern.
            time_index.limit_entries(int(np.searchsorted(stamp_offsets, last.next_offset)))
            stamps, stamp_offsets = time_index.to_arrays()
        if stamps.size:
            name = time_index.path
            if (np.diff(stamps) <= 0).any() or (np.diff(stamp_offsets) < 0).any():
                return f"{name}: entries are not increasing"
            if stamp_offsets[0] < self.base_offset:
                return f"{name}: offset {int(stamp_offsets[0])} is below the base offset {self.base_offset}"
            stamp, offset = int(stamps[-1]), int(stamp_offsets[-1])
            try:
                holder = self.find_batch(offset)
            except CorruptRecordError:
                holder = None
            if holder is None or holder.last_offset != offset or holder.max_timestamp != stamp:
                found = "no batch" if holder is None else f"max timestamp {holder.max_timestamp}"
                return f"{name}: last entry ({stamp}, offset {offset}) does not match the .log ({found})"
            if self.writable and last is not None and last.max_timestamp > stamp:
                return f"{name}: last entry {stamp} is below the last batch's {last.max_timestamp}"
        elif self.writable and last is not None and last.max_timestamp >= 0 and offsets.size:
            return f"{time_index.path}: empty, but the batches carry timestamps"
        return None

    def index_contradicted(self, problem: str) -> None:
        """An index entry in use was found wrong: rebuild the indexes of a sealed (or read-only)
        segment now. The active segment's are a writer's, never rebuilt under its feet: that waits for
        the next load, which checks them."""
        if self.offset_limit is not None or not self.writable:
            self._index_failed(problem)

    def time_entry_holds(self, timestamp: int, offset: int) -> bool:
        """Whether the batch ending at ``offset`` has max timestamp ``timestamp`` (what a time-index
        entry claims)."""
        try:
            holder = self.find_batch(offset)
        except CorruptRecordError:
            return False
        return holder is not None and holder.last_offset == offset and holder.max_timestamp == timestamp

    def _index_failed(self, problem: str) -> None:
        """Log why the indexes are wrong; rebuild them from the .log (read-only: scan instead)."""
        log.warning("%s; rebuilding the indexes of %s from the .log", problem, self.log_path)
        if self.writable:
            self.rebuild_indexes()
            return
        # Not closed: a concurrent reader may still be searching them (they go with their last use).
        self._offset_index = _EmptyIndex(True, self.base_offset)  # type: ignore[assignment]
        self._time_index = _EmptyIndex(False, self.base_offset)  # type: ignore[assignment]
        self._max_timestamp = None

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the intact batches of the .log with Kafka's per-batch rule, leaving
        the .log untouched (damaged stretches are skipped, not cut: a sealed batch past them is data)."""
        self._reset_indexes_for_rebuild()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        last_indexed = 0
        for header in self._recovered_batches(check_last=False):
            last_indexed = self._index_rebuilt_batch(header, last_indexed)
        # Trimmed as after a recovery (an active segment grows them again when the Log loads).
        self._finish_rebuilt_indexes(last_indexed)

    def _accepted_batches(
        self, position: int = 0, previous: BatchHeader | None = None
    ) -> Iterator[BatchHeader]:
        """Every intact batch of the .log whose offsets fit its neighbours', in order (damage skipped),
        from ``position`` (a batch boundary; ``previous``: the accepted batch before it, if any)."""
        end = self.size
        pending: BatchHeader | None = None
        damage_before = damage_after = False  # damage right before / right after ``pending``
        damage_at: int | None = None  # where the damage right after the last batch read begins
        pending_damage_at: int | None = None  # ... right before ``pending``
        while True:
            header: BatchHeader | None = None
            if position < end:
                header, _ = self._intact_batch_at(position, end)
                if header is None:
                    damage_at = position if damage_at is None else damage_at
                    position = self._resync(position + 1, end)
                    damage_after = True
                    continue
                position = header.end_position
            if pending is not None:
                trusted = (
                    (pending.position == 0 and pending.base_offset == self.base_offset)
                    or (
                        previous is not None
                        and previous.end_position == pending.position
                        and _follows(previous, pending)
                    )
                    or (pending_damage_at is not None and self._bridges(previous, pending_damage_at, pending))
                )
                isolated = (damage_before or damage_after) and not (
                    _follows(previous, pending) or _follows(pending, header)
                )
                if trusted or not (isolated or self._offsets_contradicted(pending, previous, header, None)):
                    yield pending
                    previous = pending
            if header is None:
                return
            pending, damage_before, damage_after = header, damage_after, False
            pending_damage_at, damage_at = damage_at, None

    def _bridges(self, before: BatchHeader | None, damage_at: int, after: BatchHeader) -> bool:
        """Whether the damaged batch at ``damage_at`` (its CRC failed) links ``before`` and ``after``
        through its header's fields: its baseOffset continues ``before`` (at position 0: the
        segment's base offset) and its lastOffsetDelta or its record count leads to ``after``'s base
        offset. Two fields agreeing vouch for ``after``'s offsets, which nothing else can (its
        baseOffset is outside its CRC) when it is the last batch of the active segment; one damaged
        field (a length, a count, a delta, a record) still leaves two."""
        if (before.end_position if before is not None else 0) != damage_at or after.magic < 2:
            return False
        raw = os.pread(self._fd, 61, damage_at)  # a v2 batch header
        if len(raw) < 61:
            return False
        base = int.from_bytes(raw[0:8], "big", signed=True)
        last_offset_delta = int.from_bytes(raw[23:27], "big", signed=True)
        records_count = int.from_bytes(raw[57:61], "big", signed=True)
        first = before.last_offset + 1 if before is not None else self.base_offset
        return base == first and after.base_offset in (base + last_offset_delta + 1, base + records_count)

    def release_indexes(self) -> None:
        """Close the indexes until they are next used (a sealed segment need not hold them open)."""
        with self._index_lock:
            for index in (self._offset_index, self._time_index):
                if index is not None:
                    index.close()
            self._offset_index = self._time_index = None
            self._indexes_ready = False

    def sanity_check_indexes(self) -> None:
        """Raise CorruptIndexError when the indexes cannot be trusted (see ``index_problem``)."""
        problem = self.index_problem() if self.offset_index is not None else None
        if problem is not None:
            raise CorruptIndexError(problem)

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
        if position + 17 > end:  # before touching the file: an empty reader's .log may not exist
            return None
        return pread_header(self._fd, position, end, self.log_path)

    def find_batch(self, offset: int, *, surveyed: bool = False) -> BatchHeader | None:
        """The first intact batch whose last offset is >= ``offset`` (Kafka's translateOffset), or None.

        Raises CorruptRecordError, naming the file and the position of the damage, when ``offset``
        lies in a damaged stretch of the .log. Damage costs only itself: a batch whose header cannot be
        read, whose CRC fails or whose offsets contradict its neighbours' (its baseOffset is outside the
        CRC) is skipped, and the batches after it are found by resynchronising on the next intact one.
        ``surveyed`` skips the header walk for the CRC-checked survey (after a batch failed its CRC).
        """
        if not surveyed:
            try:
                return self._find_batch_quick(offset)
            except _Suspect:
                pass
        return self._find_batch_careful(offset)

    def _find_batch_quick(self, offset: int) -> BatchHeader | None:
        """Headers only, trusting a batch only when its offsets follow from a witness: an index entry
        naming its last offset, the segment's base offset, or the previous trusted batch (contiguous
        offsets). Anything else (a gap, an overlap, an unreadable header) raises _Suspect."""
        end = self.size
        (witness, position), upper = self.offset_index.lookup_bounds(offset)
        if upper is not None:
            # One read when the next indexed batch already holds the offset (always so when batches
            # are larger than index.interval.bytes): the entry vouches for its offsets.
            header = self._header_or_none(upper[1], end)
            if (
                header is not None
                and header.magic >= 2
                and header.last_offset == upper[0]
                and header.base_offset <= offset
            ):
                return header
        prev_last: int | None = None
        while True:
            if position >= end:
                if self.offset_limit is not None and offset < self.offset_limit:
                    raise _Suspect  # a sealed segment should hold it: its last batch may be damaged
                return None
            header = self._header_or_none(position, end)
            if header is None or header.magic < 2:
                raise _Suspect
            if prev_last is not None:
                trusted = header.base_offset == prev_last + 1
            elif position == 0:
                trusted = header.base_offset == self.base_offset
            else:
                trusted = header.last_offset == witness
            if not trusted or (header.base_offset > offset and header.last_offset >= offset):
                raise _Suspect  # a gap before the offset may hide a damaged batch
            if self.offset_limit is not None and header.last_offset >= self.offset_limit:
                raise _Suspect  # runs into the next segment
            if header.last_offset >= offset:
                return header
            prev_last = header.last_offset
            position += header.size

    def _header_or_none(self, position: int, end: int) -> BatchHeader | None:
        """The header at ``position`` when it parses and its batch fits before ``end``, else None."""
        try:
            return self.read_header(position, end)
        except CorruptRecordError:
            return None

    def _find_batch_careful(self, offset: int, *, use_index: bool = True) -> BatchHeader | None:
        """``find_batch`` by surveying the .log around the offset, every batch CRC-checked."""
        entries = _Entries(*self.offset_index.to_arrays()) if use_index else _Entries.none()
        slot = entries.slot_at_or_before(offset) - 1  # start one entry early: its batch is a witness
        start = entries.position(slot) if slot >= 0 else 0
        items, index_disagrees = self._survey(start, offset, entries)
        if index_disagrees and use_index:
            self.index_contradicted(f"{self.index_path}: an entry contradicts the batches at offset {offset}")
            return self._find_batch_careful(offset, use_index=False)
        damage: Damage | None = None
        for item in items:
            if isinstance(item, Damage):
                damage = damage or item
                continue
            if item.last_offset >= offset:
                if item.magic >= 2 and item.base_offset > offset and damage is not None:
                    break
                return item
            damage = None
        if damage is None:
            return None
        raise CorruptRecordError(f"damaged batch ({damage.reason})", self.log_path, damage.position)

    def _survey(
        self, start: int, stop_offset: int, entries: _Entries
    ) -> tuple[list[BatchHeader | Damage], bool]:
        """The intact batches and damaged stretches of the .log from ``start`` (a batch boundary), in
        file order, to the first index entry after the batch holding ``stop_offset`` and one more item
        (or a few batches further when there is none). Every batch is CRC-checked, then checked against
        its neighbours' offsets: a batch is trusted when an index entry names its last offset, when it
        is the first batch and starts at the segment's base offset, or when its offsets continue a
        trusted neighbour's; an untrusted batch that overlaps a neighbour or contradicts an index
        entry is damage (a changed baseOffset passes the CRC). Also returns whether the index
        contradicts trusted batches (then it is the index that is wrong)."""
        end = self.size
        items: list[BatchHeader | Damage] = []
        position, past = start, -1
        while position < end and past <= 16:
            header, reason = self._intact_batch_at(position, end)
            if header is None:
                resumed = self._resync(position + 1, end)
                items.append(Damage(position, resumed, reason))
                position = resumed
            else:
                items.append(header)
                position = header.end_position
                if past < 0 and header.last_offset >= stop_offset:
                    past = 0
            if past >= 0:
                past += 1
                if past >= 2 and header is not None and entries.at(header.position) is not None:
                    break  # a batch an index entry vouches for: the neighbours' trust is settled
        return self._label(items, entries)

    def _intact_batch_at(self, position: int, end: int) -> tuple[BatchHeader | None, str]:
        """(header, "") for a whole, CRC-valid batch at ``position``; else (None, what is wrong)."""
        try:
            header = self.read_header(position, end)
        except CorruptRecordError as exc:
            return None, str(exc).split(" in ", 1)[0]
        if header is None:
            return None, "a batch runs past the end of the segment"
        try:
            validate_batch(os.pread(self._fd, header.size, position), header.at(0), path=self.log_path)
        except CorruptRecordError as exc:
            return None, str(exc).split(" in ", 1)[0]
        return header, ""

    def _resync(self, position: int, end: int) -> int:
        """The position of the next intact v2 batch at or after ``position`` (``end`` when none):
        a header that parses, a CRC that matches, and a successor that is intact too."""
        while position < end:
            chunk = os.pread(self._fd, min(_READ_CHUNK, end - position), position)
            magic = np.frombuffer(chunk, dtype=np.uint8)[16:]
            for candidate in np.flatnonzero(magic == 2).tolist():
                if self._plausible_batch_at(position + candidate, end):
                    return position + candidate
            position += max(len(chunk) - 16, 1)
        return end

    def _plausible_batch_at(self, position: int, end: int) -> bool:
        header, _ = self._intact_batch_at(position, end)
        if header is None or header.magic < 2 or header.base_offset < self.base_offset:
            return False
        if header.end_position >= end:
            return True
        successor, _ = self._intact_batch_at(header.end_position, end)
        return successor is not None

    def _label(
        self, items: list[BatchHeader | Damage], entries: _Entries
    ) -> tuple[list[BatchHeader | Damage], bool]:
        """Turn batches whose offsets cannot be trusted and contradict their neighbours into Damage;
        also say whether an index entry contradicts a trusted batch."""
        n = len(items)
        batch = [item if isinstance(item, BatchHeader) else None for item in items]
        trusted = [
            h is not None
            and h.magic >= 2
            and (
                entries.at(h.position) == h.last_offset
                or (h.position == 0 and h.base_offset == self.base_offset)
                or (h.end_position == self.size and h.last_offset + 1 == self.offset_limit)
            )
            for h in batch
        ]
        # A batch beyond a damaged one whose header links it to the batch before (``_bridges``).
        bridged = [
            i >= 2
            and h is not None
            and batch[i - 1] is None
            and batch[i - 2] is not None
            and self._bridges(batch[i - 2], items[i - 1].position, h)
            for i, h in enumerate(batch)
        ]
        for i in range(1, n):
            trusted[i] = trusted[i] or (trusted[i - 1] and _follows(batch[i - 1], batch[i]))
            trusted[i] = trusted[i] or (bridged[i] and trusted[i - 2])
        for i in range(n - 2, -1, -1):
            trusted[i] = trusted[i] or (trusted[i + 1] and _follows(batch[i], batch[i + 1]))
            trusted[i] = trusted[i] or (i + 2 < n and bridged[i + 2] and trusted[i + 2])
        index_disagrees = False
        for h, ok in zip(batch, trusted, strict=True):
            if h is not None and ok:
                witness = entries.at(h.position)
                if (witness is not None and witness < h.last_offset) or entries.inside(
                    h.position + 1, h.end_position
                ):
                    index_disagrees = True
        # Untrusted batches weigh each other by whether they continue a neighbour's offsets: of two
        # that overlap, the one in a contiguous run is believed.
        support = [
            2
            if trusted[i]
            else int(_follows(batch[i - 1] if i else None, h) or (i + 1 < n and _follows(h, batch[i + 1])))
            for i, h in enumerate(batch)
        ]
        labelled: list[BatchHeader | Damage] = []
        for i, h in enumerate(batch):
            if h is None or trusted[i]:
                labelled.append(items[i])
                continue
            j = next((k for k in range(i - 1, -1, -1) if batch[k] is not None), None)
            previous = batch[j] if j is not None and support[j] >= support[i] else None
            following = batch[i + 1] if i + 1 < n and support[i + 1] >= support[i] else None
            reason = self._offsets_contradicted(h, previous, following, entries.at(h.position))
            beside_damage = (i > 0 and batch[i - 1] is None) or (i + 1 < n and batch[i + 1] is None)
            if not reason and support[i] == 0 and beside_damage:
                # Next to damage, continuing neither neighbour: its baseOffset may be damaged too.
                reason = f"offsets {h.base_offset}..{h.last_offset} continue no neighbour's, beside damage"
            labelled.append(Damage(h.position, h.end_position, reason) if reason else h)
        return labelled, index_disagrees

    def _offsets_contradicted(
        self, h: BatchHeader, prev: BatchHeader | None, nxt: BatchHeader | None, witness: int | None
    ) -> str:
        """Why an untrusted batch's offsets cannot be right ("" when nothing contradicts them)."""
        first = h.base_offset if h.magic >= 2 else h.last_offset
        if first < self.base_offset:
            return f"baseOffset {first} is below the segment's base offset {self.base_offset}"
        if h.last_offset - self.base_offset > 2**31 - 1:
            return f"offset {h.last_offset} is too far from the segment's base offset {self.base_offset}"
        if self.offset_limit is not None and h.last_offset >= self.offset_limit:
            return f"offset {h.last_offset} is in the next segment (from {self.offset_limit})"
        if prev is not None and first <= prev.last_offset:
            return f"offsets {first}..{h.last_offset} overlap the previous batch's (up to {prev.last_offset})"
        if nxt is not None and nxt.magic >= 2 and h.last_offset >= nxt.base_offset:
            return f"offsets {first}..{h.last_offset} overlap the next batch's (from {nxt.base_offset})"
        if witness is not None and (
            h.last_offset > witness or (nxt is not None and nxt.magic >= 2 and nxt.base_offset > witness)
        ):
            return f"offsets {first}..{h.last_offset} contradict the index entry for offset {witness}"
        return ""

    def iter_intact_headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Batch headers from ``position`` on (headers only while offsets run on), past damage: where
        the walk meets an unreadable header or a break in the offsets and the batch before fails its
        CRC (its length may be what is damaged), it resynchronises on the next intact batch."""
        end = self.size
        previous: BatchHeader | None = None
        while position < end:
            header = self._header_or_none(position, end)
            if header is None or (previous is not None and not _follows(previous, header)):
                if previous is not None and self._intact_batch_at(previous.position, end)[0] is None:
                    position, previous = self._resync(previous.position + 1, end), None
                    continue
                if header is None:
                    position, previous = self._resync(position + 1, end), None
                    continue
            yield header
            previous, position = header, header.end_position

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
        break in the offsets on, the walk continues with :meth:`find_batch`'s careful survey: each
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
        previous: BatchHeader | None = None
        try:
            for header, data in walk:
                if not self._continues(previous, header, data):
                    break
                yield header, data
                previous = header
            else:
                return
        except CorruptRecordError:
            pass
        # Survey from the last batch that carried on (a witness for the offsets after it).
        survey_from = suspect = start_position
        if previous is not None:
            survey_from, suspect = previous.position, previous.end_position
        items, _ = self._survey(survey_from, 2**62, _Entries.none())
        for item in items:
            if item.position < suspect:
                continue
            if isinstance(item, Damage):
                if item.position >= end:
                    return
                on_damage(item)
                continue
            if item.end_position > end:
                return
            yield item, os.pread(fd, item.size, item.position)

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

    def _continues(self, previous: BatchHeader | None, header: BatchHeader, data: bytes) -> bool:
        """Whether ``header``'s batch is intact (its CRC) and its offsets carry on from ``previous``
        (or start the segment); anything else is for the careful survey to judge."""
        try:
            validate_batch(data, header.at(0))
        except CorruptRecordError:
            return False
        if previous is None:
            return header.position != 0 or header.magic < 2 or header.base_offset == self.base_offset
        if header.magic < 2:
            return header.last_offset > previous.last_offset
        return _follows(previous, header)

    # ------------------------------------------------------------------ recovery

    def recover(self, *, cut_torn_tail: bool = True) -> int:
        """Rebuild both indexes from the intact batches of the .log (every batch CRC-checked); with
        ``cut_torn_tail`` (the active segment) cut its torn tail. Returns the number of bytes cut.

        Only a torn tail is cut: damage with no intact batch after it, or a last batch whose offsets do
        not continue its predecessor's. Kafka's LogSegment.recover cuts at the first bad batch; here
        damage followed by intact batches stays in place, unindexed, and its offsets are EIO through
        the survey sealed segments use (it may be all that is left of those records, and the intact
        batches after it are the only copy of theirs).
        """
        self._indexes_checked = True  # rebuilt below: opening them need not check them first
        self._reset_indexes_for_rebuild()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._rolling_based_timestamp = None
        valid = kept = last_indexed = 0
        for header in self._recovered_batches(check_last=cut_torn_tail):
            last_indexed = self._index_rebuilt_batch(header, last_indexed)
            valid, kept = header.end_position, kept + header.size
        truncated = self.size - valid if cut_torn_tail else 0
        if truncated:
            os.ftruncate(self._fd, valid)
            self.size = valid
        if kept < self.size:
            log.warning("%s: kept %d damaged bytes in place (not cut: intact data follows); their records "
                        "are unreadable", self.log_path, self.size - kept)
        self._finish_rebuilt_indexes(last_indexed)
        return truncated

    def intact_end(self) -> tuple[int, int]:
        """(next offset, end position) of the last intact batch: the log end offset and where the
        segment's data ends (what lies past it is a torn tail). Quick when the tail is sound: the
        headers from the last offset-index entry but one on (so that the last batch's predecessor is
        walked too, to vouch for its offsets), and the last batch's CRC checked; otherwise every batch
        from the start, past damage, as :meth:`recover` keeps them."""
        entries = self.offset_index.entries
        start = self.offset_index.entry(entries - 2)[1] if entries >= 2 else 0
        before = last = None
        position = start
        try:
            for header in self.iter_headers(start):
                before, last, position = last, header, header.end_position
        except CorruptRecordError:
            position = -1
        if position == self.size:
            if last is None:
                return self.base_offset, 0
            if self._intact_batch_at(last.position, self.size)[0] is not None and self._continues_offsets(
                before, last
            ):
                return last.next_offset, position
        last = None
        for last in self._recovered_batches():  # noqa: B007
            pass
        return (last.next_offset, last.end_position) if last is not None else (self.base_offset, 0)

    def _recovered_batches(self, *, check_last: bool = True) -> Iterator[BatchHeader]:
        """The intact batches recovery keeps, in order: CRC-valid, offsets fitting their neighbours',
        damage skipped; with ``check_last`` (the active segment, whose offsets run on without gaps) the
        last one only when its offsets continue its predecessor's, as nothing after it can vouch for
        them. A chunked walk while batches follow each other, then the careful one."""
        previous: BatchHeader | None = None
        position = 0
        try:
            for header, data in self.iter_batches(0, sealed=False):
                if not self._continues(previous, header, data):
                    break
                previous, position = header, header.end_position
                yield header
        except CorruptRecordError:
            pass
        before, last = None, previous
        if position < self.size:
            for header in self._accepted_batches(position, previous):
                if last is not None and last is not previous:
                    yield last
                before, last = last, header
            if last is not None and last is not previous and (
                not check_last or self._continues_offsets(before, last)
            ):
                yield last

    def _continues_offsets(self, before: BatchHeader | None, last: BatchHeader) -> bool:
        """Whether the offsets of the active segment's last intact batch can be believed: it continues
        the batch right before it in the file (at position 0: the segment's base offset). After damage
        nothing can tell (the damaged stretch may hold the offsets between)."""
        if last.magic < 2:
            return True
        if before is not None and before.end_position == last.position:
            return _follows(before, last)
        return last.position != 0 or last.base_offset == self.base_offset

    def _index_rebuilt_batch(self, header: BatchHeader, last_indexed: int) -> int:
        """Kafka's per-batch index rule during a rebuild (``recover``, ``rebuild_indexes``): track the
        max timestamp, add entries for a batch starting more than index.interval.bytes after the last
        indexed one. Returns the position of the last indexed batch."""
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = header.max_timestamp, header.last_offset
        if header.position - last_indexed > self.index_interval_bytes and not self.offset_index.is_full():
            # A full index only makes lookups scan further; it must not stop a recovery.
            self.offset_index.append(header.last_offset, header.position)
            if not self.time_index.is_full():
                self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            return header.position
        return last_indexed

    def _finish_rebuilt_indexes(self, last_indexed: int) -> None:
        """After a rebuild: the final time entry (the segment's max timestamp), trimmed indexes."""
        self._bytes_since_last_index_entry = self.size - last_indexed
        if self._max_timestamp >= 0 and self.time_index.entries < self.time_index.max_entries:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._indexes_checked = True
        self.needs_index_rebuild = False

    def _reset_indexes_for_rebuild(self) -> None:
        """Empty both indexes before a rebuild (``recover``, ``rebuild_indexes``), sized for what this
        .log can need, not the preallocated maximum: a rebuild on a nearly full disk (a restart after
        a crash) must not ask for megabytes it will trim right away."""
        entries = self._rebuilt_index_entries()
        time_entries = min(entries + 1, self.max_index_size // TimeIndex.ENTRY_SIZE)  # + the final one
        self._reset_for_rebuild(self.offset_index, entries)
        self._reset_for_rebuild(self.time_index, time_entries)

    def _reset_for_rebuild(self, index: OffsetIndex | TimeIndex, entries: int) -> None:
        """Empty ``index`` with room for ``entries``. On a disk too full for even that, it is left
        empty: valid, lookups then scan the .log, and it is rebuilt when it is next found wanting."""
        try:
            index.reset(entries * index.ENTRY_SIZE)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            log.warning("no room to rebuild %s (%s): left empty, lookups scan %s",
                        index.path, exc.strerror, self.log_path.name)
            index.reset(0)

    def _rebuilt_index_entries(self) -> int:
        """The most offset-index entries ``recover`` can write: one per batch starting more than
        ``index.interval.bytes`` after the previous entry (the first after position 0), so entry k
        starts at or after k * (interval + 1). Capped by the offset index's maximum size."""
        possible = max(self.size - 1, 0) // (self.index_interval_bytes + 1)
        return min(possible, self.max_index_size // OffsetIndex.ENTRY_SIZE)

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

    def last_intact_batch(self) -> BatchHeader | None:
        """The last batch whose header reads, found past any damage (None when there is none)."""
        position = self.offset_index.lookup(2**62)[1] if self.offset_index.entries else 0
        last = None
        for last in self.iter_intact_headers(position):  # noqa: B007
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
        """Append ``suffix`` (``.deleted``) to every file of the segment; returns the new paths.

        The segment then refers to the renamed files and is read-only (as Kafka's changeFileSuffixes):
        a reader still holding it reads them until they are removed, and nothing recreates a file.
        """
        renamed = []
        self.writable = False
        with self._lock:
            files = (
                ("log_path", None),
                ("index_path", self._offset_index),
                ("time_index_path", self._time_index),
            )
            for name, index in files:
                path = getattr(self, name)
                target = path.with_name(path.name + suffix)
                if path.exists():
                    if isinstance(index, (OffsetIndex, TimeIndex)):
                        index.rename_to(target)  # an open index follows its file
                    else:
                        os.replace(path, target)
                    renamed.append(target)
                setattr(self, name, target)
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


class _Suspect(Exception):
    """Internal: the header walk met something only a CRC-checked survey can judge."""


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes [position, end) of a .log that hold no intact batch, and what is wrong there."""

    position: int
    end: int
    reason: str


class _Entries:
    """An offset index's entries in use, for surveys: which entry sits at a position, and where."""

    def __init__(self, offsets: np.ndarray, positions: np.ndarray):
        self._offsets, self._positions = offsets, positions

    @classmethod
    def none(cls) -> _Entries:
        """No entries: a survey with no index to vouch for anything."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))

    def slot_at_or_before(self, offset: int) -> int:
        """The slot of the last entry whose offset is <= ``offset`` (-1 when none)."""
        return int(np.searchsorted(self._offsets, offset, side="right")) - 1

    def position(self, slot: int) -> int:
        return int(self._positions[slot])

    def at(self, position: int) -> int | None:
        """The offset of the entry at ``position``, or None."""
        slot = int(np.searchsorted(self._positions, position))
        if slot < len(self._positions) and int(self._positions[slot]) == position:
            return int(self._offsets[slot])
        return None

    def inside(self, lo: int, hi: int) -> bool:
        """Whether an entry points into [lo, hi)."""
        slot = int(np.searchsorted(self._positions, lo))
        return slot < len(self._positions) and int(self._positions[slot]) < hi


def _follows(a: BatchHeader | None, b: BatchHeader | None) -> bool:
    """True when v2 batch ``b`` starts right after ``a`` ends (offsets with no gap)."""
    return a is not None and b is not None and b.magic >= 2 and b.base_offset == a.last_offset + 1


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

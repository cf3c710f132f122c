"""Index checks and recovery of one segment (the per-segment half of Kafka's LogLoader work).

The indexes open lazily and are checked against the .log the first time (``_open_indexes``);
``recover`` rebuilds both indexes from the intact batches of the .log and cuts a torn tail;
``rebuild_indexes`` does the same leaving the .log untouched; ``index_problem`` checks the indexes
against the .log beyond Kafka's sanity check; ``intact_end``, ``read_next_offset`` and
``last_intact_batch`` find the segment's tail, walking from the last offset-index entry.
:class:`SegmentRecovery` holds them; :class:`~seglogfs.segment.LogSegment` mixes it in.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import CorruptIndexError, CorruptRecordError
from .index import EmptyIndex, OffsetIndex, TimeIndex
from .records import BatchHeader
from .segment_survey import follows

__all__ = ["SegmentRecovery"]

log = logging.getLogger("seglogfs.segment")  # where these messages were always logged (filters, tests)

_PAGE = 4096  # the page cache's unit of write-back
# Zero bytes ending at a page boundary, in damage past the flushed end: a page lost or written back
# before its last writes. A batch's own bytes so placed are unlikely enough to cost a bit flip's
# neighbours only in the unflushed stretch, where Kafka would cut them anyway.
_UNWRITTEN_RUN = 16


class SegmentRecovery:
    """Index checks, index rebuilds and recovery of a :class:`~seglogfs.segment.LogSegment` (mixed
    into it)."""

    # Provided by LogSegment.
    base_offset: int
    size: int
    writable: bool
    offset_limit: int | None
    index_interval_bytes: int
    max_index_size: int
    log_path: Path
    index_path: Path
    time_index_path: Path
    needs_index_rebuild: bool
    _index_lock: threading.RLock
    _indexes_ready: bool
    _checking_indexes: bool
    _offset_index: OffsetIndex | EmptyIndex | None
    _time_index: TimeIndex | EmptyIndex | None
    _indexes_checked: bool
    _max_timestamp: int | None
    _offset_of_max_timestamp: int
    _rolling_based_timestamp: int | None
    _bytes_since_last_index_entry: int
    _rebuild_out_of_room: bool = False

    if TYPE_CHECKING:

        def _log_fd(self) -> contextlib.AbstractContextManager[int]: ...
        def _touch_budget(self) -> None: ...
        def read_raw(self, position: int, size: int) -> bytes: ...
        offset_index: OffsetIndex
        time_index: TimeIndex

        def _header_or_none(self, position: int, end: int) -> BatchHeader | None: ...
        def iter_headers(self, position: int = 0) -> Iterator[BatchHeader]: ...
        def iter_intact_headers(self, position: int = 0) -> Iterator[BatchHeader]: ...
        def find_batch(self, offset: int, *, surveyed: bool = False) -> BatchHeader | None: ...
        def iter_batches(self, start_position: int = 0, end_position: int | None = None, *,
                         fd: int | None = None, sealed: bool | None = None,
                         on_damage: object = None) -> Iterator[tuple[BatchHeader, bytes]]: ...
        def _accepted_batches(self, position: int = 0, previous: BatchHeader | None = None
                              ) -> Iterator[BatchHeader]: ...
        def _intact_run(self, walk: Iterator[tuple[BatchHeader, bytes]]
                        ) -> Iterator[tuple[BatchHeader, bytes]]: ...
        def _intact_batch_at(self, position: int, end: int) -> tuple[BatchHeader | None, str]: ...

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
            elif not self._indexes_checked and self.writable and self.size == 0:
                # An empty .log has nothing to index: what its preallocated files hold are zeros a
                # power loss kept with the files' length and not their trim (taken as entries, they
                # would fill the index).
                for index in (self._offset_index, self._time_index):
                    if index.entries:
                        index.limit_entries(0)
            self._indexes_checked = True
            self._indexes_ready = True

    def _open_index(
        self, cls: type[OffsetIndex] | type[TimeIndex], path: Path
    ) -> OffsetIndex | TimeIndex | EmptyIndex:
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
        _, last, _ = self._last_batches_from_index(past_damage=True)
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

    def sanity_check_indexes(self) -> None:
        """Raise CorruptIndexError when the indexes cannot be trusted (see ``index_problem``)."""
        problem = self.index_problem() if self.offset_index is not None else None
        if problem is not None:
            raise CorruptIndexError(problem)

    def index_contradicted(self, problem: str) -> None:
        """An index entry in use was found wrong: rebuild the indexes of a sealed (or read-only)
        segment now. The active segment's are a writer's, never rebuilt under its feet: that waits for
        the next load, which checks them."""
        if self.offset_limit is not None or not self.writable:
            with self._index_lock:  # the descriptor budget leaves the indexes alone meanwhile
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
        self._offset_index = EmptyIndex(True, self.base_offset)  # type: ignore[assignment]
        self._time_index = EmptyIndex(False, self.base_offset)  # type: ignore[assignment]
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

    def recover(self, *, cut_torn_tail: bool = True, recovery_point: int | None = None) -> int:
        """Rebuild both indexes from the intact batches of the .log (every batch CRC-checked); with
        ``cut_torn_tail`` (the active segment) cut its torn tail. Returns the number of bytes cut.

        Only a torn tail is cut: damage with no intact batch after it, or a last batch whose offsets do
        not continue its predecessor's. Kafka's LogSegment.recover cuts at the first bad batch; here
        damage followed by intact batches stays in place, unindexed, and its offsets are EIO through
        the survey sealed segments use (it may be all that is left of those records, and the intact
        batches after it are the only copy of theirs). Except a page lost past ``recovery_point`` (the
        flushed end), where no byte was promised durable: pages are written back in any order, and a
        power loss may keep a later page and lose an earlier one, or keep it as it was before its last
        writes (zeros up to the page's end). Damage that starts past the recovery point and holds such
        zeros is a torn tail, cut with everything after it, as Kafka does.
        """
        self._indexes_checked = True  # rebuilt below: opening them need not check them first
        self._reset_indexes_for_rebuild()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._rolling_based_timestamp = None
        valid = kept = last_indexed = 0
        next_offset = self.base_offset
        for header in self._recovered_batches(check_last=cut_torn_tail):
            if (cut_torn_tail and recovery_point is not None and header.position > valid
                    and next_offset >= recovery_point and self._unwritten_page_in(valid, header.position)):
                break  # a page lost past the flushed end: the rest is a torn tail
            next_offset = header.last_offset + 1
            last_indexed = self._index_rebuilt_batch(header, last_indexed)
            valid, kept = header.end_position, kept + header.size
        truncated = self.size - valid if cut_torn_tail else 0
        if truncated:
            with self._log_fd() as fd:
                os.ftruncate(fd, valid)
            self.size = valid
        if kept < self.size:
            log.warning("%s: kept %d damaged bytes in place (not cut: intact data follows); their records "
                        "are unreadable", self.log_path, self.size - kept)
        self._finish_rebuilt_indexes(last_indexed)
        return truncated

    def _unwritten_page_in(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` of the .log holds the mark of a page never (fully) written back:
        at least ``_UNWRITTEN_RUN`` zero bytes ending at a page boundary."""
        data = self.read_raw(start, end - start)
        first = -(-(start + _UNWRITTEN_RUN) // _PAGE) * _PAGE
        return any(
            not any(data[boundary - _UNWRITTEN_RUN - start : boundary - start])
            for boundary in range(first, end + 1, _PAGE)
        )

    def intact_end(self) -> tuple[int, int]:
        """(next offset, end position) of the last intact batch: the log end offset and where the
        segment's data ends (what lies past it is a torn tail). Quick when the tail is sound: the
        headers from the last offset-index entry but one on (so that the last batch's predecessor is
        walked too, to vouch for its offsets), and the last batch's CRC checked; otherwise every batch
        from the start, past damage, as :meth:`recover` keeps them."""
        try:
            before, last, position = self._last_batches_from_index(entries_back=2)
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

    def read_next_offset(self) -> int:
        """The offset after the last batch: scan from the last offset-index entry to the end."""
        _, last, _ = self._last_batches_from_index()
        return last.next_offset if last is not None else self.base_offset

    def last_intact_batch(self) -> BatchHeader | None:
        """The last batch whose header reads, found past any damage (None when there is none)."""
        _, last, _ = self._last_batches_from_index(past_damage=True)
        return last

    def _last_batches_from_index(
        self, *, entries_back: int = 1, past_damage: bool = False
    ) -> tuple[BatchHeader | None, BatchHeader | None, int]:
        """(second-last header, last header, where the walk ended) walking the batch headers from the
        ``entries_back``-th last offset-index entry (the start of the .log when there are fewer) to
        the end: the quick way to a segment's tail. ``past_damage`` walks with
        :meth:`iter_intact_headers` (resynchronising past damage), else with :meth:`iter_headers`
        (which stops at a torn tail and raises CorruptRecordError at an unreadable header)."""
        index = self.offset_index
        entries = index.entries
        start = index.entry(entries - entries_back).position if entries >= entries_back else 0
        walk = self.iter_intact_headers if past_damage else self.iter_headers
        before = last = None
        for header in walk(start):
            before, last = last, header
        return before, last, (last.end_position if last is not None else start)

    def _recovered_batches(self, *, check_last: bool = True) -> Iterator[BatchHeader]:
        """The intact batches recovery keeps, in order: CRC-valid, offsets fitting their neighbours',
        damage skipped; with ``check_last`` (the active segment, whose offsets run on without gaps) the
        last one only when its offsets continue its predecessor's, as nothing after it can vouch for
        them. A chunked walk while batches follow each other, then the careful one."""
        before: BatchHeader | None = None
        last: BatchHeader | None = None  # held back until the next one, for ``check_last``
        for header, _ in self._intact_run(self.iter_batches(0, sealed=False)):
            if last is not None:
                yield last
            before, last = last, header
        position = last.end_position if last is not None else 0
        if position < self.size:
            for header in self._accepted_batches(position, last):
                if last is not None:
                    yield last
                before, last = last, header
        if last is not None and (not check_last or self._continues_offsets(before, last)):
            yield last

    def _continues_offsets(self, before: BatchHeader | None, last: BatchHeader) -> bool:
        """Whether the offsets of the active segment's last intact batch can be believed: it continues
        the batch right before it in the file (at position 0: the segment's base offset). After damage
        nothing can tell (the damaged stretch may hold the offsets between)."""
        if last.magic < 2:
            return True
        if before is not None and before.end_position == last.position:
            return follows(before, last)
        return last.position != 0 or last.base_offset == self.base_offset

    def _index_rebuilt_batch(self, header: BatchHeader, last_indexed: int) -> int:
        """Kafka's per-batch index rule during a rebuild (``recover``, ``rebuild_indexes``): track the
        max timestamp, add entries for a batch starting more than index.interval.bytes after the last
        indexed one. Returns the position of the last indexed batch."""
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = header.max_timestamp, header.last_offset
        if (
            header.position - last_indexed > self.index_interval_bytes
            and not self.offset_index.is_full()
            and not self._rebuild_out_of_room
        ):
            # A full index (or a full disk) only makes lookups scan further; it must not stop a recovery.
            with self._no_room_stops_the_rebuild():
                self.offset_index.append(header.last_offset, header.position)
                if not self.time_index.is_full():
                    self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            return header.position
        return last_indexed

    def _finish_rebuilt_indexes(self, last_indexed: int) -> None:
        """After a rebuild: the final time entry (the segment's max timestamp), trimmed indexes."""
        self._bytes_since_last_index_entry = self.size - last_indexed
        if self._max_timestamp >= 0 and self.time_index.entries < self.time_index.max_entries:
            with self._no_room_stops_the_rebuild():
                self.time_index.maybe_append(
                    self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
                )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._indexes_checked = True
        self.needs_index_rebuild = False

    @contextlib.contextmanager
    def _no_room_stops_the_rebuild(self) -> Iterator[None]:
        """Index entries written during a rebuild: on a full disk (ENOSPC) the indexes keep what they
        have (valid: lookups scan further) and the rebuild adds no more."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if not self._rebuild_out_of_room:
                log.warning("no room to index all of %s (%s): lookups scan further",
                            self.log_path, exc.strerror)
            self._rebuild_out_of_room = True

    def _reset_indexes_for_rebuild(self) -> None:
        """Empty both indexes before a rebuild (``recover``, ``rebuild_indexes``), sized for what this
        .log can need, not the preallocated maximum: a rebuild on a nearly full disk (a restart after
        a crash) must not ask for megabytes it will trim right away."""
        self._rebuild_out_of_room = False
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

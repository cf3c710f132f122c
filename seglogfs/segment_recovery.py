"""Index checks and recovery of one segment (the per-segment half of Kafka's LogLoader work).

The segment opens its indexes lazily and has them checked against the .log the first time
(``index_problem``: beyond Kafka's sanity check); ``recover`` rebuilds both indexes from the intact
batches of the .log and cuts a torn tail; ``rebuild_indexes`` does the same leaving the .log
untouched; ``intact_end``, ``read_next_offset`` and ``last_intact_batch`` find the segment's tail,
walking from the last offset-index entry. :class:`SegmentRecovery` holds them; each
:class:`~seglogfs.segment.LogSegment` has one, and takes a rebuild's outcome (:class:`Rebuilt`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from .errors import CorruptIndexError, CorruptRecordError
from .index import EmptyIndex, OffsetIndex, TimeIndex
from .records import BatchHeader
from .segment_survey import SegmentSurvey, follows

__all__ = ["Rebuilt", "RecoveredSegment", "SegmentRecovery"]

log = logging.getLogger("seglogfs.segment")  # where these messages were always logged (filters, tests)

_PAGE = 4096  # the page cache's unit of write-back
# Zero bytes ending at a page boundary, in damage past the flushed end: a page lost or written back
# before its last writes. A batch's own bytes so placed are unlikely enough to cost a bit flip's
# neighbours only in the unflushed stretch, where Kafka would cut them anyway.
_UNWRITTEN_RUN = 16


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """What a rebuild of the indexes found, for the segment to take: its max timestamp so far (and
    the last offset of the batch holding it), the bytes since the last offset-index entry, and the
    bytes cut from the end of the .log."""

    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_last_index_entry: int
    truncated: int = 0


class _Progress:
    """A rebuild under way: the max timestamp so far and where the last offset-index entry points."""

    __slots__ = ("last_indexed", "max_timestamp", "offset_of_max_timestamp", "out_of_room")

    def __init__(self, base_offset: int) -> None:
        self.max_timestamp, self.offset_of_max_timestamp = -1, base_offset
        self.last_indexed = 0
        self.out_of_room = False  # the disk filled up: the indexes keep what they have


class RecoveredSegment(Protocol):
    """What recovery reads and changes of its segment (a :class:`~seglogfs.segment.LogSegment`)."""

    base_offset: int
    size: int
    writable: bool
    log_path: Path
    index_interval_bytes: int
    max_index_size: int

    @property
    def offset_index(self) -> OffsetIndex: ...
    @property
    def time_index(self) -> TimeIndex: ...
    def read_raw(self, position: int, size: int) -> bytes: ...
    def header_or_none(self, position: int, end: int) -> BatchHeader | None: ...
    def find_batch(self, offset: int, *, surveyed: bool = False) -> BatchHeader | None: ...
    def iter_headers(self, position: int = 0) -> Iterator[BatchHeader]: ...
    def iter_batches(self, start_position: int = 0, end_position: int | None = None, *,
                     sealed: bool | None = None) -> Iterator[tuple[BatchHeader, bytes]]: ...
    def truncate(self, size: int) -> None: ...


class SegmentRecovery:
    """Index checks, index rebuilds, recovery and the tail of ``segment``, whose batches ``survey``
    walks past damage."""

    __slots__ = ("_segment", "_survey")

    def __init__(self, segment: RecoveredSegment, survey: SegmentSurvey) -> None:
        self._segment = segment
        self._survey = survey

    def index_problem(
        self, offset_index: OffsetIndex | EmptyIndex, time_index: TimeIndex | EmptyIndex
    ) -> str | None:
        """Why the segment's indexes (open, not yet in use) cannot be trusted, naming the file, or None.
        Beyond Kafka's sanity check: entries strictly increasing, inside the segment's offsets and its
        .log, the first and last offset entries at batches they fit, and the last time entry equal to
        the max timestamp of the batch it names, which no later batch exceeds."""
        segment = self._segment
        size, base_offset, writable = segment.size, segment.base_offset, segment.writable
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
            if positions[0] < 0 or positions[-1] >= size:
                where = f"outside {segment.log_path} ({size} bytes)"
                return f"{name}: position {int(positions[-1])} is {where}"
            if offsets[-1] - base_offset > 2**31 - 1:
                return f"{name}: offset {int(offsets[-1])} is outside the segment"
            for slot in (0, -1):
                offset, position = int(offsets[slot]), int(positions[slot])
                header = segment.header_or_none(position, size)
                if header is None or header.last_offset > offset:
                    return f"{name}: the entry for offset {offset} names no batch at position {position}"
        _, last, _ = self._last_batches_from_index(past_damage=True)
        stamps, stamp_offsets = time_index.to_arrays()
        if not writable and last is not None and isinstance(time_index, TimeIndex):
            # A reader of a log being written: entries past the batches it sees are not its concern.
            time_index.limit_entries(int(np.searchsorted(stamp_offsets, last.next_offset)))
            stamps, stamp_offsets = time_index.to_arrays()
        if stamps.size:
            name = time_index.path
            if (np.diff(stamps) <= 0).any() or (np.diff(stamp_offsets) < 0).any():
                return f"{name}: entries are not increasing"
            if stamp_offsets[0] < base_offset:
                return f"{name}: offset {int(stamp_offsets[0])} is below the base offset {base_offset}"
            stamp, offset = int(stamps[-1]), int(stamp_offsets[-1])
            try:
                holder = segment.find_batch(offset)
            except CorruptRecordError:
                holder = None
            if holder is None or holder.last_offset != offset or holder.max_timestamp != stamp:
                found = "no batch" if holder is None else f"max timestamp {holder.max_timestamp}"
                return f"{name}: last entry ({stamp}, offset {offset}) does not match the .log ({found})"
            if writable and last is not None and last.max_timestamp > stamp:
                return f"{name}: last entry {stamp} is below the last batch's {last.max_timestamp}"
        elif writable and last is not None and last.max_timestamp >= 0 and offsets.size:
            return f"{time_index.path}: empty, but the batches carry timestamps"
        return None

    def rebuild_indexes(self) -> Rebuilt:
        """Rebuild both indexes from the intact batches of the .log with Kafka's per-batch rule, leaving
        the .log untouched (damaged stretches are skipped, not cut: a sealed batch past them is data)."""
        progress = self._reset_indexes_for_rebuild()
        for header in self._recovered_batches(check_last=False):
            self._index_rebuilt_batch(header, progress)
        # Trimmed as after a recovery (an active segment grows them again when the Log loads).
        return self._finish_rebuilt_indexes(progress)

    def recover(self, *, cut_torn_tail: bool = True, recovery_point: int | None = None) -> Rebuilt:
        """Rebuild both indexes from the intact batches of the .log (every batch CRC-checked); with
        ``cut_torn_tail`` (the active segment) cut its torn tail (``Rebuilt.truncated``: the bytes cut).
        A page lost past ``recovery_point`` is cut with what follows in any segment, sealed or not (a
        power loss right after a roll leaves the sealed segment's last pages unflushed too); the
        loader then drops the segments after it.

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
        segment = self._segment
        progress = self._reset_indexes_for_rebuild()
        valid = kept = 0
        next_offset = segment.base_offset
        lost_page = False
        for header in self._recovered_batches(check_last=cut_torn_tail):
            if (recovery_point is not None and header.position > valid and next_offset >= recovery_point
                    and self._unwritten_page_in(valid, header.position)):
                lost_page = True
                break  # a page lost past the flushed end: the rest is a torn tail
            next_offset = header.last_offset + 1
            self._index_rebuilt_batch(header, progress)
            valid, kept = header.end_position, kept + header.size
        if (not lost_page and recovery_point is not None and valid < segment.size
                and next_offset >= recovery_point and self._unwritten_page_in(valid, segment.size)):
            lost_page = True  # the last pages lost, nothing intact after them
        truncated = segment.size - valid if cut_torn_tail or lost_page else 0
        if truncated:
            segment.truncate(valid)
        if kept < segment.size:
            log.warning("%s: kept %d damaged bytes in place (not cut: intact data follows); their records "
                        "are unreadable", segment.log_path, segment.size - kept)
        return self._finish_rebuilt_indexes(progress, truncated)

    def _unwritten_page_in(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` of the .log holds the mark of a page never (fully) written back:
        at least ``_UNWRITTEN_RUN`` zero bytes ending at a page boundary."""
        data = self._segment.read_raw(start, end - start)
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
        size, base_offset = self._segment.size, self._segment.base_offset
        try:
            before, last, position = self._last_batches_from_index(entries_back=2)
        except CorruptRecordError:
            position = -1
        if position == size:
            if last is None:
                return base_offset, 0
            if self._survey.intact_batch_at(last.position, size)[0] is not None and self._continues_offsets(
                before, last
            ):
                return last.next_offset, position
        last = None
        for last in self._recovered_batches():  # noqa: B007
            pass
        return (last.next_offset, last.end_position) if last is not None else (base_offset, 0)

    def read_next_offset(self) -> int:
        """The offset after the last batch: scan from the last offset-index entry to the end."""
        _, last, _ = self._last_batches_from_index()
        return last.next_offset if last is not None else self._segment.base_offset

    def last_intact_batch(self) -> BatchHeader | None:
        """The last batch whose header reads, found past any damage (None when there is none)."""
        _, last, _ = self._last_batches_from_index(past_damage=True)
        return last

    def _last_batches_from_index(
        self, *, entries_back: int = 1, past_damage: bool = False
    ) -> tuple[BatchHeader | None, BatchHeader | None, int]:
        """(second-last header, last header, where the walk ended) walking the batch headers from the
        ``entries_back``-th last offset-index entry (the start of the .log when there are fewer) to
        the end: the quick way to a segment's tail. ``past_damage`` walks past damage
        (:meth:`~seglogfs.segment_survey.SegmentSurvey.iter_intact_headers`), else with the segment's
        ``iter_headers`` (which stops at a torn tail and raises CorruptRecordError at an unreadable
        header)."""
        index = self._segment.offset_index
        entries = index.entries
        start = index.entry(entries - entries_back).position if entries >= entries_back else 0
        walk = self._survey.iter_intact_headers if past_damage else self._segment.iter_headers
        before: BatchHeader | None = None
        last: BatchHeader | None = None
        for header in walk(start):
            before, last = last, header
        return before, last, (last.end_position if last is not None else start)

    def _recovered_batches(self, *, check_last: bool = True) -> Iterator[BatchHeader]:
        """The intact batches recovery keeps, in order: CRC-valid, offsets fitting their neighbours',
        damage skipped; with ``check_last`` (the active segment, whose offsets run on without gaps) the
        last one only when its offsets continue its predecessor's, as nothing after it can vouch for
        them. A chunked walk while batches follow each other, then the careful one."""
        segment, survey = self._segment, self._survey
        before: BatchHeader | None = None
        last: BatchHeader | None = None  # held back until the next one, for ``check_last``
        for header, _ in survey.intact_run(segment.iter_batches(0, sealed=False)):
            if last is not None:
                yield last
            before, last = last, header
        position = last.end_position if last is not None else 0
        if position < segment.size:
            for header in survey.accepted_batches(position, last):
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
        return last.position != 0 or last.base_offset == self._segment.base_offset

    def _index_rebuilt_batch(self, header: BatchHeader, progress: _Progress) -> None:
        """Kafka's per-batch index rule during a rebuild (``recover``, ``rebuild_indexes``): track the
        max timestamp, add entries for a batch starting more than index.interval.bytes after the last
        indexed one."""
        segment = self._segment
        if header.max_timestamp > progress.max_timestamp:
            progress.max_timestamp = header.max_timestamp
            progress.offset_of_max_timestamp = header.last_offset
        if (
            header.position - progress.last_indexed > segment.index_interval_bytes
            and not segment.offset_index.is_full()
            and not progress.out_of_room
        ):
            # A full index (or a full disk) only makes lookups scan further; it must not stop a recovery.
            with self._no_room_stops_the_rebuild(progress):
                segment.offset_index.append(header.last_offset, header.position)
                if not segment.time_index.is_full():
                    segment.time_index.maybe_append(progress.max_timestamp, progress.offset_of_max_timestamp)
            progress.last_indexed = header.position

    def _finish_rebuilt_indexes(self, progress: _Progress, truncated: int = 0) -> Rebuilt:
        """After a rebuild: the final time entry (the segment's max timestamp), trimmed indexes."""
        segment = self._segment
        time_index = segment.time_index
        if progress.max_timestamp >= 0 and time_index.entries < time_index.max_entries:
            with self._no_room_stops_the_rebuild(progress):
                time_index.maybe_append(
                    progress.max_timestamp, progress.offset_of_max_timestamp, skip_full_check=True
                )
        segment.offset_index.trim_to_valid_size()
        time_index.trim_to_valid_size()
        return Rebuilt(progress.max_timestamp, progress.offset_of_max_timestamp,
                       segment.size - progress.last_indexed, truncated)

    @contextlib.contextmanager
    def _no_room_stops_the_rebuild(self, progress: _Progress) -> Iterator[None]:
        """Index entries written during a rebuild: on a full disk (ENOSPC) the indexes keep what they
        have (valid: lookups scan further) and the rebuild adds no more."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if not progress.out_of_room:
                log.warning("no room to index all of %s (%s): lookups scan further",
                            self._segment.log_path, exc.strerror)
            progress.out_of_room = True

    def _reset_indexes_for_rebuild(self) -> _Progress:
        """Empty both indexes before a rebuild (``recover``, ``rebuild_indexes``), sized for what this
        .log can need, not the preallocated maximum: a rebuild on a nearly full disk (a restart after
        a crash) must not ask for megabytes it will trim right away. Returns the rebuild's progress."""
        segment = self._segment
        entries = self._rebuilt_index_entries()
        time_entries = min(entries + 1, segment.max_index_size // TimeIndex.ENTRY_SIZE)  # + the final one
        self._reset_for_rebuild(segment.offset_index, entries)
        self._reset_for_rebuild(segment.time_index, time_entries)
        return _Progress(segment.base_offset)

    def _reset_for_rebuild(self, index: OffsetIndex | TimeIndex, entries: int) -> None:
        """Empty ``index`` with room for ``entries``. On a disk too full for even that, it is left
        empty: valid, lookups then scan the .log, and it is rebuilt when it is next found wanting."""
        try:
            index.reset(entries * index.ENTRY_SIZE)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            log.warning("no room to rebuild %s (%s): left empty, lookups scan %s",
                        index.path, exc.strerror, self._segment.log_path.name)
            index.reset(0)

    def _rebuilt_index_entries(self) -> int:
        """The most offset-index entries ``recover`` can write: one per batch starting more than
        ``index.interval.bytes`` after the previous entry (the first after position 0), so entry k
        starts at or after k * (interval + 1). Capped by the offset index's maximum size."""
        segment = self._segment
        possible = max(segment.size - 1, 0) // (segment.index_interval_bytes + 1)
        return min(possible, segment.max_index_size // OffsetIndex.ENTRY_SIZE)

"""The ordered segments of one log (Kafka's ``LogSegments``): :class:`LogSegments`, owned by a
:class:`~seglogfs.log.Log` (and used by its loader), makes a segment, links each to the next, and finds
the one holding an offset.

The segments are a plain list, oldest first, replaced as a whole (copy-on-write) whenever a roll, a
load, retention or a clean changes it, so that a reader can keep working on the list it fetched
(:attr:`LogSegments.all`); the free functions here work on such a snapshot.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .config import LogConfig
from .errors import CorruptRecordError
from .records import BatchHeader, validate_batch
from .segment import LogSegment, random_roll_jitter
from .timestamps import clock_ms

__all__ = ["LogSegments", "iter_checked_batches", "segment_index_for"]


class LogSegments:
    """The segments of the log in ``directory``, oldest first. Changed only under the owning log's
    lock (or by its loader before the log is shared); read without a lock through :attr:`all`."""

    def __init__(
        self, directory: Path, config: LogConfig, *, writable: bool, clock: Callable[[], float]
    ) -> None:
        self.dir = directory
        #: the log's settings (a segment's index sizes and roll jitter); the log replaces it live
        self.config = config
        self.writable = writable
        self._clock = clock
        #: the current list (a snapshot: never changed in place)
        self.all: list[LogSegment] = []
        #: how many times segments left the list (see :attr:`seglogfs.log.Log.removals`)
        self.removals = 0

    @property
    def active(self) -> LogSegment:
        """The last segment, the one appends go to."""
        return self.all[-1]

    def __len__(self) -> int:
        return len(self.all)

    def replace(self, segments: Sequence[LogSegment]) -> None:
        """Make ``segments`` the list (linked: :meth:`link`); a segment left out counts a removal."""
        old, kept = self.all, set(segments)
        self.all = list(segments)
        self.link(segments)
        if any(segment not in kept for segment in old):
            self.removals += 1  # after the new list is out: see Log.removals

    def index_for(self, offset: int) -> int:
        """Index in :attr:`all` of the segment that would hold ``offset``."""
        return segment_index_for(offset, self.all)

    def new_segment(
        self, base_offset: int, *, writable: bool | None = None, file_suffix: str = ""
    ) -> LogSegment:
        """A segment of this log at ``base_offset``, set up by the config (its roll jitter drawn now),
        not yet in the list. ``writable`` defaults to the log's; ``file_suffix``: its files are
        ``<base>.log<suffix>`` and so on (a reader's view of a ``.swap``)."""
        config = self.config
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
            roll_jitter_ms=random_roll_jitter(config.segment_jitter_ms, config.segment_ms),
            writable=self.writable if writable is None else writable,
            created_ms=clock_ms(self._clock),
            file_suffix=file_suffix,
        )

    @staticmethod
    def discard_new(segment: LogSegment) -> None:
        """Close and delete a segment that was never part of the log (a roll that failed half-way)."""
        segment.close(trim=False)
        for path in (segment.log_path, segment.index_path, segment.time_index_path):
            path.unlink(missing_ok=True)

    @staticmethod
    def link(segments: Sequence[LogSegment]) -> None:
        """Give each segment its offset limit: a sealed segment's batches end before the next one
        begins, a witness for their offsets; the last segment has none."""
        for segment, following in zip(segments, [*segments[1:], None], strict=True):
            segment.offset_limit = following.base_offset if following is not None else None

    def iter_checked_batches(
        self, start: int, end_offset: int
    ) -> Iterator[tuple[LogSegment, BatchHeader, bytes]]:
        """:func:`iter_checked_batches` of the current list."""
        return iter_checked_batches(self.all, start, end_offset)


def segment_index_for(offset: int, segments: Sequence[LogSegment]) -> int:
    """Index in ``segments`` (one snapshot of the list, which retention and rolls replace) of the
    segment that would hold ``offset``."""
    return max(bisect.bisect_right(segments, offset, key=lambda s: s.base_offset) - 1, 0)


def iter_checked_batches(
    segments: Sequence[LogSegment], start: int, end_offset: int
) -> Iterator[tuple[LogSegment, BatchHeader, bytes]]:
    """(segment, header, batch bytes) of every batch of ``segments`` overlapping offsets
    [start, end_offset), CRC-checked: a corrupt one raises CorruptRecordError naming file and position."""
    if start >= end_offset:
        return
    i = segment_index_for(start, segments)
    first = True
    for segment in segments[i:]:
        if segment.base_offset >= end_offset:
            return
        position = 0
        if first:
            located = segment.find_batch(start)
            first = False
            if located is None:
                continue
            position = located.position
        for header, data in segment.iter_batches(position):
            if header.base_offset >= end_offset and header.magic >= 2:
                return
            if header.last_offset < start:
                continue
            try:
                validate_batch(data, header.at(0))
            except CorruptRecordError as exc:
                raise exc.at(segment.log_path, header.position) from None
            yield segment, header, data
            if header.last_offset >= end_offset - 1:
                return

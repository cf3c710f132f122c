"""The ordered segments of one log (Kafka's ``LogSegments``): how the log and its loader make a segment,
link each to the next, and find the one holding an offset.

A log keeps its segments in a plain list, oldest first, replaced as a whole (copy-on-write) whenever
a roll, a load or retention changes it, so that a reader can keep working on the list it fetched.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .config import LogConfig
from .errors import CorruptRecordError
from .records import BatchHeader, validate_batch
from .segment import LogSegment, random_roll_jitter

__all__ = [
    "clock_ms",
    "discard_new_segment",
    "iter_checked_batches",
    "link_segments",
    "new_segment",
    "segment_index_for",
]


def clock_ms(clock: Callable[[], float]) -> int:
    """``clock()`` (seconds, as ``time.time``) in epoch milliseconds."""
    return int(clock() * 1000)


def new_segment(
    directory: Path,
    base_offset: int,
    config: LogConfig,
    *,
    writable: bool,
    clock: Callable[[], float],
    file_suffix: str = "",
) -> LogSegment:
    """The segment of ``directory`` at ``base_offset``, set up by ``config`` (its roll jitter drawn now);
    ``file_suffix``: its files are ``<base>.log<suffix>`` and so on (a reader's view of a ``.swap``)."""
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        roll_jitter_ms=random_roll_jitter(config.segment_jitter_ms, config.segment_ms),
        writable=writable,
        created_ms=clock_ms(clock),
        file_suffix=file_suffix,
    )


def link_segments(segments: Sequence[LogSegment]) -> None:
    """Give each segment its offset limit: a sealed segment's batches end before the next one begins,
    a witness for their offsets; the last segment has none."""
    for segment, following in zip(segments, [*segments[1:], None], strict=True):
        segment.offset_limit = following.base_offset if following is not None else None


def segment_index_for(offset: int, segments: Sequence[LogSegment]) -> int:
    """Index in ``segments`` (one snapshot of the list, which retention and rolls replace) of the
    segment that would hold ``offset``."""
    return max(bisect.bisect_right(segments, offset, key=lambda s: s.base_offset) - 1, 0)


def discard_new_segment(segment: LogSegment) -> None:
    """Close and delete a segment that was never part of the log (a roll that failed half-way)."""
    segment.close(trim=False)
    for path in (segment.log_path, segment.index_path, segment.time_index_path):
        path.unlink(missing_ok=True)


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

"""Which offsets of a log hold a user record (``info``'s record count, the first offset a
read_committed reader sees from a timestamp on, the mount's listings).

A compacted log has offset gaps inside and between batches. The walk goes batch by batch, through
the headers only, and decodes a batch's record offset deltas only when its record count says some of
its offsets are missing: a batch of ``lastOffsetDelta + 1`` records holds every offset of its range (a
v2 batch's deltas are distinct and increasing). A control batch holds no user record. A batch whose
records do not decode (damage) is listed whole: reading one of its offsets is the reader's EIO.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

from .compression import Compression
from .errors import CorruptRecordError
from .log_segments import segment_index_for
from .read_committed import READ_COMMITTED, READ_UNCOMMITTED, Isolation
from .records import BatchHeader, decode_batch_columns
from .segment import LogSegment

__all__ = ["OffsetsSource", "existing_offsets", "first_existing_offset", "merged", "record_count"]


class OffsetsSource(Protocol):
    """What the walk reads of a log (a :class:`~seglogfs.log.Log`)."""

    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...
    @property
    def segments(self) -> Sequence[LogSegment]: ...
    def hidden_batch(self) -> Callable[[BatchHeader], bool]: ...
    def has_aborted_transactions(self) -> bool: ...


# user records of sealed segments counted whole (weak: a segment retention or the cleaner removed goes)
_SEALED_COUNTS: weakref.WeakKeyDictionary[LogSegment, int] = weakref.WeakKeyDictionary()
_COUNTS_LOCK = threading.Lock()


def existing_offsets(
    lg: OffsetsSource,
    start: int | None = None,
    end: int | None = None,
    *,
    isolation: Isolation = READ_UNCOMMITTED,
) -> list[range]:
    """The offsets in [start, end) (default: the whole log) that hold a user record, as ascending,
    disjoint, non-adjacent ranges; under ``read_committed`` only those a read_committed reader sees
    (none of an aborted transaction, none at or past the last stable offset)."""
    runs: list[range] = []
    for run in _existing_runs(lg, start, end, isolation):
        _add(runs, run)
    return runs


def first_existing_offset(
    lg: OffsetsSource, start: int, *, isolation: Isolation = READ_UNCOMMITTED
) -> int | None:
    """The first offset at or after ``start`` that holds a record (under ``isolation``), or None."""
    return next((run.start for run in _existing_runs(lg, start, None, isolation)), None)


def _existing_runs(
    lg: OffsetsSource, start: int | None, end: int | None, isolation: Isolation
) -> Iterator[range]:
    """The non-empty runs of offsets in [start, end) holding a record, in order (adjacent ones apart)."""
    lo = lg.start_offset if start is None else max(start, lg.start_offset)
    hi = lg.end_offset if end is None else min(end, lg.end_offset)
    hidden = None
    if isolation == READ_COMMITTED:
        hi = min(hi, lg.last_stable_offset)
        hidden = lg.hidden_batch() if lg.has_aborted_transactions() else None
    if lo >= hi:
        return
    segments = lg.segments  # one snapshot: the cleaner and retention replace the list, never change it
    for segment in segments[segment_index_for(lo, segments) :]:
        if segment.base_offset >= hi:
            return
        position = segment.offset_index.lookup(lo).position if lo > segment.base_offset else 0
        for header in segment.iter_headers(position):
            if header.base_offset >= hi:
                return
            if header.last_offset < lo or (hidden is not None and hidden(header)):
                continue
            for run in _batch_offsets(segment, header):
                clipped = range(max(run.start, lo), min(run.stop, hi))
                if clipped:
                    yield clipped


def record_count(lg: OffsetsSource) -> int:
    """How many user records the log holds from its start offset: the offsets in use, not
    ``end - start`` (a compacted log has gaps; control records are not user records). From the batch
    headers' record counts; a sealed segment is counted once."""
    start = lg.start_offset
    segments = lg.segments
    total = 0
    for k, segment in enumerate(segments):
        sealed = k + 1 < len(segments)
        if sealed and segments[k + 1].base_offset <= start:
            continue
        whole = sealed and segment.base_offset >= start
        if whole:
            with _COUNTS_LOCK:
                cached = _SEALED_COUNTS.get(segment)
            if cached is not None:
                total += cached
                continue
        count = 0
        for header in segment.iter_headers():
            if header.last_offset < start:
                continue
            if header.magic >= 2 and not header.is_control and header.base_offset >= start:
                count += header.records_count
            else:
                count += sum(len(range(max(r.start, start), r.stop)) for r in _batch_offsets(segment, header))
        if whole:
            with _COUNTS_LOCK:
                _SEALED_COUNTS[segment] = count
        total += count
    return total


def _batch_offsets(segment: LogSegment, header: BatchHeader) -> list[range]:
    """The offsets of ``header``'s batch that hold a user record."""
    if header.is_control:
        return []
    span = header.last_offset - header.base_offset + 1
    if header.magic >= 2 and header.records_count == span:
        return [range(header.base_offset, header.last_offset + 1)]
    if header.magic >= 2 and header.records_count == 0:
        return []  # emptied by the cleaner, kept for its offsets
    if header.magic < 2 and header.compression == Compression.NONE:
        return [range(header.last_offset, header.last_offset + 1)]
    try:
        data = segment.read(header.position, header.size)
        offsets = decode_batch_columns(data, header.at(0), path=segment.log_path).offsets
    except CorruptRecordError:
        return [range(header.base_offset, header.last_offset + 1)]
    return _runs(np.asarray(offsets, dtype=np.int64))


def _runs(offsets: np.ndarray) -> list[range]:
    """Ascending ``offsets`` as ranges of consecutive offsets."""
    if len(offsets) == 0:
        return []
    breaks = np.flatnonzero(np.diff(offsets) != 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [len(offsets)]))
    return [range(int(offsets[a]), int(offsets[b - 1]) + 1) for a, b in zip(starts, stops, strict=True)]


def _add(runs: list[range], run: range) -> None:
    if not run:
        return
    if runs and runs[-1].stop >= run.start:
        runs[-1] = range(runs[-1].start, max(runs[-1].stop, run.stop))
    else:
        runs.append(run)


def merged(runs: list[range]) -> list[range]:
    """Ascending ``runs`` with overlapping or adjacent ones joined, as :func:`existing_offsets` gives
    them."""
    out: list[range] = []
    for run in runs:
        _add(out, run)
    return out

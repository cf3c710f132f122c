"""Searching one segment for the first record at or after a timestamp (Kafka's
``LogSegment.findOffsetByTimestamp``, the per-segment step of ``offsetsForTimes``).

The time index narrows the search, the batch headers' max timestamps skip whole batches, and only
the batch that can hold the answer is decoded (through the log's :class:`BatchCache`). Damage never
answers: a contradicted index entry, a damaged batch or one whose offsets are damage are passed over.
"""

from __future__ import annotations

import numpy as np

from .batch_cache import BatchCache
from .compression import Compression
from .errors import CorruptRecordError
from .records import V2_HEADER_SIZE, BatchHeader, first_record_stamp
from .segment import LogSegment

__all__ = ["find_offset_by_timestamp"]


def find_offset_by_timestamp(
    segment: LogSegment, timestamp_ms: int, start_offset: int, cache: BatchCache
) -> int | None:
    """The offset of the first record of ``segment`` at or above ``start_offset`` (the log start
    offset) with timestamp >= ``timestamp_ms``, or None when the segment has none."""
    # Entries are (max timestamp so far, offset): below an entry < target no record can match.
    # Kafka looks up the target itself, which can skip an earlier record whose timestamp equals
    # it when timestamps go backwards; target - 1 keeps "first record >= target" exact.
    stamp, indexed_offset = segment.time_index.lookup(timestamp_ms - 1)
    if stamp >= 0 and not segment.time_entry_holds(stamp, indexed_offset):
        # A damaged entry could send the search past the answer: search from the segment start.
        wrong = f"entry ({stamp}, offset {indexed_offset}) does not match the .log"
        segment.index_contradicted(f"{segment.time_index_path}: {wrong}")
        indexed_offset = segment.base_offset
    start = max(indexed_offset, start_offset, segment.base_offset)
    try:
        header = segment.find_batch(start)
    except CorruptRecordError as exc:  # the search starts in a damaged batch: go on past it
        position = exc.position or 0
    else:
        if header is None:
            return None
        position = header.position
    # Headers only until a batch can hold the answer; only that batch is decoded (and cached).
    for batch in segment.iter_intact_headers(position):
        if batch.max_timestamp < timestamp_ms or batch.is_control:
            continue
        try:
            found = _first_at_or_after(segment, batch, timestamp_ms, start_offset, cache)
        except CorruptRecordError:
            continue  # a damaged batch answers nothing; the next intact one may
        # The answer must be an offset a read finds in this very batch: a batch whose offsets
        # are damage (a changed baseOffset) would name another record's offset.
        if found is not None and _located_in(segment, batch, found):
            return found
    return None


def _first_at_or_after(
    segment: LogSegment, batch: BatchHeader, timestamp_ms: int, start_offset: int, cache: BatchCache
) -> int | None:
    """The offset of the first record of ``batch`` with timestamp >= ``timestamp_ms``, or None."""
    if batch.magic >= 2 and batch.compression == Compression.NONE:
        # Often the batch's first record already qualifies (always so for a batch whose
        # records share one timestamp): a 32-byte read answers without decoding the batch.
        # Like Kafka's search, this reads no CRC; reading the record itself checks it.
        first = first_record_stamp(segment.read(batch.position + V2_HEADER_SIZE, 32), batch)
        if first is not None and first[1] >= timestamp_ms and first[0] >= start_offset:
            return first[0]
    columns = cache.columns(segment, batch)
    hits = np.flatnonzero((columns.timestamps >= timestamp_ms) & (columns.offsets >= start_offset))
    return int(columns.offsets[hits[0]]) if hits.size else None


def _located_in(segment: LogSegment, batch: BatchHeader, offset: int) -> bool:
    """Whether a lookup of ``offset`` lands on ``batch`` (False when it lands on damage)."""
    try:
        located = segment.find_batch(offset)
    except CorruptRecordError:
        return False
    return located is not None and located.position == batch.position

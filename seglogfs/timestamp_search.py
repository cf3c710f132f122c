"""Searching one segment for the first record at or after a timestamp (Kafka's
``LogSegment.findOffsetByTimestamp``, the per-segment step of ``offsetsForTimes``).

The time index narrows the search, the batch headers' max timestamps skip whole batches, and only
the batch that can hold the answer is decoded (through the log's :class:`BatchCache`). Damage never
answers: a contradicted index entry, a damaged batch or one whose offsets are damage are passed over.

Trusting the time index: an entry (T, O) claims that no record up to offset O has a timestamp above
T. The search skips what lies up to the entry *before* the one the binary search lands on, and
confirms that entry against the batch it names (the same header read that starts the walk). A damaged
entry that stays in order and names a real batch with its real max timestamp cannot be told from a
sound one by that batch; skipping only up to the previous entry makes any one such entry harmless:
if the previous entry is the damaged one, the entry found (sound) already vouches for everything up
to its own, later, offset.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from .batch_cache import BatchCache
from .compression import Compression
from .errors import CorruptRecordError
from .records import V2_HEADER_SIZE, BatchHeader, first_record_stamp
from .segment import LogSegment
from .segment_survey import follows

__all__ = ["find_offset_by_timestamp"]


def find_offset_by_timestamp(
    segment: LogSegment, timestamp_ms: int, start_offset: int, cache: BatchCache
) -> int | None:
    """The offset of the first record of ``segment`` at or above ``start_offset`` (the log start
    offset) with timestamp >= ``timestamp_ms``, or None when the segment has none."""
    # Entries are (max timestamp so far, offset): below an entry < target no record can match.
    # Kafka looks up the target itself, which can skip an earlier record whose timestamp equals
    # it when timestamps go backwards; target - 1 keeps "first record >= target" exact.
    (stamp, indexed_offset), _ = segment.time_index.lookup_with_previous(timestamp_ms - 1)
    header: BatchHeader | None = None
    if stamp >= 0:
        header = _batch_named(segment, stamp, indexed_offset)
        if header is None:
            # A damaged entry could send the search past the answer: search from the segment start.
            wrong = f"entry ({stamp}, offset {indexed_offset}) does not match the .log"
            segment.index_contradicted(f"{segment.time_index_path}: {wrong}")
        elif start_offset > header.last_offset:
            header = None
    if header is None:
        try:
            header = segment.find_batch(max(start_offset, segment.base_offset))
        except CorruptRecordError as exc:  # the search starts in a damaged batch: go on past it
            return _search(segment, None, exc.position or 0, timestamp_ms, start_offset, cache)
        if header is None:
            return None
    return _search(segment, header, header.position, timestamp_ms, start_offset, cache)


def _batch_named(segment: LogSegment, stamp: int, offset: int) -> BatchHeader | None:
    """The batch a time-index entry names when it ends at ``offset`` with max timestamp ``stamp``
    (what the entry claims), else None."""
    try:
        holder = segment.find_batch(offset)
    except CorruptRecordError:
        return None
    if holder is None or holder.last_offset != offset or holder.max_timestamp != stamp:
        return None
    return holder


def _search(
    segment: LogSegment,
    trusted: BatchHeader | None,
    position: int,
    timestamp_ms: int,
    start_offset: int,
    cache: BatchCache,
) -> int | None:
    """The batches from ``position`` (where ``trusted``, a batch found through the index, lies, if
    any; its header is not read again) until one can hold the answer; only that one is decoded (and
    cached)."""
    walk: Iterator[BatchHeader] = segment.iter_intact_headers(position)
    if trusted is not None:
        walk = itertools.chain((trusted,), segment.iter_intact_headers(trusted.end_position))
    previous: BatchHeader | None = None
    vouched = False  # the batch's offsets follow, batch after batch, from the trusted one's
    for batch in walk:
        if previous is None:
            vouched = batch is trusted
        else:
            vouched = vouched and batch.position == previous.end_position and follows(previous, batch)
        previous = batch
        if batch.max_timestamp < timestamp_ms or batch.is_control:
            continue
        try:
            found = _first_at_or_after(segment, batch, timestamp_ms, start_offset, cache)
        except CorruptRecordError:
            continue  # a damaged batch answers nothing; the next intact one may
        # The answer must be an offset a read finds in this very batch: a batch whose offsets
        # are damage (a changed baseOffset) would name another record's offset. A batch reached
        # through contiguous offsets from one the index vouched for needs no second look.
        if found is not None and (vouched or _located_in(segment, batch, found)):
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

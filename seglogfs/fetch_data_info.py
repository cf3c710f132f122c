"""What a fetch reads from a log (Kafka's ``FetchDataInfo``): a byte range of one segment file holding
whole batches from the one with the fetch offset on, located with bounded work (the batch lookup, an
offset-index search and a walk over at most ``index.interval.bytes`` and one batch of headers), so a
caller can send the bytes straight from the file (``sendfile``) or read them."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import CorruptRecordError, OffsetOutOfRangeError
from .log import Log
from .segment import LogSegment

__all__ = ["FetchDataInfo", "FileSlice", "read_fetch_data"]


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``size`` bytes at ``position`` of ``segment``'s .log: whole batches (Kafka's FileRecords slice)."""

    segment: LogSegment | None
    position: int
    size: int

    def read(self) -> bytes:
        """The bytes (CorruptRecordError when the file is now shorter than the segment)."""
        if self.segment is None or self.size == 0:
            return b""
        return self.segment.read(self.position, self.size)

    def open(self) -> int:
        """A descriptor of the file the caller owns and closes: it stays the same file whatever
        retention or the cleaner do meanwhile (FileNotFoundError once its segment was purged,
        CorruptRecordError when the file no longer holds the slice: cut under the process), with a
        file position of its own at 0 (the segment's descriptors are duplicates sharing one: a caller
        that reads from the position, as asyncio's sendfile fallback does, must not move others')."""
        if self.segment is None:
            raise ValueError("an empty slice has no file")
        fd = self.segment.open_reader_fd()
        if _PROC_FD:  # without /proc the duplicate it is, sharing the position
            shared = fd
            try:
                fd = os.open(f"/proc/self/fd/{shared}", os.O_RDONLY | os.O_CLOEXEC)
            finally:
                os.close(shared)
        ends = os.fstat(fd).st_size
        if ends < self.position + self.size:  # as read() finds it: a sender would stop short mid-frame
            os.close(fd)
            raise CorruptRecordError(
                f"the file ends at position {ends}, before the {self.position + self.size} bytes of a "
                "fetch (cut while open)", self.segment.log_path, ends,
            )
        return fd


EMPTY = FileSlice(None, 0, 0)
_PROC_FD = os.path.isdir("/proc/self/fd")


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """One partition's answer to a fetch."""

    records: FileSlice
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...] | None  # (producer id, first offset); None: read_uncommitted


def read_fetch_data(
    log: Log, offset: int, max_bytes: int, *, read_committed: bool, min_one_batch: bool = True
) -> FetchDataInfo:
    """The batches of ``log`` from ``offset`` on that fit ``max_bytes``, in one segment, below the high
    watermark (under ``read_committed`` below the last stable offset). OffsetOutOfRangeError when
    ``offset`` is outside [log start, log end]. ``min_one_batch``: the first batch even when larger
    than ``max_bytes`` (Kafka gives it to the first partition with data in a response only)."""
    start, end = log.start_offset, log.end_offset
    if not start <= offset <= end:
        raise OffsetOutOfRangeError(f"offset {offset} is outside log {log.name} [{start}, {end}]")
    empty = FetchDataInfo(EMPTY, end, log.last_stable_offset, start, () if read_committed else None)
    if offset >= (empty.last_stable_offset if read_committed else end):
        return empty
    try:
        segment, first = log.lookup(offset)
    except OffsetOutOfRangeError:
        if log.start_offset <= offset:  # an append moved the end offset first: its batch comes next
            return empty
        raise
    if first.size > max_bytes and not min_one_batch:
        return empty
    # The segment's published size before the end offset: a log moves its end offset first, so every
    # batch below ``stop`` is below ``end`` (no record past the high watermark is sent).
    stop = segment.size
    end, lso = log.end_offset, log.last_stable_offset
    limit = lso if read_committed else end
    if limit < end:  # read_committed with an open transaction: stop at the batch holding the LSO
        at_limit = segment.find_batch(limit)
        if at_limit is not None:
            stop = min(stop, at_limit.position)
    want = first.position + max(max_bytes, first.size if min_one_batch else 0)
    cut, next_offset = (stop, limit) if want >= stop else _last_whole_batch(segment, first.position, want)
    aborted: tuple[tuple[int, int], ...] | None = () if read_committed else None
    if cut <= first.position:
        return FetchDataInfo(EMPTY, end, lso, start, aborted)
    if read_committed and log.has_aborted_transactions():  # cached: no .txnindex read
        found = log.aborted_transactions(offset, max(next_offset, offset + 1))
        aborted = tuple((txn.producer_id, txn.first_offset) for txn in found)
    return FetchDataInfo(FileSlice(segment, first.position, cut - first.position), end, lso, start, aborted)


def _last_whole_batch(segment: LogSegment, first: int, want: int) -> tuple[int, int]:
    """(end position, next offset) of the last batch from ``first`` on that ends at or before ``want``:
    a walk of headers from the offset index's last entry at or before ``want``."""
    position = max(segment.offset_index.position_floor(want), first)
    next_offset = -1
    for header in segment.iter_headers(position):
        if header.position + header.size > want:
            return position, header.base_offset if next_offset < 0 else next_offset
        position, next_offset = header.position + header.size, header.last_offset + 1
    return position, next_offset


"""What one Fetch partition returns: a byte range of one segment file, whole batches from the one
holding the fetch offset on, as many as fit the partition's byte limit (the first always whole, as
Kafka returns it however large), under ``read_committed`` only below the last stable offset."""

from __future__ import annotations

from dataclasses import dataclass

from seglogfs.errors import OffsetOutOfRangeError
from seglogfs.log import Log
from seglogfs.records import iter_batch_headers

__all__ = ["PartitionRead", "read_partition"]


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """A partition's answer to one fetch."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...] | None  # (producer id, first offset); None: read_uncommitted


def read_partition(
    log_obj: Log, offset: int, max_bytes: int, *, read_committed: bool, whole_first: bool = True
) -> PartitionRead:
    """The batches of ``log_obj`` from ``offset`` on; OffsetOutOfRangeError when ``offset`` is
    outside [log start, log end]. ``whole_first``: return the first batch even past ``max_bytes``
    (Kafka does so for the first partition with data in a response only)."""
    start, end = log_obj.start_offset, log_obj.end_offset
    lso = log_obj.last_stable_offset
    limit = lso if read_committed else end
    aborted: tuple[tuple[int, int], ...] | None = () if read_committed else None
    if not start <= offset <= end:
        raise OffsetOutOfRangeError(f"offset {offset} is outside log {log_obj.name} [{start}, {end}]")
    if offset >= limit:
        return PartitionRead(b"", end, lso, start, aborted)
    segment, header = log_obj.lookup(offset)
    if header.size > max_bytes and not whole_first:
        return PartitionRead(b"", end, lso, start, aborted)
    size = max(max_bytes, header.size)
    data = segment.read(header.position, size)
    cut, last = 0, offset
    for batch in iter_batch_headers(data):
        if batch.base_offset >= limit:
            break
        cut, last = batch.end_position, batch.last_offset
    if read_committed and cut and log_obj.has_aborted_transactions():  # cached: no .txnindex read
        aborted = tuple(
            (txn.producer_id, txn.first_offset) for txn in log_obj.aborted_transactions(offset, last + 1)
        )
    return PartitionRead(data[:cut] if cut < len(data) else data, end, lso, start, aborted)

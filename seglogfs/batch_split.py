"""Splitting one write into record batches that each fit ``max.message.bytes``, by exact encoded size.

Kafka's producer batches records before they reach the broker; here the engine does it for callers
that hand over more records than one batch may hold (the mount's ``append`` files, the Spark writer):
each batch is as long as fits, judged by its exact encoded (compressed) size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from .compression import Compression
from .errors import RecordTooLargeError
from .records import (
    V2_HEADER_SIZE,
    ProducerRecord,
    TimestampType,
    encode_batch,
    encode_values,
    single_value_batch_size,
)

__all__ = ["BatchEncoder", "batch_encoder", "largest_single_value", "split_into_batches"]

#: ``encode(start, end, base_offset)``: the batch of ``items[start:end]``, its first offset ``base_offset``
BatchEncoder = Callable[[int, int, int], bytes]


def batch_encoder(
    items: Sequence[ProducerRecord] | Sequence[bytes],
    now_ms: int,
    compression: Compression,
    timestamp_type: TimestampType,
) -> BatchEncoder:
    """The encoder of slices of ``items``: ``bytes`` items are key-less values sharing the timestamp
    ``now_ms``; :class:`ProducerRecord` items keep keys, headers and timestamps."""
    if isinstance(items[0], bytes | bytearray | memoryview):
        values = cast("Sequence[bytes]", items)
        return lambda start, end, base: encode_values(
            values[start:end], base, now_ms, compression=compression, timestamp_type=timestamp_type
        )
    records = cast("Sequence[ProducerRecord]", items)
    return lambda start, end, base: encode_batch(
        records[start:end], base, now_ms=now_ms, compression=compression, timestamp_type=timestamp_type
    )


def split_into_batches(
    encode: BatchEncoder, count: int, base_offset: int, limit: int, log_name: str
) -> list[tuple[bytes, int]]:
    """``(batch, record count)`` pairs covering items [0, count) in order, each batch at most ``limit``
    bytes: one batch when all fit. Every batch is encoded here, before anything is appended, so a
    record too large even alone raises :class:`RecordTooLargeError` (its ``index`` names it)."""
    planned: list[tuple[bytes, int]] = []
    start, base = 0, base_offset
    whole = encode(0, count, base)
    if len(whole) <= limit:
        planned.append((whole, count))
        start = count
    while start < count:
        end, batch = _longest_fitting(encode, start, count, base, limit, log_name)
        planned.append((batch, end - start))
        base += end - start
        start = end
    return planned


def _longest_fitting(
    encode: BatchEncoder, start: int, n: int, base: int, limit: int, log_name: str
) -> tuple[int, bytes]:
    """The largest ``end`` (> start) whose batch ``items[start:end]`` fits ``limit``, and that batch:
    grows the batch 1, 2, 4... records until one does not fit, then bisects the last step. Costs
    O(k log k) encoding for a batch of k records, however many items remain."""
    best = encode(start, start + 1, base)
    if len(best) > limit:
        raise RecordTooLargeError(
            f"record {start} (of {n}) alone makes a batch of {len(best)} bytes for log {log_name}, "
            f"over max.message.bytes={limit}",
            index=start,
        )
    good, step = start + 1, 1
    bad = n + 1  # the first end known not to fit (n + 1: none known)
    while good < n:
        probe = min(good + step, n)
        batch = encode(start, probe, base)
        if len(batch) > limit:
            bad = probe
            break
        good, best, step = probe, batch, step * 2
    while bad - good > 1 and good < n:
        probe = (good + bad) // 2
        batch = encode(start, probe, base)
        if len(batch) <= limit:
            good, best = probe, batch
        else:
            bad = probe
    return good, best


def largest_single_value(limit: int) -> int:
    """The largest value whose one-record batch (no key, no headers, uncompressed) is at most
    ``limit`` bytes, exactly; -1 when none is."""
    size = limit - V2_HEADER_SIZE - 7  # a record needs at least 7 bytes besides its value
    while size >= 0 and single_value_batch_size(size) > limit:
        size -= 1
    return max(size, -1)

"""What the log cleaner does to record batches: Kafka's ``MemoryRecords.filterTo`` with the
cleaner's record filter (docs/kafka-format.md section 6), a window of batches at a time, with numpy.

A v2 batch of user records keeps a record when it has a key, no later offset of that key is in the
offset map, and it has a value or is a tombstone still inside its delete horizon; a batch of an aborted
transaction keeps none, a transaction marker keeps its record until it may go
(:mod:`seglogfs.cleaner_transactions`). The surviving batch is then:

- the original bytes, when every record survives and no horizon must be set;
- rebuilt, Kafka's way: same baseOffset, lastOffsetDelta (so the batch's last offset, and the log end,
  never move), partitionLeaderEpoch, attributes, producer fields and codec; baseTimestamp is the
  delete horizon when the batch has one (set now on the first clean of a batch holding a tombstone:
  attribute bit 0x40, horizon = now + ``delete.retention.ms``; likewise for the marker of an empty
  transaction), else the first kept record's timestamp; maxTimestamp is the kept records' largest
  (LogAppendTime: the original);
- when no record survives: dropped, except a batch that must stay as an empty header (no records,
  Kafka's ``RETAIN_EMPTY``, producer fields kept): its producer's last batch, and the last batch of
  each source segment (so that a cleaned segment ends at the same offset as the segments it
  replaces).

Legacy (v0/v1) batches are copied untouched (see ``seglogfs.cleaner``). Their records may be older
versions of a tombstone's key that the cleaner never removes: a tombstone after such a batch stays past
its delete horizon (dropping it would bring the untouched record back as the key's latest).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

from .cleaner_transactions import CleanerTransactions
from .compression import Compression, compress
from .errors import CorruptRecordError
from .offset_map import OffsetMap
from .producer_state import end_txn_marker
from .records import V2_HEADER_SIZE, BatchHeader, TimestampType, _scan, records_area, validate_batch
from .records.scan import (
    END,
    KEY_LENGTH,
    KEY_START,
    MIN_RECORD_SIZE,
    OFFSET_DELTA,
    ROWS,
    START,
    TS_DELTA,
    VALUE_LENGTH,
    scan_area,
)
from .records.types import Where

__all__ = [
    "BatchFates",
    "CleanedBatch",
    "FilterStats",
    "Window",
    "WindowLimits",
    "batch_fates",
    "compactable",
    "filter_window",
    "make_window",
    "scan_window",
    "window_digests",
]

log = logging.getLogger("seglogfs.cleaner")

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_AT, _CRC_FROM = 17, 21
_DELETE_HORIZON = 0x40
_KEEP_FLAGS = 0x08 | 0x10 | 0x20  # timestamp type, transactional, control: what an empty header keeps
_CODEC = 0x07
_LONG_MAX = 2**63 - 1  # a delete horizon saturates here (delete.retention.ms may be Long.MAX_VALUE)
# Base offsets records_area accepts without a check of its own (2**31 from either end of int64).
_PLAIN_BASE_OFFSETS = (-(1 << 63) + (1 << 31), (1 << 63) - (1 << 31))


def compactable(header: BatchHeader) -> bool:
    """Whether the cleaner filters this batch's records (every v2 batch; legacy ones are untouched)."""
    return header.magic >= 2


@dataclass(slots=True)
class FilterStats:
    """What a clean read and wrote."""

    records_read: int = 0
    records_kept: int = 0
    batches_read: int = 0
    batches_kept: int = 0
    #: batches written otherwise than read (records dropped, a delete horizon set, emptied)
    batches_rewritten: int = 0
    #: a batch that may hold user records the cleaner leaves untouched (legacy) was
    #: read, in this clean's recopy so far: every tombstone after it stays past its delete horizon
    untouched_records: bool = False


@dataclass(frozen=True, slots=True)
class CleanedBatch:
    """One output batch: its bytes, last offset and max timestamp (what a segment append needs)."""

    data: bytes | memoryview
    last_offset: int
    max_timestamp: int
    records_count: int = 0


@dataclass(slots=True)
class Window:
    """Consecutive batches of one segment read with one read: ``chunk`` holds them from file position
    ``position`` on, followed by 8 spare bytes (the digests read keys a word at a time). ``areas``:
    each compactable batch's records (decompressed when compressed), None for the others (legacy)."""

    chunk: bytearray
    position: int
    headers: list[BatchHeader]
    last: bool  # the window ends its segment
    areas: list[bytes | memoryview | None]

    def data(self, header: BatchHeader) -> memoryview:
        """The bytes of one of the window's batches (no copy)."""
        local = header.position - self.position
        return memoryview(self.chunk)[local : local + header.size]


@dataclass(slots=True)
class ScannedWindow:
    """The user records of a window's compactable batches, as columns over one buffer."""

    buffer: bytes | bytearray  # ends with 8 spare bytes
    areas: list[bytes | memoryview | None]  # per batch (None: copied untouched)
    scanned: np.ndarray  # scan_area's rows of every compacted batch, one (ROWS, count) block after another
    firsts: np.ndarray  # per batch: the index of its first record (its block: scanned[ROWS * first:])
    counts: np.ndarray  # per batch: its records (0 for a batch copied untouched)
    record_batch: np.ndarray  # the batch of each record
    offsets: np.ndarray
    key_starts: np.ndarray  # within ``buffer``
    key_lengths: np.ndarray  # -1: no key
    value_lengths: np.ndarray  # -1: a tombstone

    def fields(self, i: int) -> np.ndarray:
        """scan_area's rows of batch ``i`` (a view)."""
        first, count = int(self.firsts[i]), int(self.counts[i])
        return self.scanned[ROWS * first : ROWS * (first + count)].reshape(ROWS, count)


@dataclass(frozen=True, slots=True)
class WindowLimits:
    """What one window may hold at most (besides its bytes): the cleaner's working memory grows with
    its records (numpy columns), its batches (an object or two each) and its decompressed bytes. A
    window holds at least one batch, whatever these say."""

    records: int
    batches: int
    area_bytes: int


def make_window(
    chunk: bytearray,
    position: int,
    headers: list[BatchHeader],
    path: Where,
    limits: WindowLimits,
    previous_last: int | None = None,
) -> Window:
    """The window of the first of ``headers`` (read into ``chunk`` from file ``position``) that fit
    ``limits``; the compactable batches' records are decompressed here, one batch at a time, so that
    a window stops before its decompressed records pass ``limits.area_bytes``. Offsets must strictly
    increase from ``previous_last`` (the last offset before the window, in its segment) on: a
    baseOffset outside the CRC that overlaps the batch before is damage (CorruptRecordError), never
    mapped nor copied under wrong offsets."""
    areas: list[bytes | memoryview | None] = []
    records = area_bytes = 0
    view = memoryview(chunk)
    last = -1 if previous_last is None else previous_last
    for header in headers:
        count = max(header.records_count, 0)
        if areas and (len(areas) >= limits.batches or records + count > limits.records):
            break
        first = header.base_offset if header.magic >= 2 else header.last_offset
        if first <= last:
            raise CorruptRecordError(
                f"damaged batch: offsets from {first} overlap the batch before's (up to {last})",
                path,
                header.position,
            )
        last = header.last_offset
        local = header.position - position
        end = local + header.size
        attributes = header.attributes
        # The common case inline (a CRC-32C call and a slice: single-record batches spend their time
        # here); validate_batch and records_area for anything else, and to word the error.
        legacy = header.magic < 2
        if legacy or header.records_count < 0 or crc32c(view[local + _CRC_FROM : end]) != header.crc:
            try:
                validate_batch(view, header.at(local), path=path)
            except CorruptRecordError as exc:
                raise exc.at(path, position) from None
        if legacy:
            areas.append(None)
            continue
        if attributes & _CODEC or not _PLAIN_BASE_OFFSETS[0] <= header.base_offset <= _PLAIN_BASE_OFFSETS[1]:
            try:
                area = records_area(chunk, header.at(local), path)
            except CorruptRecordError as exc:
                raise exc.at(path, position) from None
        else:
            area = view[local + V2_HEADER_SIZE : end]
        if attributes & _CODEC:
            if areas and area_bytes + len(area) > limits.area_bytes:
                break
            area_bytes += len(area)
        areas.append(area)
        records += count
    return Window(chunk, position, headers[: len(areas)], last=False, areas=areas)


def scan_window(window: Window, path: Where) -> ScannedWindow:
    """Parse the records of every compactable batch of the window (CRC-checked by the caller) into
    one array, a C call a batch. Uncompressed records are read where they lie in the window's chunk;
    decompressed ones are appended after it."""
    headers, areas = window.headers, window.areas
    counts = np.array(
        [0 if a is None else h.records_count for h, a in zip(headers, areas, strict=True)], np.int64
    )
    firsts = np.cumsum(counts) - counts
    scanned = np.empty(ROWS * int(counts.sum()), dtype=np.int64)
    blocks = scanned.data  # a memoryview of it
    bases = np.zeros(len(headers), dtype=np.int64)  # where each batch's records lie in ``buffer``
    extra: list[bytes | memoryview] = []
    extra_size = len(window.chunk)
    for i, area in enumerate(areas):
        if area is None:
            continue
        header = headers[i]
        if header.attributes & _CODEC:
            bases[i] = extra_size
            extra.append(area)
            extra_size += len(area)
        else:
            bases[i] = header.position - window.position + V2_HEADER_SIZE
        count, at = header.records_count, ROWS * int(firsts[i])
        _scan_into(area, count, blocks[at : at + ROWS * count], path, header.position)
    buffer: bytes | bytearray = window.chunk
    if extra:
        buffer = bytes(window.chunk) + b"".join(extra) + bytes(8)
    record_batch = np.repeat(np.arange(len(headers), dtype=np.int64), counts)
    base_offsets = np.array([h.base_offset for h in headers], dtype=np.int64)
    row = _row_reader(scanned, counts, firsts, record_batch)
    return ScannedWindow(
        buffer=buffer,
        areas=areas,
        scanned=scanned,
        firsts=firsts,
        counts=counts,
        record_batch=record_batch,
        offsets=base_offsets[record_batch] + row(OFFSET_DELTA),
        key_starts=bases[record_batch] + row(KEY_START),
        key_lengths=row(KEY_LENGTH),
        value_lengths=row(VALUE_LENGTH),
    )


def _row_reader(
    scanned: np.ndarray, counts: np.ndarray, firsts: np.ndarray, record_batch: np.ndarray
) -> Callable[[int], np.ndarray]:
    """A function giving one of scan_area's rows for every record of the window's blocks."""
    if len(counts) and counts[0] > 0 and (counts == counts[0]).all():  # batches of one size: a 3-D view
        blocks = scanned.reshape(len(counts), ROWS, int(counts[0]))
        return lambda field: blocks[:, field, :].ravel()
    at = ROWS * firsts[record_batch] + np.arange(len(record_batch), dtype=np.int64) - firsts[record_batch]
    stride = counts[record_batch]
    return lambda field: scanned[at + field * stride]


def _scan_into(area: bytes | memoryview, count: int, out: memoryview, path: Where, position: int) -> None:
    """scan_area's rows of one batch, written into ``out``. The C scanner is called directly (a
    batch of one record costs a microsecond, not five); anything amiss goes through scan_area, which
    words the error."""
    try:
        fine = count <= len(area) // MIN_RECORD_SIZE and _scan.scan(area, count, out) == len(area)
    except ValueError:  # MalformedRecords, or a count the C side refuses
        fine = False
    if not fine:
        scan_area(area, count, path, position)
        raise AssertionError("scan_area accepted records the C scanner refused")


def window_digests(window: ScannedWindow, offset_map: OffsetMap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices of the keyed records, digest lanes of their keys)."""
    keyed = np.flatnonzero(window.key_lengths >= 0)
    starts, lengths = window.key_starts[keyed], window.key_lengths[keyed]
    h1, h2 = offset_map.digests(window.buffer, starts, lengths, padded=True)
    return keyed, h1, h2


def filter_window(
    source: Window,
    offset_map: OffsetMap,
    *,
    now_ms: int,
    delete_retention_ms: int,
    stats: FilterStats,
    path: Where,
    max_batch_bytes: int = 2**31 - 1,
    txns: CleanerTransactions | None = None,
) -> list[CleanedBatch]:
    """The window's batches as the cleaner writes them (see the module docstring), in order; ``txns``
    is the pass's transaction state (None: every batch is outside transactions and no producer's
    last). The last batch of a window that ends its segment is kept, if only as an empty header. No
    rebuilt batch is larger than both ``max_batch_bytes`` (max.message.bytes) and its source (see
    :func:`_within_limit`)."""
    window = scan_window(source, path)
    headers = source.headers
    fate = batch_fates(source, txns or CleanerTransactions([]), now_ms)
    keep, kept_counts, needs_horizon, stays = _survivors(
        window, headers, offset_map, now_ms, source.last, stats, fate
    )
    stats.batches_read += len(headers)
    stats.records_read += int(window.counts.sum())
    out: list[CleanedBatch] = []
    for i in np.flatnonzero(stays).tolist():
        header = headers[i]
        kept = int(kept_counts[i])
        area = window.areas[i]
        if area is None or (kept == header.records_count and not needs_horizon[i]):
            out.append(CleanedBatch(source.data(header), header.last_offset, header.max_timestamp))
            stats.records_kept += kept
            stats.batches_kept += 1
            continue
        stats.batches_rewritten += 1
        if kept:
            first = int(window.firsts[i])
            rows = np.flatnonzero(keep[first : first + header.records_count])
            horizon = min(now_ms + delete_retention_ms, _LONG_MAX) if needs_horizon[i] else None
            rebuilt = _rebuilt(header, area, window.fields(i), rows, horizon)
            if len(rebuilt.data) > max(max_batch_bytes, header.size):
                data = source.data(header)
                rebuilt = _within_limit(header, data, area, window.fields(i), rows, max_batch_bytes, path)
                kept = rebuilt.records_count
            out.append(rebuilt)
        else:
            out.append(_empty_header(header))
        stats.records_kept += kept
        stats.batches_kept += 1
    return out


@dataclass(slots=True)
class BatchFates:
    """What the transaction rules (:mod:`seglogfs.cleaner_transactions`) decide for each batch of a
    window, as arrays over its batches."""

    control: np.ndarray  # a control batch: its records are not keyed records
    discard: np.ndarray  # every record goes (an aborted transaction's, a marker past its horizon)
    marker_horizon: np.ndarray  # a marker that may go once a delete horizon it does not have yet passed
    retain_empty: np.ndarray  # its producer's last batch: it stays, if only as an empty header


def batch_fates(source: Window, txns: CleanerTransactions, now_ms: int) -> BatchFates:
    """Run the window's batches through ``txns``, in order (a plain window costs a scan of its
    attributes and producer ids)."""
    headers = source.headers
    n = len(headers)
    fates = BatchFates(*(np.zeros(n, dtype=bool) for _ in range(4)))
    if not any(h.producer_id >= 0 or h.attributes & 0x30 for h in headers):
        return fates
    for i, header in enumerate(headers):
        if source.areas[i] is None:
            continue  # legacy: untouched
        if header.is_control:
            fates.control[i] = True
            empty = header.records_count == 0
            try:
                marker = None if empty else end_txn_marker(header, source.data(header))
            except CorruptRecordError:
                marker = None  # not a marker this clean can read: kept as it is, as other control types
            if txns.control_batch(header, marker, empty=empty):
                if header.has_delete_horizon:
                    fates.discard[i] = header.base_timestamp <= now_ms
                else:
                    fates.marker_horizon[i] = True
        else:
            fates.discard[i] = txns.data_batch(header)
        fates.retain_empty[i] = txns.is_last_of_producer(header)
    return fates


def _survivors(
    window: ScannedWindow,
    headers: list[BatchHeader],
    offset_map: OffsetMap,
    now_ms: int,
    last: bool,
    stats: FilterStats,
    fate: BatchFates,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(each record kept?, each batch's kept records, each batch needs a delete horizon?, each batch
    stays?). Only the batches that stay are visited one by one: a batch that loses every record it
    had, is not its producer's last and does not end its segment (``last``) is simply gone. A
    tombstone after an untouched batch of user records (``stats.untouched_records``, updated here)
    stays."""
    keyed, h1, h2 = window_digests(window, offset_map)
    keep = np.zeros(len(window.offsets), dtype=bool)
    keep[keyed] = window.offsets[keyed] >= offset_map.get(h1, h2)
    untouched = np.array(
        [
            a is None and not h.is_control and h.records_count != 0
            for h, a in zip(headers, window.areas, strict=True)
        ],
        dtype=bool,
    )
    shadowed = np.logical_or.accumulate(untouched) | stats.untouched_records
    stats.untouched_records = bool(shadowed[-1]) if len(shadowed) else stats.untouched_records
    horizon_open = shadowed | np.array(
        [not h.attributes & _DELETE_HORIZON or now_ms < h.base_timestamp for h in headers], dtype=bool
    )
    tombstone = window.value_lengths < 0
    keep &= ~tombstone | horizon_open[window.record_batch]
    if fate.control.any():
        keep |= fate.control[window.record_batch]
        tombstone &= ~fate.control[window.record_batch]
    keep &= ~fate.discard[window.record_batch]
    n = len(headers)
    kept_counts = np.bincount(window.record_batch[keep], minlength=n)
    kept_tombstones = np.bincount(window.record_batch[keep & tombstone], minlength=n)
    compacted = np.array([a is not None for a in window.areas], dtype=bool)
    # An empty batch is copied as it is, unless it may go.
    stays = ~compacted | (kept_counts > 0) | ((window.counts == 0) & ~fate.discard & ~fate.marker_horizon)
    stays |= fate.retain_empty
    if last:
        stays[-1] = True
    has_horizon = np.array([bool(h.attributes & _DELETE_HORIZON) for h in headers], dtype=bool)
    needs_horizon = ((kept_tombstones > 0) | fate.marker_horizon) & ~has_horizon
    return keep, kept_counts, needs_horizon, stays


def _within_limit(
    header: BatchHeader,
    data: memoryview,
    area: bytes | memoryview,
    fields: np.ndarray,
    rows: np.ndarray,
    limit: int,
    path: Where,
) -> CleanedBatch:
    """A batch whose rebuild grew past max.message.bytes (a new delete horizon becomes baseTimestamp,
    and every record's timestampDelta then takes ~5 bytes instead of 1; Kafka only warns). Rebuilt
    without a new horizon when that fits (its tombstones stay until a later clean can set one), else
    copied as it is: keeping a superseded record is allowed, losing one or writing a batch readers
    may refuse is not."""
    batch = CleanedBatch(data, header.last_offset, header.max_timestamp, header.records_count)
    how = "copied unchanged"
    if len(rows) < header.records_count:
        plain = _rebuilt(header, area, fields, rows, None)
        if len(plain.data) <= max(limit, header.size):
            batch, how = plain, "rebuilt without a delete horizon"
    log.warning(
        "%s: the cleaned batch at offset %d would exceed max.message.bytes=%d: %s (its tombstones "
        "stay until a clean can set their delete horizon)",
        path, header.base_offset, limit, how,
    )  # fmt: skip
    return batch


# ---------------------------------------------------------------------------------------------
# Rebuilding a batch


def _zigzag(values: np.ndarray) -> np.ndarray:
    return ((values << 1) ^ (values >> 63)).astype(np.uint64)


def _varint_sizes(zz: np.ndarray) -> np.ndarray:
    sizes = np.ones(len(zz), dtype=np.int64)
    for k in range(1, 10):
        sizes += zz >= np.uint64(1 << (7 * k))
    return sizes


def _put_varints(out: np.ndarray, at: np.ndarray, zz: np.ndarray, sizes: np.ndarray) -> None:
    for k in range(int(sizes.max()) if len(sizes) else 0):
        rows = np.flatnonzero(sizes > k)
        part = (zz[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = np.where(sizes[rows] > k + 1, 0x80, 0).astype(np.uint64)
        out[at[rows] + k] = (part | more).astype(np.uint8)


def _copy_spans(
    out: np.ndarray, dest: np.ndarray, src: np.ndarray, lengths: np.ndarray, area: np.ndarray
) -> None:
    """out[dest[i] : dest[i] + lengths[i]] = area[src[i] : src[i] + lengths[i]] for every i."""
    total = int(lengths.sum())
    if total == 0:
        return
    starts = np.cumsum(lengths) - lengths
    step = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    out[np.repeat(dest, lengths) + step] = area[np.repeat(src, lengths) + step]


def _rebuilt(
    header: BatchHeader, area: bytes | memoryview, fields: np.ndarray, rows: np.ndarray, horizon: int | None
) -> CleanedBatch:
    """The batch with only ``rows`` of its records (Kafka's buildRetainedRecordsInto)."""
    src = np.frombuffer(area, dtype=np.uint8)
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    if horizon is None and header.has_delete_horizon:
        horizon = header.base_timestamp
    stamps = (
        np.full(len(rows), header.max_timestamp, dtype=np.int64)
        if log_append
        else header.base_timestamp + fields[TS_DELTA][rows]
    )
    base_timestamp = horizon if horizon is not None else int(stamps[0])
    starts, ends = fields[START][rows], fields[END][rows]
    old_deltas = fields[TS_DELTA][rows]
    # Each record: length varint, attributes byte, timestamp delta varint, then the rest unchanged.
    total = ends - starts
    length_sizes = np.ones(len(rows), dtype=np.int64)
    for k in range(2, 6):  # the length prefix is the size k for which total - k needs k bytes
        length_sizes = np.where(_varint_sizes(_zigzag(total - k)) == k, k, length_sizes)
    tails = starts + length_sizes + 1 + _varint_sizes(_zigzag(old_deltas))
    tail_lengths = ends - tails
    new_zz = _zigzag(stamps - base_timestamp)
    new_sizes = _varint_sizes(new_zz)
    body = 1 + new_sizes + tail_lengths
    body_zz = _zigzag(body)
    body_sizes = _varint_sizes(body_zz)
    record_sizes = body_sizes + body
    at = np.cumsum(record_sizes) - record_sizes
    out = np.zeros(int(record_sizes.sum()), dtype=np.uint8)
    _put_varints(out, at, body_zz, body_sizes)
    out[at + body_sizes] = src[starts + length_sizes]  # attributes
    _put_varints(out, at + body_sizes + 1, new_zz, new_sizes)
    _copy_spans(out, at + body_sizes + 1 + new_sizes, tails, tail_lengths, src)
    records = out.tobytes()
    if header.compression != Compression.NONE:
        records = compress(Compression(header.compression), records)
    max_timestamp = header.max_timestamp if log_append else int(stamps.max())
    attributes = header.attributes | (_DELETE_HORIZON if horizon is not None else 0)
    head = _header(header, len(records), attributes, base_timestamp, max_timestamp, len(rows))
    return CleanedBatch(_with_crc(head, records), header.last_offset, max_timestamp, len(rows))


def _empty_header(header: BatchHeader) -> CleanedBatch:
    """Kafka's writeEmptyHeader: the batch's offsets and producer fields with no records."""
    attributes = header.attributes & _KEEP_FLAGS
    ts = header.max_timestamp
    head = _header(header, 0, attributes, ts, ts, 0)
    return CleanedBatch(_with_crc(head, b""), header.last_offset, ts)


def _header(
    header: BatchHeader, records_size: int, attributes: int, base_ts: int, max_ts: int, count: int
) -> bytearray:
    out = bytearray(V2_HEADER_SIZE)
    _HEADER.pack_into(
        out,
        0,
        header.base_offset,
        V2_HEADER_SIZE - 12 + records_size,
        header.leader_epoch,
        2,
        0,
        attributes,
        header.last_offset - header.base_offset,
        base_ts,
        max_ts,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    return out


def _with_crc(head: bytearray, records: bytes) -> bytes:
    struct.pack_into(">I", head, _CRC_AT, crc32c(records, crc32c(memoryview(head)[_CRC_FROM:])))
    return bytes(head) + records

"""Log compaction: one clean of one log, as Kafka's ``LogCleaner.Cleaner`` does it
(docs/kafka-format.md section 6).

A clean has two passes over the files:

1. **The offset map** over the dirty section ``[first dirty offset, first uncleanable offset)``: each
   key's latest offset (:class:`~seglogfs.offset_map.OffsetMap`). When the map fills up part-way, it
   covers a prefix; the clean then ends where the map stopped and the next clean goes on from there.
2. **The recopy** of every segment from the log start to the end of the mapped section, grouped into
   as few output segments as ``segment.bytes`` and ``segment.index.bytes`` allow (Kafka's
   ``groupSegmentsBySize``), keeping the records :mod:`seglogfs.cleaner_records` keeps. Each output
   segment replaces its group with the crash-safe swap of :mod:`seglogfs.segment_swap`.

Transactions (:mod:`seglogfs.cleaner_transactions`), in both passes: the records of aborted
transactions (the log's ``.txnindex`` entries say which) never enter the map and are dropped; committed
transactional records are deduplicated by key like any other; a transaction's marker goes once nothing
of its transaction is left and its delete horizon has passed; each producer's last batch stays.

Batches the cleaner never changes: legacy (v0/v1) entries (copied from an old broker); a tombstone
after such a batch stays past its delete horizon (dropping it would bring back an untouched older
record of its key). Records without a key are dropped, as Kafka's cleaner does (a compacted log refuses
them at append).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .cleaner_records import (
    CleanedBatch,
    FilterStats,
    Window,
    WindowLimits,
    batch_fates,
    filter_window,
    make_window,
    scan_window,
    window_digests,
)
from .cleaner_transactions import CleanerTransactions
from .errors import CorruptRecordError, SeglogError
from .log import Log
from .log_files import CLEANED_SUFFIX
from .log_segments import segment_index_for
from .offset_map import OffsetMap
from .records import iter_batch_headers
from .segment import LogSegment, pread_header
from .segment_swap import cleaned_files, crash_point, txn_index_path
from .transaction_index import AbortedTxn

__all__ = [
    "CleanAborted",
    "CleanRange",
    "CleanResult",
    "Cleaner",
    "cleanable_range",
    "group_segments_by_size",
]

log = logging.getLogger("seglogfs.cleaner")

_INT_MAX = 2**31 - 1
_NO_END = 2**63 - 1
_MIN_WINDOW = 4 << 20  # numpy works per window: fewer, larger calls
_SMALLEST_WINDOW = 64 << 10
# The working memory of one window, measured with tracemalloc (bench/compaction.py --shapes): numpy
# columns and digests of ~300 bytes a record, Python objects of ~1.5 KiB a batch, and the window's
# bytes about three times (read, decompressed, written). Windows are capped so that these stay in
# WINDOW_MEMORY_FACTOR x the window's bytes.
_BYTES_PER_RECORD = 128  # a window holds at most window_bytes / this many records
_BYTES_PER_BATCH = 1024  # ... and batches
WINDOW_MEMORY_FACTOR = 8


class CleanAborted(SeglogError):
    """The clean was stopped (the cleaner is shutting down); nothing of it was swapped in."""


@dataclass(frozen=True, slots=True)
class CleanRange:
    """What of a log is cleanable now (Kafka's ``LogToClean``)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    must_clean_now: bool  # past max.compaction.lag.ms

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanResult:
    """One clean of one log."""

    log: str
    first_dirty_offset: int
    end_offset: int  # the first offset the map did not cover: the next clean starts there
    map_full: bool
    segments_in: int = 0
    segments_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    records_read: int = 0
    records_kept: int = 0
    seconds: float = 0.0

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_kept


def cleanable_range(lg: Log, checkpoint: int | None, now_ms: int) -> CleanRange:
    """Kafka's ``cleanableOffsets`` and dirty byte counts: the dirty section starts at the checkpoint
    (the log start when it is missing or out of range) and ends before the active segment, before the
    segment holding the last stable offset (Kafka never cleans past it: a record after an open
    transaction, which a read_committed reader cannot see yet, must not supersede one before it) and
    before the first segment holding records newer than ``min.compaction.lag.ms``."""
    cfg, segments = lg.config, lg.segments
    start = lg.start_offset
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= lg.end_offset else start
    active = segments[-1]
    dirty = _sealed_overlapping(segments, first_dirty, _NO_END)
    unstable = segments[segment_index_for(lg.last_stable_offset, segments)]
    uncleanable = min(active.base_offset, unstable.base_offset)
    if cfg.min_compaction_lag_ms > 0:
        young = next((s for s in dirty if s.largest_timestamp() > now_ms - cfg.min_compaction_lag_ms), None)
        if young is not None:
            uncleanable = min(uncleanable, young.base_offset)
    first_dirty = min(first_dirty, uncleanable)
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty and s is not active)
    cleanable_bytes = sum(s.size for s in _sealed_overlapping(segments, first_dirty, uncleanable))
    first_stamps = [t for t in (s.rolling_based_timestamp for s in dirty) if t > 0]
    clean_until = now_ms - max(cfg.max_compaction_lag_ms, 0)
    must_clean_now = bool(first_stamps) and min(first_stamps) < clean_until
    return CleanRange(first_dirty, uncleanable, clean_bytes, cleanable_bytes, must_clean_now)


def _sealed_overlapping(segments: Sequence[LogSegment], lo: int, hi: int) -> list[LogSegment]:
    """The sealed segments (all but the last) whose offsets [base, next base) meet [lo, hi)."""
    return [
        s
        for s, following in itertools.pairwise(segments)
        if s.base_offset < hi and following.base_offset > lo
    ]


def group_segments_by_size(
    segments: Sequence[LogSegment], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[LogSegment]]:
    """Consecutive segments grouped into one output each, while the group's .log bytes fit
    ``segment.bytes``, its index entries fit ``segment.index.bytes`` and its offsets stay within
    Int.MAX of the group's base (Kafka's ``groupSegmentsBySize``)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size, time_index_size = _index_sizes(segments[i])
        i += 1
        while i < len(segments):
            candidate = segments[i]
            c_index, c_time = _index_sizes(candidate)
            following = segments[i + 1].base_offset if i + 1 < len(segments) else first_uncleanable_offset
            if not (
                log_size + candidate.size <= max_size
                and index_size + c_index <= max_index_size
                and time_index_size + c_time <= max_index_size
                and (candidate.size == 0 or following - 1 - group[0].base_offset <= _INT_MAX)
            ):
                break
            group.append(candidate)
            log_size += candidate.size
            index_size += c_index
            time_index_size += c_time
            i += 1
        groups.append(group)
    return groups


def _index_sizes(segment: LogSegment) -> tuple[int, int]:
    return segment.offset_index.entries * 8, segment.time_index.entries * 12


class Cleaner:
    """Cleans logs, one at a time, with its own offset map (one per cleaner thread, as in Kafka).

    ``memory`` is the thread's share of ``log.cleaner.dedupe.buffer.size``: the offset map AND the
    windows' working memory (:data:`WINDOW_MEMORY_FACTOR` x ``window_bytes``) fit in it. A window is
    about ``log.cleaner.io.buffer.size`` bytes, at least 4 MiB, at most 1/32 of ``memory``. A budget
    under twice the window's working memory cannot hold both (the tests force passes with maps of a
    few keys): the map then takes all of it and the window comes on top.

    ``throttle(n)`` is called with the bytes of every window read and written (the I/O limit);
    ``should_stop()`` between windows: True abandons the clean (:class:`CleanAborted`).
    """

    def __init__(
        self,
        memory: int,
        load_factor: float = 0.9,
        *,
        io_buffer_size: int = 512 * 1024,
        throttle: Callable[[int], None] = lambda n: None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.window_bytes = max(min(max(io_buffer_size, _MIN_WINDOW), memory // 32), _SMALLEST_WINDOW)
        self.window_limits = WindowLimits(
            records=self.window_bytes // _BYTES_PER_RECORD,
            batches=self.window_bytes // _BYTES_PER_BATCH,
            area_bytes=self.window_bytes,
        )
        self.window_memory = WINDOW_MEMORY_FACTOR * self.window_bytes
        fits = memory >= 2 * self.window_memory
        self.map_memory = memory - self.window_memory if fits else memory
        self.load_factor = load_factor
        self.throttle = throttle
        self.should_stop = should_stop
        self.peak_map_bytes = 0
        self._read_size = self.window_bytes
        self._untouched_records = False  # this clean's recopy met untouched user records (FilterStats)

    def clean(self, lg: Log, span: CleanRange, now_ms: int) -> CleanResult:
        """One clean of ``lg``'s dirty section ``span`` (see the module docstring)."""
        began = time.monotonic()
        start, upper = span.first_dirty_offset, span.first_uncleanable_offset
        dirty_segments = _sealed_overlapping(lg.segments, start, upper)
        # No bigger table than the dirty section can fill: it holds at most one record an offset (its
        # bytes are no bound: a compressed record may take less than a byte).
        offset_map = OffsetMap(
            self.map_memory, self.load_factor, table_slots=math.ceil((upper - start) / self.load_factor) + 64
        )
        self.peak_map_bytes = max(self.peak_map_bytes, offset_map.nbytes)
        map_txns = CleanerTransactions(lg.aborted_transactions(start, upper))
        full = self._build_offset_map(dirty_segments, offset_map, start, map_txns)
        self.peak_map_bytes = max(self.peak_map_bytes, offset_map.nbytes)  # it grew with the keys
        end = max(offset_map.latest_offset + 1, start)
        result = CleanResult(lg.name, start, end, full)
        self._untouched_records = False
        sources = [s for s in lg.segments[:-1] if s.base_offset < end]
        cfg = lg.config
        aborted = lg.aborted_transactions(lg.start_offset, upper)
        txns = CleanerTransactions(aborted, lg.last_batches_of_producers())
        for group in group_segments_by_size(sources, cfg.segment_bytes, cfg.segment_index_bytes, upper):
            if not self._clean_group(lg, group, offset_map, now_ms, result, txns):
                # Retention took some of the group meanwhile: what is left of it was not cleaned, and a
                # later group may drop a tombstone superseding a record of it (Kafka never runs the two
                # at once). The clean stops here and the checkpoint stays: the next maps it all again.
                log.info("cleaning log %s stopped at offset %d: retention removed segments meanwhile",
                         lg.name, group[0].base_offset)  # fmt: skip
                result.end_offset = start
                break
        result.seconds = time.monotonic() - began
        log.info(
            "cleaned log %s: offsets [%d, %d), %d segments -> %d, %d -> %d bytes, %d of %d records "
            "removed, %.3f s%s",
            lg.name, start, end, result.segments_in, result.segments_out, result.bytes_in, result.bytes_out,
            result.records_removed, result.records_read, result.seconds,
            "; the map filled up: the next clean goes on from there" if full else "",
        )  # fmt: skip
        return result

    # ------------------------------------------------------------------ the offset map

    def _build_offset_map(
        self, segments: Sequence[LogSegment], offset_map: OffsetMap, start: int, txns: CleanerTransactions
    ) -> bool:
        """Map the keys of ``segments`` from offset ``start`` on; True when the map filled up."""
        for segment in segments:
            located = segment.find_batch(start) if segment.base_offset < start else None
            position = located.position if located is not None else 0
            for window in self._windows(segment, position):
                if self._map_window(window, offset_map, start, segment, txns):
                    return True
        return False

    @staticmethod
    def _map_window(
        source: Window, offset_map: OffsetMap, start: int, segment: LogSegment, txns: CleanerTransactions
    ) -> bool:
        window = scan_window(source, segment.log_path)
        batches = source.headers
        keyed, h1, h2 = window_digests(window, offset_map)
        mapped = window.offsets[keyed] >= start
        fate = batch_fates(source, txns, 0)
        unmapped = fate.control | fate.discard  # markers and aborted records: no key of theirs counts
        if unmapped.any():
            mapped &= ~unmapped[window.record_batch[keyed]]
        keyed, h1, h2 = keyed[mapped], h1[mapped], h2[mapped]
        taken = offset_map.put_prefix(h1, h2, window.offsets[keyed])
        # Kafka: the map has seen a batch once all its records are in (or when it has no key to add).
        seen = len(batches) if taken == len(keyed) else int(window.record_batch[keyed[taken]])
        if seen:
            last = max(header.last_offset for header in batches[:seen])
            if last >= start:
                offset_map.update_latest_offset(last)
        return taken < len(keyed)

    # ------------------------------------------------------------------ the recopy

    def _clean_group(
        self,
        lg: Log,
        group: list[LogSegment],
        offset_map: OffsetMap,
        now_ms: int,
        result: CleanResult,
        txns: CleanerTransactions,
    ) -> bool:
        """Write the group's surviving batches as ``<base>.log.cleaned`` and swap it in. False when
        the group is no longer part of the log (retention deleted some of it): nothing changed."""
        base = group[0].base_offset
        bytes_in = sum(s.size for s in group)
        if bytes_in == 0:
            return True
        for stale in cleaned_files(lg.dir, base):
            stale.unlink()
        cfg = lg.config
        # Output is no larger than input: it needs at most one entry per index.interval.bytes of it.
        entries = bytes_in // max(cfg.index_interval_bytes, 1) + 2
        cleaned = LogSegment(
            lg.dir,
            base,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=min(cfg.segment_index_bytes, entries * 12),
            file_suffix=CLEANED_SUFFIX,
        )
        stats = FilterStats(untouched_records=self._untouched_records)
        try:
            for segment in group:
                for window in self._windows(segment, 0):
                    out = filter_window(
                        window,
                        offset_map,
                        now_ms=now_ms,
                        delete_retention_ms=cfg.delete_retention_ms,
                        max_batch_bytes=cfg.max_message_bytes,
                        stats=stats,
                        path=segment.log_path,
                        txns=txns,
                    )
                    self._append(cleaned, out)
            aborted = txns.take_index_entries()
            self._untouched_records = stats.untouched_records
            if len(group) == 1 and stats.batches_rewritten == 0 and stats.batches_kept == stats.batches_read:
                _discard(cleaned, lg, base)  # every batch copied as it was: the segment stays as it is
                result.bytes_in += bytes_in
                result.bytes_out += bytes_in
                result.records_read += stats.records_read
                result.records_kept += stats.records_kept
                return True
            self._finish(cleaned, group, aborted)
            crash_point(f"wrote {cleaned.log_path.name}")
            new = lg.replace_segments(group, base, now_ms)
        except BaseException:
            _discard(cleaned, lg, base)
            raise
        if new is None:  # retention took some of the group meanwhile: this group's clean is void
            _discard(cleaned, lg, base)
            return False
        result.segments_in += len(group)
        result.segments_out += 1
        result.bytes_in += bytes_in
        result.bytes_out += new.size
        result.records_read += stats.records_read
        result.records_kept += stats.records_kept
        return True

    def _append(self, cleaned: LogSegment, out: list[CleanedBatch]) -> None:
        if out:
            cleaned.append_batches([(b.data, b.last_offset, b.max_timestamp) for b in out])
            self.throttle(sum(len(b.data) for b in out))
            crash_point(f"appended to {cleaned.log_path.name}")

    @staticmethod
    def _finish(cleaned: LogSegment, group: Sequence[LogSegment], aborted: Sequence[AbortedTxn]) -> None:
        """Seal the cleaned segment: final time entry, trimmed indexes, the aborted-transaction index
        of the ABORT markers kept with their transactions' batches (entries hold absolute offsets),
        the last source's mtime (time retention falls back on it), everything fsync'd."""
        cleaned.on_become_inactive()
        txn = b"".join(entry.to_bytes() for entry in aborted)
        if txn:
            fd = os.open(txn_index_path(cleaned), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, txn)
                os.fsync(fd)
            finally:
                os.close(fd)
        cleaned.flush()
        stat = os.stat(group[-1].log_path)
        os.utime(cleaned.log_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        cleaned.close(trim=False)

    # ------------------------------------------------------------------ reading

    def _windows(self, segment: LogSegment, position: int) -> Iterator[Window]:
        """The segment's batches from ``position``, CRC-checked, a window of about
        ``log.cleaner.io.buffer.size`` bytes (at least 4 MiB) read at a time. Read through a descriptor
        of our own: retention may close the segment's meanwhile."""
        fd = segment.open_reader_fd()
        # From ``position`` on offsets strictly increase, from the segment's base offset at its start.
        previous_last = segment.base_offset - 1 if position == 0 else None
        try:
            end = segment.size
            while position < end:
                if self.should_stop():
                    raise CleanAborted(f"the clean of {segment.log_path} was stopped")
                window = self._read_window(fd, segment, position, end, previous_last)
                previous_last = window.headers[-1].last_offset
                limit = segment.offset_limit
                if limit is not None and previous_last >= limit:
                    raise CorruptRecordError(
                        f"damaged batch: offsets up to {previous_last} run into the next segment's ({limit})",
                        segment.log_path,
                        window.headers[-1].position,
                    )
                self.throttle(window.headers[-1].end_position - position)
                position = window.headers[-1].end_position
                window.last = position >= end
                yield window
        finally:
            os.close(fd)

    def _read_window(
        self, fd: int, segment: LogSegment, position: int, end: int, previous_last: int | None = None
    ) -> Window:
        """The batches from ``position`` that fit the window's bytes and limits (at least one), CRC
        checked. A window cut short by its limits makes the next read that much shorter (so small
        records are not read over and over), a full one lets it grow back."""
        path = segment.log_path
        want = min(self._read_size, end - position)
        chunk = _read(fd, position, want, path)
        # No more headers than a window may hold: a chunk of tiny batches holds many more.
        most = self.window_limits.batches
        walk = iter_batch_headers(chunk, 0, want, path=path, base_position=position)
        headers = list(itertools.islice(walk, most))
        if not headers:  # a batch larger than the window: read just it
            header = pread_header(fd, position, end, path)
            if header is None:  # the segment is sealed: no batch may run past its end
                raise CorruptRecordError("a batch runs past the end of the sealed segment", path, position)
            chunk = _read(fd, position, header.size, path)
            headers = [header]
        window = make_window(chunk, position, headers, path, self.window_limits, previous_last)
        used = window.headers[-1].end_position - position
        cut = len(window.headers) < len(headers) or len(headers) == most
        self._read_size = max(used + used // 4, _SMALLEST_WINDOW) if cut else self.window_bytes
        return window


def _read(fd: int, position: int, size: int, path: Path) -> bytearray:
    """``size`` bytes of the file at ``position``, followed by 8 zero bytes."""
    chunk = bytearray(size + 8)
    if os.preadv(fd, [memoryview(chunk)[:size]], position) != size:
        raise CorruptRecordError(f"{size} bytes could not be read", path, position)
    return chunk


def _discard(cleaned: LogSegment, lg: Log, base: int) -> None:
    cleaned.close(trim=False)
    for path in cleaned_files(lg.dir, base):
        path.unlink(missing_ok=True)

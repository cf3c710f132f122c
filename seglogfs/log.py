"""Log: a directory of segments (Kafka's topic-partition), with append, roll, lookups, retention,
flushing and crash recovery.

Loading follows Kafka's LogLoader (shared/reference/kafka-format.md section 5): ``.deleted`` and
``.cleaned`` leftovers are removed, complete ``.swap`` sets are finished, orphan index files dropped,
missing or corrupt indexes rebuilt; after an unclean shutdown every segment from the recovery point
on is validated batch by batch, a torn or corrupt tail is cut and later segments are deleted. After a
clean shutdown nothing is scanned: the indexes are trusted, as Kafka trusts them.

Thread-safety: one lock serialises appends, rolls, flushes and retention. Readers never take it:
they work on a snapshot of the segment list, and a batch becomes visible only after it is written.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .checkpoint import parse_log_dir_name, validate_log_name
from .compression import Compression
from .config import LogConfig
from .errors import (
    CorruptIndexError,
    OffsetOutOfRangeError,
    ReadOnlyLogError,
    RecordTooLargeError,
    TimestampNotFoundError,
)
from .lock import LogLock
from .records import (
    V2_HEADER_SIZE,
    BatchHeader,
    ProducerRecord,
    Record,
    RecordColumns,
    TimestampType,
    decode_batch,
    decode_batch_columns,
    decode_record,
    encode_batch,
    encode_values,
    first_record_stamp,
    record_bounds,
    validate_batch,
)
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    base_offset_from_name,
    next_offset_of_file,
    random_roll_jitter,
)

log = logging.getLogger(__name__)

DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, ".txnindex")
_BATCH_CACHE_BYTES = 32 * 1024 * 1024  # per log: bounds of ~8M records, or decoded batches


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Where an append landed: offsets [first_offset, last_offset], its max timestamp."""

    first_offset: int
    last_offset: int
    max_timestamp: int


def _now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)


class Log:
    """One log directory. Open it with :meth:`Log.open`."""

    def __init__(self, directory: Path, config: LogConfig, *, read_only: bool, clock: Callable[[], float]):
        self.dir = Path(directory)
        self.name = self.dir.name
        self.topic, self.partition = parse_log_dir_name(self.name)
        self.config = config
        self.read_only = read_only
        self._clock = clock
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._next_offset = 0
        self._start_offset = 0
        self.recovery_point = 0
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms(clock)
        self._dirty: set[LogSegment] = set()
        self._pending_deletes: list[tuple[int, list[Path]]] = []
        self._owner_lock: LogLock | None = None
        self._batch_cache: OrderedDict[tuple[str, int, int], object] = OrderedDict()
        self._cache_weights: dict[tuple[str, int, int], int] = {}
        self._batch_cache_bytes = 0
        self._cache_lock = threading.Lock()
        self._closed = False

    # ================================================================== opening and recovery

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        read_only: bool = False,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        create: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> Log:
        """Open (and with ``create``, make) a log directory; recover it unless it was shut down cleanly.

        A writer takes the directory's owner lock (LogLockedError when another process holds it).
        ``read_only`` opens without the lock and never changes a file: missing or corrupt indexes are
        then replaced by scans, and a torn tail is simply not read.
        """
        directory = Path(directory)
        validate_log_name(directory.name)
        if create and not read_only:
            directory.mkdir(parents=True, exist_ok=True)
        if not directory.is_dir():
            raise FileNotFoundError(f"no log directory {directory}")
        log_obj = cls(directory, config or LogConfig(), read_only=read_only, clock=clock)
        if not read_only:
            log_obj._owner_lock = LogLock(directory)
            log_obj._owner_lock.acquire()
        try:
            log_obj._load(recovery_point, log_start_offset, clean_shutdown)
        except BaseException:
            log_obj._release()
            raise
        return log_obj

    def _new_segment(self, base_offset: int) -> LogSegment:
        cfg = self.config
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes,
            roll_jitter_ms=random_roll_jitter(cfg.segment_jitter_ms, cfg.segment_ms),
            writable=not self.read_only,
            created_ms=_now_ms(self._clock),
        )

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        if not self.read_only:
            self._remove_leftovers()
        bases = sorted(
            base_offset_from_name(p.name)
            for p in self.dir.iterdir()
            if p.name.endswith(LOG_SUFFIX) and p.name.split(".", 1)[0].isdigit()
        )
        segments = [self._new_segment(b) for b in bases]
        if self.read_only:
            # Retention may have removed a segment since the listing: a reader leaves it out.
            segments = [s for s in segments if s.size or s.log_path.exists()]
        else:
            first_to_recover = (
                len(segments) if clean_shutdown else self._first_unflushed(segments, recovery_point)
            )
            for segment in segments[:first_to_recover]:
                self._check_indexes(segment)
                if segment is not segments[-1]:
                    segment.release_indexes()  # reopened on first use: 1000 segments, few descriptors
            if first_to_recover < len(segments):
                segments = self._recover_segments(segments, first_to_recover)
        if not segments:
            segments = [self._new_segment(max(log_start_offset, 0))]
        self._set_segments(segments)
        active = segments[-1]
        if not self.read_only:
            active.resize_indexes(self.config.segment_index_bytes)
        self._next_offset = max(active.read_next_offset(), active.base_offset)
        self._start_offset = max(log_start_offset, segments[0].base_offset)
        if self._start_offset > self._next_offset:
            self._start_offset = self._next_offset
        # After a clean load or a recovery everything up to the end offset is known good.
        self.recovery_point = self._next_offset

    def _remove_leftovers(self) -> None:
        """Kafka's first load steps: drop .deleted/.cleaned files, finish complete .swap sets."""
        cleaned_bases = []
        for path in self.dir.iterdir():
            if path.name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)
            elif path.name.endswith(CLEANED_SUFFIX):
                cleaned_bases.append(base_offset_from_name(path.name))
                path.unlink(missing_ok=True)
        lowest_cleaned = min(cleaned_bases, default=None)
        swaps = sorted(p for p in self.dir.iterdir() if p.name.endswith(SWAP_SUFFIX))
        for swap in swaps:
            base = base_offset_from_name(swap.name)
            if lowest_cleaned is not None and base >= lowest_cleaned:
                swap.unlink(missing_ok=True)  # an incomplete split or clean: discard
        for swap in sorted(p for p in self.dir.iterdir() if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)):
            self._complete_swap(swap)
        for swap in self.dir.glob("*" + SWAP_SUFFIX):  # index swaps with no .log swap left
            swap.rename(swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))
        # Index files without a .log are deleted, as Kafka does.
        logs = {p.name.split(".", 1)[0] for p in self.dir.glob("*" + LOG_SUFFIX)}
        for path in self.dir.iterdir():
            stem, _, suffix = path.name.partition(".")
            if stem.isdigit() and "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem not in logs:
                path.unlink(missing_ok=True)

    def _complete_swap(self, swap_log: Path) -> None:
        """A valid .swap replaces the segments it covers: [swap base, swap next offset)."""
        swap_base = base_offset_from_name(swap_log.name)
        swap_end = next_offset_of_file(swap_log, swap_base)
        for path in list(self.dir.iterdir()):
            stem, _, suffix = path.name.partition(".")
            if stem.isdigit() and "." + suffix in _SEGMENT_SUFFIXES and swap_base <= int(stem) < swap_end:
                path.unlink()
        for path in self.dir.glob(f"{swap_base:020d}.*{SWAP_SUFFIX}"):
            path.rename(path.with_name(path.name[: -len(SWAP_SUFFIX)]))
        # The rebuilt segment's indexes are recreated below if they are missing.

    @staticmethod
    def _first_unflushed(segments: list[LogSegment], recovery_point: int) -> int:
        """Index of the first segment that may hold data past the recovery point (Kafka recovers from
        the segment containing the recovery point on)."""
        for i in range(len(segments)):
            if i + 1 == len(segments) or segments[i + 1].base_offset > recovery_point:
                return i
        return len(segments)

    def _check_indexes(self, segment: LogSegment) -> None:
        """Rebuild the indexes of a segment that is otherwise trusted when they are missing or corrupt."""
        if segment.needs_index_rebuild:
            log.warning("%s: index missing, rebuilding it from %s", self.name, segment.log_path)
            segment.recover()
            return
        try:
            segment.sanity_check_indexes()
        except CorruptIndexError as exc:
            log.warning("%s: %s; rebuilding the indexes", self.name, exc)
            segment.recover()

    def _recover_segments(self, segments: list[LogSegment], first: int) -> list[LogSegment]:
        """Validate every batch of segments[first:], rebuilding their indexes; cut at the first bad batch
        and delete every later segment, as Kafka does after an unclean shutdown."""
        for i in range(first, len(segments)):
            segment = segments[i]
            truncated = segment.recover()
            if truncated:
                log.warning(
                    "%s: recovery cut %d bytes of torn or corrupt data at position %d of %s",
                    self.name,
                    truncated,
                    segment.size,
                    segment.log_path,
                )
                for later in segments[i + 1 :]:
                    log.warning(
                        "%s: deleting %s, which follows the truncated segment", self.name, later.log_path
                    )
                    later.close(trim=False)
                    for path in later.rename_suffix(DELETED_SUFFIX):
                        path.unlink(missing_ok=True)
                return segments[: i + 1]
        return segments

    def _set_segments(self, segments: list[LogSegment]) -> None:
        # Copy-on-write: readers hold on to whichever list they fetched.
        self._segments = list(segments)
        self._bases = [s.base_offset for s in segments]

    def _release(self) -> None:
        if self._owner_lock is not None:
            self._owner_lock.release()
            self._owner_lock = None

    # ================================================================== facts

    @property
    def start_offset(self) -> int:
        """The log start offset: the first offset still readable."""
        return self._start_offset

    @property
    def end_offset(self) -> int:
        """The log end offset: the offset the next record will get."""
        return self._next_offset

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a snapshot)."""
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def first_timestamp(self) -> int | None:
        """Timestamp of the first user record, or None for an empty log."""
        for record in self.iter_records(self._start_offset):
            return record.timestamp
        return None

    @property
    def last_timestamp(self) -> int | None:
        """The largest timestamp in the log, or None when no batch carries one."""
        for segment in reversed(self._segments):
            if segment.max_timestamp >= 0:
                return segment.max_timestamp
            last = segment.last_batch()
            if last is not None and last.max_timestamp >= 0:
                return last.max_timestamp
        return None

    def info(self) -> dict:
        """What the mount's ``info`` file shows."""
        return {
            "name": self.name,
            "topic": self.topic,
            "partition": self.partition,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "records": self.end_offset - self.start_offset,
            "segments": len(self._segments),
            "bytes": self.size_bytes,
            "first_timestamp": self.first_timestamp,
            "last_timestamp": self.last_timestamp,
            "recovery_point": self.recovery_point,
            "read_only": self.read_only,
            "config": self.config.to_dict(),
        }

    # ================================================================== appending

    def append(self, records: Sequence[ProducerRecord]) -> AppendInfo:
        """Append ``records`` as ONE RecordBatch, atomically: all of them or (on error) none."""
        if not records:
            raise ValueError("nothing to append")
        with self._lock:
            self._check_writable()
            now = _now_ms(self._clock)
            batch = encode_batch(
                records,
                self._next_offset,
                now_ms=now,
                compression=self._codec(),
                timestamp_type=self._timestamp_type(),
            )
            return self._append_batch(batch, len(records), now)

    def append_values(self, values: Sequence[bytes], timestamp_ms: int | None = None) -> AppendInfo:
        """Append key-less values sharing one timestamp (default: now) as one batch: the fast path."""
        if not values:
            raise ValueError("nothing to append")
        with self._lock:
            self._check_writable()
            now = _now_ms(self._clock)
            ts = now if timestamp_ms is None or self.config.log_append_time else timestamp_ms
            batch = encode_values(
                values,
                self._next_offset,
                ts,
                compression=self._codec(),
                timestamp_type=self._timestamp_type(),
            )
            return self._append_batch(batch, len(values), now)

    def _codec(self) -> Compression:
        return Compression.from_name(self.config.codec)

    def _timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.config.log_append_time else TimestampType.CREATE_TIME

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyLogError(f"log {self.name} is open read-only")
        if self._closed:
            raise ReadOnlyLogError(f"log {self.name} is closed")

    def _append_batch(self, batch: bytes, count: int, now_ms: int) -> AppendInfo:
        # Kafka checks the whole (possibly compressed) batch against max.message.bytes.
        if len(batch) > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {len(batch)} bytes for log {self.name} exceeds max.message.bytes="
                f"{self.config.max_message_bytes}"
            )
        first = self._next_offset
        last = first + count - 1
        max_ts = int.from_bytes(batch[35:43], "big", signed=True)
        segment = self._maybe_roll(len(batch), max_ts, last, now_ms)
        segment.append(batch, last, max_ts)
        self._dirty.add(segment)
        self._next_offset = last + 1
        self._unflushed_messages += count
        if self._unflushed_messages >= self.config.flush_messages:
            self._flush_locked()
        return AppendInfo(first, last, max_ts)

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now_ms: int) -> LogSegment:
        active = self._segments[-1]
        cfg = self.config
        if active.should_roll(
            segment_bytes=cfg.segment_bytes,
            segment_ms=cfg.segment_ms,
            messages_size=size,
            max_timestamp=max_ts,
            last_offset=last_offset,
            now_ms=now_ms,
        ):
            return self.roll()
        return active

    def roll(self) -> LogSegment:
        """Seal the active segment (final time entry, trimmed indexes); start a new one at the end offset."""
        with self._lock:
            self._check_writable()
            active = self._segments[-1]
            if active.size == 0 and active.base_offset == self._next_offset:
                return active
            active.on_become_inactive()
            active.flush()  # Kafka flushes the sealed segment right after a roll
            self._dirty.discard(active)
            new = self._new_segment(self._next_offset)
            self._set_segments([*self._segments, new])
            log.info("%s: rolled new segment %s", self.name, new.log_path.name)
            return new

    # ================================================================== flushing

    def flush(self) -> None:
        """fsync everything appended so far; the recovery point moves to the end offset."""
        with self._lock:
            if not self.read_only and not self._closed:
                self._flush_locked()

    def _flush_locked(self) -> None:
        for segment in list(self._dirty):
            segment.flush()
        self._dirty.clear()
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms(self._clock)
        self.recovery_point = self._next_offset

    def maybe_flush(self, now_ms: int | None = None) -> None:
        """Flush when ``flush.ms`` has passed since the last flush and something is unflushed."""
        now = _now_ms(self._clock) if now_ms is None else now_ms
        with self._lock:
            if self._dirty and now - self._last_flush_ms >= self.config.flush_ms and not self._closed:
                self._flush_locked()

    # ================================================================== retention

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Kafka's retention: by time, by size and by log start offset. Returns segments deleted.

        Deleted segments are renamed ``.deleted`` at once and removed after ``file.delete.delay.ms``.
        """
        if self.read_only or self._closed:
            return 0
        now = _now_ms(self._clock) if now_ms is None else now_ms
        with self._lock:
            cfg = self.config
            segments = self._segments
            deletable = 0
            if cfg.deletes:
                by_time = 0
                if cfg.retention_ms >= 0:
                    for segment in segments:
                        if now - segment.largest_timestamp() > cfg.retention_ms:
                            by_time += 1
                        else:
                            break
                by_size = 0
                if cfg.retention_bytes >= 0:
                    diff = sum(s.size for s in segments) - cfg.retention_bytes
                    for segment in segments:
                        if diff - segment.size >= 0:
                            diff -= segment.size
                            by_size += 1
                        else:
                            break
                deletable = max(by_time, by_size)
            by_start = 0
            for i, following in enumerate(segments[1:]):
                if following.base_offset <= self._start_offset:
                    by_start = i + 1
            deletable = max(deletable, by_start)
            # Never delete the last segment when it is empty; if all would go, roll first (as Kafka).
            if deletable >= len(segments):
                if segments[-1].size == 0:
                    deletable = len(segments) - 1
                else:
                    self.roll()
                    segments = self._segments
            if deletable <= 0:
                self._purge_deleted(now)
                return 0
            doomed, kept = segments[:deletable], segments[deletable:]
            self._set_segments(kept)
            self._start_offset = max(self._start_offset, kept[0].base_offset)
            self._invalidate_cache()
            for segment in doomed:
                segment.close(trim=False)
                self._dirty.discard(segment)
                paths = segment.rename_suffix(DELETED_SUFFIX)
                self._pending_deletes.append((now + cfg.file_delete_delay_ms, paths))
                log.info("%s: retention deleted segment %s", self.name, segment.log_path.name)
            self._purge_deleted(now)
            return len(doomed)

    def _purge_deleted(self, now_ms: int) -> None:
        due = [p for p in self._pending_deletes if p[0] <= now_ms]
        self._pending_deletes = [p for p in self._pending_deletes if p[0] > now_ms]
        for _, paths in due:
            for path in paths:
                path.unlink(missing_ok=True)

    # ================================================================== reading

    def _segment_for(self, offset: int) -> int:
        """Index of the segment that would hold ``offset`` (bisect over base offsets)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def _check_range(self, offset: int) -> None:
        if not self._start_offset <= offset < self._next_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside log {self.name} [{self._start_offset}, {self._next_offset})"
            )

    def lookup(self, offset: int) -> tuple[LogSegment, BatchHeader]:
        """The segment and batch holding ``offset``: bisect, offset index, then a header scan."""
        self._check_range(offset)
        segments = self._segments
        i = self._segment_for(offset)
        while i < len(segments):
            header = segments[i].find_batch(offset)
            if header is not None:
                return segments[i], header
            i += 1
        raise OffsetOutOfRangeError(f"offset {offset} is not in log {self.name}")

    def read(self, offset: int) -> Record:
        """The record at ``offset``. OffsetOutOfRangeError outside the log (or for a control record's
        offset); CorruptRecordError when its batch is corrupt."""
        segment, header = self.lookup(offset)
        if header.magic >= 2 and header.compression == Compression.NONE and not header.is_control:
            # Uncompressed: after one CRC-checked pass over the batch (cached as 8 bytes a record),
            # a read fetches just its own record's bytes.
            bounds = self._cached(("bounds", segment.base_offset, header.position), segment, header)
            i = bounds.index_of(header, offset)
            if i < 0:
                raise OffsetOutOfRangeError(f"offset {offset} of log {self.name} holds no user record")
            start, end = bounds.span(i)
            data = segment.read(header.position + V2_HEADER_SIZE + start, end - start)
            return decode_record(data, header, path=segment.log_path)
        columns = self._columns(segment, header)
        i = int(np.searchsorted(columns.offsets, offset))
        if i >= len(columns) or int(columns.offsets[i]) != offset:
            raise OffsetOutOfRangeError(f"offset {offset} of log {self.name} holds no user record")
        data = columns.data
        kl, vl = int(columns.key_lengths[i]), int(columns.value_lengths[i])
        ks, vs = int(columns.key_starts[i]), int(columns.value_starts[i])
        return Record(
            offset,
            int(columns.timestamps[i]),
            columns.timestamp_type,
            None if kl < 0 else data[ks : ks + kl].tobytes(),
            None if vl < 0 else data[vs : vs + vl].tobytes(),
            columns.headers[i] if columns.headers is not None else (),
        )

    def _columns(self, segment: LogSegment, header: BatchHeader) -> RecordColumns:
        """Decoded columns of one batch, CRC-checked, cached."""
        return self._cached(("columns", segment.base_offset, header.position), segment, header)

    def _cached(self, key: tuple[str, int, int], segment: LogSegment, header: BatchHeader):
        """Record bounds or decoded columns of one batch, through a byte-bounded LRU cache."""
        with self._cache_lock:
            cached = self._batch_cache.get(key)
            if cached is not None:
                self._batch_cache.move_to_end(key)
                return cached
        data = segment.read(header.position, header.size)
        local = header.at(0)
        validate_batch(data, local, path=segment.log_path)
        if key[0] == "bounds":
            value = record_bounds(data, local, path=segment.log_path)
            weight = value.nbytes
        else:
            value = decode_batch_columns(data, local, path=segment.log_path)
            weight = value.data.nbytes
        with self._cache_lock:
            if key not in self._batch_cache:
                self._batch_cache[key] = value
                self._cache_weights[key] = weight
                self._batch_cache_bytes += weight
            while self._batch_cache_bytes > _BATCH_CACHE_BYTES and self._batch_cache:
                evicted, _ = self._batch_cache.popitem(last=False)
                self._batch_cache_bytes -= self._cache_weights.pop(evicted)
        return value

    def _invalidate_cache(self) -> None:
        with self._cache_lock:
            self._batch_cache.clear()
            self._cache_weights.clear()
            self._batch_cache_bytes = 0

    def iter_batches(
        self, start: int | None = None, end: int | None = None
    ) -> Iterator[tuple[LogSegment, BatchHeader, bytes]]:
        """(segment, header, batch bytes) of every CRC-valid batch overlapping offsets [start, end).

        ``header.position`` is the batch's position in ``segment.log_path``. A corrupt batch raises
        CorruptRecordError naming the file and position.
        """
        start = self._start_offset if start is None else max(start, self._start_offset)
        end_offset = self._next_offset if end is None else min(end, self._next_offset)
        if start >= end_offset:
            return
        segments = self._segments
        i = self._segment_for(start)
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
                validate_batch(data, header.at(0), path=segment.log_path)
                yield segment, header, data
                if header.last_offset >= end_offset - 1:
                    return

    def iter_records(self, start: int | None = None, end: int | None = None) -> Iterator[Record]:
        """User records with offsets in [start, end), in order (control records skipped)."""
        lo = self._start_offset if start is None else start
        hi = self._next_offset if end is None else end
        for segment, header, data in self.iter_batches(lo, hi):
            for record in decode_batch(data, header.at(0), path=segment.log_path):
                if lo <= record.offset < hi:
                    yield record

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """Kafka's offsetsForTimes: the offset of the first record with timestamp >= ``timestamp_ms``."""
        for segment in self._segments:
            if segment.max_timestamp < timestamp_ms and segment is not self._segments[-1]:
                continue
            found = self._find_in_segment(segment, timestamp_ms)
            if found is not None:
                return found
        raise TimestampNotFoundError(f"no record in log {self.name} has a timestamp >= {timestamp_ms}")

    def _find_in_segment(self, segment: LogSegment, timestamp_ms: int) -> int | None:
        # Entries are (max timestamp so far, offset): below an entry < target no record can match.
        # Kafka looks up the target itself, which can skip an earlier record whose timestamp equals
        # it when timestamps go backwards; target - 1 keeps "first record >= target" exact.
        indexed_offset = segment.time_index.lookup(timestamp_ms - 1)[1]
        start = max(indexed_offset, self._start_offset, segment.base_offset)
        header = segment.find_batch(start)
        if header is None:
            return None
        # Headers only until a batch can hold the answer; only that batch is decoded (and cached).
        for batch in segment.iter_headers(header.position):
            if batch.max_timestamp < timestamp_ms or batch.is_control:
                continue
            if batch.magic >= 2 and batch.compression == Compression.NONE:
                # Often the batch's first record already qualifies (always so for a batch whose
                # records share one timestamp): a 32-byte read answers without decoding the batch.
                # Like Kafka's search, this reads no CRC; reading the record itself checks it.
                first = first_record_stamp(segment.read(batch.position + V2_HEADER_SIZE, 32), batch)
                if first is not None and first[1] >= timestamp_ms and first[0] >= self._start_offset:
                    return first[0]
            columns = self._columns(segment, batch)
            hits = np.flatnonzero(
                (columns.timestamps >= timestamp_ms) & (columns.offsets >= self._start_offset)
            )
            if hits.size:
                return int(columns.offsets[hits[0]])
        return None

    # ================================================================== config and lifecycle

    def update_config(self, config: LogConfig) -> None:
        """Apply new settings live (they take effect for the next append, roll and retention run)."""
        with self._lock:
            self.config = config
            for segment in self._segments:
                segment.index_interval_bytes = config.index_interval_bytes

    def close(self) -> None:
        """Flush, record the final time entries, trim the indexes, release the owner lock."""
        with self._lock:
            if self._closed:
                return
            if not self.read_only:
                self._flush_locked()
            active = self._segments[-1]
            for segment in self._segments:
                segment.close(trim=segment is active and not self.read_only)
            self._purge_deleted(2**62)
            self._closed = True
            self._release()
            self._invalidate_cache()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Log({str(self.dir)!r}, start={self._start_offset}, end={self._next_offset})"

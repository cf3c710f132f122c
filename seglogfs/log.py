"""Log: a directory of segments (Kafka's topic-partition), with append, roll, lookups, retention and
flushing. Loading and crash recovery are :mod:`seglogfs.log_loader`'s; which segments retention
deletes, :mod:`seglogfs.retention`'s; decoded batches are cached in a :class:`BatchCache`.

Thread-safety: one lock serialises appends, rolls, flushes and retention. Readers never take it:
they work on a snapshot of the segment list, and a batch becomes visible only after it is written.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .batch_cache import BatchCache
from .batch_split import BatchEncoder, batch_encoder, largest_single_value, split_into_batches
from .cleaner_transactions import ProducerLastBatch
from .compression import Compression
from .config import LogConfig
from .descriptor_budget import BUDGET
from .durable_files import fsync_dir
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogOfflineError,
    OffsetOutOfRangeError,
    ReadOnlyLogError,
    RecordTooLargeError,
    TimestampNotFoundError,
)
from .lock import LogLock
from .log_files import parse_log_dir_name, validate_log_name
from .log_loader import LogLoader
from .log_removal import SegmentRemoval
from .log_segments import LogSegments, segment_index_for
from .log_transactions import LogTransactions
from .log_validator import check_client_batch, place_batch
from .producer_append import RecentBatches
from .read_committed import READ_COMMITTED, READ_UNCOMMITTED, Isolation
from .record_offsets import first_existing_offset, record_count
from .records import (
    BatchHeader,
    ProducerRecord,
    Record,
    TimestampType,
    batch_max_timestamp,
    decode_batch,
    encode_batch,
    encode_values,
    read_batch_header,
)
from .records.encode import KeyedValues, encode_keyed_values
from .retention import deletable_segment_count
from .segment import LogSegment
from .timestamp_search import find_offset_by_timestamp
from .timestamps import clock_ms
from .totals_counter import counter, progress
from .totals_file import load as load_totals
from .totals_file import save as save_totals
from .totals_file import save_segment as save_segment_totals
from .transaction_index import AbortedTxn

log = logging.getLogger(__name__)
_UIDS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Where an append landed: offsets [first_offset, last_offset], its max timestamp."""

    first_offset: int
    last_offset: int
    max_timestamp: int


class Log:
    """One log directory. Open it with :meth:`Log.open`. Its segments are a :class:`LogSegments`;
    those leaving it go through its :class:`~seglogfs.log_removal.SegmentRemoval`."""

    def __init__(
        self, directory: Path, config: LogConfig, *, read_only: bool, clock: Callable[[], float]
    ) -> None:
        self.dir = Path(directory)
        self.name = self.dir.name
        self.uid = next(_UIDS)  # unique for the process's life, unlike id(): a reopened log is another
        self.topic, self.partition = parse_log_dir_name(self.name)
        self.config = config
        self.read_only = read_only
        self._clock = clock
        self._lock = threading.RLock()
        self._segments = LogSegments(self.dir, config, writable=not read_only, clock=clock)
        self._next_offset = 0
        self._start_offset = 0
        self.recovery_point = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock_ms(clock)
        self._dirty: set[LogSegment] = set()
        # a segment file was created since the last flush: the flush fsyncs the directory too, as
        # Kafka's LocalLog.flush does, or a crash could lose the new file's name with its data
        self._segment_created = not read_only
        self._removal = SegmentRemoval(self.name, self._segments)
        self._owner_lock: LogLock | None = None
        self._batch_cache = BatchCache()
        self._transactions = LogTransactions(self.dir, read_only=read_only)
        self._closed = False
        self._offline_reason: str | None = None
        #: called (under the log's lock) when the log goes offline; the LogManager's hook
        self.on_offline: Callable[[Log], None] | None = None
        #: called (under the log's lock, so it must not block) once appended records are visible to
        #: readers, whoever appended them: a Kafka Fetch long poll waits on it
        self.on_append: Callable[[Log], None] | None = None
        self._recent_batches = RecentBatches()  # idempotent producers' last batches

    # ================================================================== opening

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
        data_dir_locked: bool = False,
    ) -> Log:
        """Open (and with ``create``, make) a log directory; recover it unless it was shut down cleanly
        (see :class:`~seglogfs.log_loader.LogLoader`).

        A writer takes the directory's owner lock (LogLockedError when another process holds it);
        with ``data_dir_locked`` (the caller holds the data dir's lock, which keeps every other writer
        out) it only probes it and keeps no descriptor.
        ``read_only`` opens without the lock and never changes a file: missing or corrupt indexes are
        then replaced by scans, and a torn tail is simply not read.
        """
        directory = Path(directory)
        validate_log_name(directory.name)
        if create and not read_only and not directory.exists():
            directory.mkdir(parents=True, exist_ok=True)
            fsync_dir(directory.parent)  # the new log's name, durable in the data dir
        if not directory.is_dir():
            raise FileNotFoundError(f"no log directory {directory}")
        log_obj = cls(directory, config or LogConfig(), read_only=read_only, clock=clock)
        if not read_only and data_dir_locked:
            LogLock(directory).probe()
        elif not read_only:
            log_obj._owner_lock = LogLock(directory)
            log_obj._owner_lock.acquire()
        before = _dir_stamp(directory)
        try:
            loader = LogLoader(directory, log_obj.config, log_obj._segments, read_only=read_only)
            loaded = loader.load(recovery_point, log_start_offset, clean_shutdown)
            log_obj._segments.replace(loaded.segments)
            log_obj._next_offset = loaded.next_offset
            log_obj._start_offset = loaded.log_start_offset
            log_obj.recovery_point = loaded.recovery_point
            if loaded.recovery_point < loaded.next_offset:
                # The next flush fsyncs the segments holding recovered data past the recovery point.
                ends = [s.base_offset for s in loaded.segments[1:]] + [loaded.next_offset]
                log_obj._dirty.update(
                    s for s, end in zip(loaded.segments, ends, strict=True) if end > loaded.recovery_point
                )
            log_obj._transactions.load(loaded, clean_shutdown=clean_shutdown, now_ms=clock_ms(clock))
            load_totals(loaded.segments)  # what is not restored, the counter counts
            if loaded.recovered_from is not None:
                # Recovery just read these segments (they are in the page cache): count them now, in
                # C, so that a kill -9 leaves no background count behind (what recovery scanned is
                # counted with it).
                for segment in loaded.segments:
                    if segment.base_offset >= loaded.recovered_from:
                        segment.totals.catch_up()
            log_obj.release_files()  # a log not used yet holds no descriptor
            # The directory needs an fsync at the next flush only if loading changed it (or the last
            # run did not close cleanly): an idle log's close then costs no fsync.
            changed = not clean_shutdown or _dir_stamp(directory) != before
            log_obj._segment_created = not read_only and changed
        except BaseException:
            for segment in log_obj._segments.all:
                segment.close(trim=False)
            log_obj._release()
            raise
        counter().watch(log_obj)
        return log_obj

    def release_files(self) -> None:
        """Close the descriptors of the segments not in use now; they reopen on their next use."""
        for segment in self._segments.all:
            if segment.release_files():
                BUDGET.forget(segment)

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
    def removals(self) -> int:
        """How many times segments left the log (retention, compaction). Counted once the
        new segment list is out, so an answer computed between two equal counts read before and after
        comes from a list no older than the first count: a cache of reads keeps it only while the
        count stays the same."""
        return self._segments.removals

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    @property
    def offline_reason(self) -> str | None:
        """Why the log went offline while open (its files vanished under it), else None."""
        return self._offline_reason

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a snapshot)."""
        return self._segments.all

    @property
    def active_segment(self) -> LogSegment:
        """The newest segment, the one appends go to."""
        return self._segments.active

    @property
    def size_bytes(self) -> int:
        """The bytes of every segment's .log together."""
        return sum(s.size for s in self._segments.all)

    @property
    def first_timestamp(self) -> int | None:
        """Timestamp of the first readable user record, or None for an empty log."""
        try:
            for record in self.iter_records(self._start_offset):
                return record.timestamp
            return None
        except CorruptRecordError:
            pass
        for offset in range(self._start_offset, self._next_offset):  # past the damaged batch
            try:
                return self.read(offset).timestamp
            except (CorruptRecordError, OffsetOutOfRangeError):
                continue
        return None

    @property
    def last_timestamp(self) -> int | None:
        """The largest timestamp in the log, or None when no batch carries one."""
        for segment in reversed(self._segments.all):
            if segment.max_timestamp >= 0:
                return segment.max_timestamp
            last = segment.last_intact_batch()
            if last is not None and last.max_timestamp >= 0:
                return last.max_timestamp
        return None

    def info(self) -> dict[str, Any]:
        """What the mount's ``info`` file shows. Read again when retention purged a segment while it
        was being read (its descriptor closed under the read: EBADF, or its file gone: ENOENT)."""
        while True:
            removals = self._segments.removals
            try:
                return self._info()
            except OSError:
                if self._segments.removals == removals:
                    raise

    def _info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic": self.topic,
            "partition": self.partition,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "records": self._record_count(),
            "segments": len(self._segments.all),
            "bytes": self.size_bytes,
            "first_timestamp": self.first_timestamp,
            "last_timestamp": self.last_timestamp,
            "recovery_point": self.recovery_point,
            "last_stable_offset": self.last_stable_offset,
            "view_totals": progress(self),
            "read_only": self.read_only,
            "config": self.config.to_dict(),
        }

    def _record_count(self) -> int:
        """User records from the start offset: ``end - start`` unless the log is compacted (gaps)."""
        if "compact" not in self.config.cleanup_policy:
            return self.end_offset - self.start_offset
        return record_count(self)

    # ================================================================== appending

    def append(self, records: Sequence[ProducerRecord]) -> AppendInfo:
        """Append ``records`` as ONE RecordBatch, atomically: all of them or (on error) none."""
        if not records:
            raise ValueError("nothing to append")
        self._check_keys(records)
        with self._lock:
            self._check_writable()
            now = clock_ms(self._clock)
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
        self._check_keys(values)
        with self._lock:
            self._check_writable()
            now = clock_ms(self._clock)
            ts = now if timestamp_ms is None or self.config.log_append_time else timestamp_ms
            batch = encode_values(
                values,
                self._next_offset,
                ts,
                compression=self._codec(),
                timestamp_type=self._timestamp_type(),
            )
            return self._append_batch(batch, len(values), now)

    def append_split(
        self, items: Sequence[ProducerRecord] | Sequence[bytes] | KeyedValues
    ) -> list[AppendInfo]:
        """Append ``items`` in order as one batch, or as several consecutive batches when together
        they exceed ``max.message.bytes``: each batch as long as fits, judged by its exact encoded
        (compressed) size (see :mod:`seglogfs.batch_split`). ``bytes`` items are key-less values
        sharing one timestamp, as in :meth:`append_values`; :class:`ProducerRecord` items keep keys,
        headers and timestamps; :class:`KeyedValues` are keyed values sharing one timestamp (the
        keyed fast path).

        Every batch is encoded before the first is appended, so a record too large even alone raises
        :class:`RecordTooLargeError` (its ``index`` names it) with nothing appended. All or nothing:
        the batches go in with one write (see :meth:`_append_batches`), so an I/O error (a full disk)
        leaves none of them.
        """
        if not items:
            raise ValueError("nothing to append")
        self._check_keys(items)
        with self._lock:
            self._check_writable()
            now = clock_ms(self._clock)
            return self._append_batches(self._plan_split(items, now), now)

    def append_as_leader(self, batch: bytes) -> AppendInfo:
        """Append one record batch a Kafka client sent, as a partition leader does: checked whole
        (:func:`~seglogfs.log_validator.check_client_batch`: CRC, records, offset deltas), placed at
        the log end (offsets assigned; LogAppendTime stamped when the log uses it), its records kept
        as sent, compressed or not. An idempotent producer's batch is checked against that producer's
        state: a retried batch is not appended again (its earlier offsets are returned), an older
        epoch raises ProducerFencedError, a sequence gap OutOfOrderSequenceError."""
        # the size first, as Kafka does: a batch over max.message.bytes is never decompressed
        self._check_batch_size(len(batch))
        header = check_client_batch(batch, self.name)  # the CRC and record walk, outside the lock
        with self._lock:
            self._check_writable()
            duplicate = self._recent_batches.check(header, self._transactions.producer(header.producer_id))
            if duplicate is not None:
                return AppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.max_timestamp)
            now = clock_ms(self._clock)
            placed = place_batch(
                batch, self._next_offset, log_append_time_ms=now if self.config.log_append_time else None
            )
            info = self._append_batch(placed, header.records_count, now)
            if header.producer_id >= 0:
                final = read_batch_header(placed, 0, path=self.name)
                assert final is not None
                self._transactions.appended(final)
                self._recent_batches.appended(final)
            return info

    def _check_batch_size(self, size: int) -> None:
        """RecordTooLargeError when a batch of ``size`` bytes is over ``max.message.bytes`` (Kafka
        checks the whole, possibly compressed, batch)."""
        if size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {size} bytes for log {self.name} exceeds max.message.bytes="
                f"{self.config.max_message_bytes}"
            )

    def check_append(self, items: Sequence[ProducerRecord] | Sequence[bytes] | KeyedValues) -> None:
        """Raise what :meth:`append_split` of ``items`` would raise for their keys and sizes (EINVAL,
        EFBIG: each batch encoded, compressed, exactly as it would be), appending nothing."""
        if not items:
            return
        self._check_keys(items)
        with self._lock:
            self._plan_split(items, clock_ms(self._clock))

    def _plan_split(
        self, items: Sequence[ProducerRecord] | Sequence[bytes] | KeyedValues, now_ms: int
    ) -> list[tuple[bytes, int]]:
        encode = self._split_encoder(items, now_ms)
        limit = self.config.max_message_bytes
        return split_into_batches(encode, len(items), self._next_offset, limit, self.name)

    def _split_encoder(
        self, items: Sequence[ProducerRecord] | Sequence[bytes] | KeyedValues, now_ms: int
    ) -> BatchEncoder:
        codec, ts_type = self._codec(), self._timestamp_type()
        if not isinstance(items, KeyedValues):
            return batch_encoder(items, now_ms, codec, ts_type)
        return lambda start, end, base: encode_keyed_values(
            items.slice(start, end), base, now_ms, compression=codec, timestamp_type=ts_type
        )

    def _check_keys(self, items: Sequence[ProducerRecord] | Sequence[bytes] | KeyedValues) -> None:
        if "compact" not in self.config.cleanup_policy or isinstance(items, KeyedValues):
            return
        for i, item in enumerate(items):
            if not isinstance(item, ProducerRecord) or item.key is None:
                self.refuse_keyless(f"record {i}")

    def refuse_keyless(self, what: str) -> None:
        """A compacted log takes only keyed records, as a broker refuses others: InvalidRecordError
        saying that ``what`` (a record, or what a writer sends) has no key; nothing when the log is
        not compacted."""
        policy = self.config.cleanup_policy
        if "compact" in policy:
            raise InvalidRecordError(
                f"log {self.name} is compacted (cleanup.policy={','.join(policy)}): {what} has no key, "
                "and compaction keeps records by key"
            )

    def _codec(self) -> Compression:
        return Compression.from_name(self.config.codec)

    @property
    def compresses(self) -> bool:
        """Whether the batches this log builds from appended records are compressed (compression.type
        names a codec): their size against max.message.bytes is then known only once encoded."""
        return self._codec() != Compression.NONE

    def _timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.config.log_append_time else TimestampType.CREATE_TIME

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyLogError(f"log {self.name} is open read-only")
        if self._offline_reason is not None:
            raise LogOfflineError(f"log {self.name} is offline: {self._offline_reason}")
        if self._closed:
            raise ReadOnlyLogError(f"log {self.name} is closed")

    # ================================================================== its files on disk

    def check_files(self) -> str | None:
        """Whether the log's files are still where the next start will look for them: its active
        segment's .log at its path (so its directory too), the file written, not cut short. When not,
        the log goes offline (logged, ``on_offline`` called) and the reason is returned."""
        with self._lock:
            if self.read_only or self._closed or self._offline_reason is not None:
                return self._offline_reason
            try:
                reason = self._segments.active.vanished()
            except OSError as exc:  # EACCES, EIO...: nothing can vouch for the files
                reason = f"its files cannot be checked: {exc}"
            if reason is not None:
                self._go_offline(reason)
            return reason

    def _require_files(self, cause: BaseException | None = None) -> None:
        """LogOfflineError when :meth:`check_files` finds the files vanished (``cause``: the error that
        made the caller look, chained)."""
        reason = self.check_files()
        if reason is not None:
            raise LogOfflineError(f"log {self.name} is offline: {reason}") from cause

    def _go_offline(self, reason: str) -> None:
        self._offline_reason = reason
        log.error(
            "log %s is offline: %s; nothing more is appended to it, and what was appended since is not "
            "acknowledged (restart once its directory is restored)", self.name, reason,
        )
        if self.on_offline is not None:
            self.on_offline(self)

    def max_value_bytes(self) -> int:
        """The largest value ``append``, ``append.raw`` and :meth:`append_values` can take as a record of
        its own: its one-record batch (no key, no headers) fits ``max.message.bytes`` exactly; -1 when
        none does. With a compression codec this is the uncompressed size (Kafka's producer checks
        the serialized size before compression too); a batch that compression makes larger, as
        incompressible data can, is still refused at append."""
        return largest_single_value(self.config.max_message_bytes)

    def _append_batch(self, batch: bytes, count: int, now_ms: int) -> AppendInfo:
        return self._append_batches([(batch, count)], now_ms)[0]

    def _append_batches(self, batches: Sequence[tuple[bytes, int]], now_ms: int) -> list[AppendInfo]:
        """Append consecutive ``(batch, record count)`` pairs with ONE write to the active segment:
        all of them, or on any error none.

        Kafka's roll rule is applied to their total size, so the roll (the step that needs new disk
        space for indexes) comes before anything is written. The segment may then exceed
        segment.bytes by up to one write: splitting a write across segments would need a roll
        between its batches, which could fail with the first ones already visible to readers.
        """
        for batch, _ in batches:
            self._check_batch_size(len(batch))
        infos, placed, first = [], [], self._next_offset
        for batch, count in batches:
            max_ts = batch_max_timestamp(batch)
            infos.append(AppendInfo(first, first + count - 1, max_ts))
            placed.append((batch, first + count - 1, max_ts))
            first += count
        total, newest = sum(len(batch) for batch, _ in batches), max(i.max_timestamp for i in infos)
        try:
            segment = self._maybe_roll(total, newest, infos[-1].last_offset, now_ms)
            cut = segment.cut_short()  # a write past a cut end would leave a hole of zeros before it
            if cut is not None:
                self._go_offline(cut)
                raise LogOfflineError(f"log {self.name} is offline: {cut}")
            end = segment.write_batches(placed)
        except OSError as exc:  # ENOENT at a roll: maybe the directory is gone
            self._require_files(exc)
            raise
        self._dirty.add(segment)
        # Before acknowledging, or showing them to readers: in the file the next start will find (not
        # one removed or replaced).
        self._require_files()
        # The end offset first: no reader (another request thread) sees a record past it.
        self._next_offset = first
        segment.publish(end, placed)
        self._unflushed_messages += sum(count for _, count in batches)
        if self._unflushed_messages >= self.config.flush_messages:
            self._flush_locked()
        if self.on_append is not None:
            self.on_append(self)
        return infos

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now_ms: int) -> LogSegment:
        active = self._segments.active
        cfg = self.config
        segment_ms = cfg.segment_ms
        if "compact" in cfg.cleanup_policy:  # Kafka: a compacted log rolls by max.compaction.lag.ms too
            segment_ms = min(segment_ms, cfg.max_compaction_lag_ms)
        if active.should_roll(
            segment_bytes=cfg.segment_bytes,
            segment_ms=segment_ms,
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
            self._require_files()  # never new files in a directory that replaced the log's
            active = self._segments.active
            if active.size == 0 and active.base_offset == self._next_offset:
                # Its indexes may have stayed small when the disk was full at load: grow them now.
                active.resize_indexes(self.config.segment_index_bytes)
                return active
            # The new segment and its preallocated indexes first: when the disk has no room for them,
            # the roll fails (ENOSPC) with nothing changed, and the next append tries again.
            new = self._segments.new_segment(self._next_offset)
            try:
                new.resize_indexes(self.config.segment_index_bytes)
                active.on_become_inactive()
                active.flush()  # Kafka flushes the sealed segment right after a roll
            except BaseException:
                LogSegments.discard_new(new)
                raise
            self._dirty.discard(active)
            if active.release_files():  # sealed: reopened when read
                BUDGET.forget(active)
            self._segments.replace([*self._segments.all, new])
            self._segment_created = True
            log.info("%s: rolled new segment %s", self.name, new.log_path.name)
            self.save_sealed_totals(active)
            self._transactions.snapshot(new.base_offset)  # as Kafka: at every roll, at the new base
            return new

    def save_sealed_totals(self, segment: LogSegment, *, again: bool = False) -> None:
        """Keep the view totals of the sealed ``segment`` in its totals file once they are counted to
        its end (a restart then counts nothing of it, even after kill -9); ``again``: rewrite a saved
        file (its read_committed total is counted now); a failure only costs a recount."""
        with self._lock:  # one writer of the file at a time (the counter's thread, a roll, close)
            if self.read_only or self._closed or (segment.totals.saved and not again):
                return
            if not segment.totals.counted(segment.size):
                return
            try:
                save_segment_totals(segment)
            except OSError as exc:
                name = segment.log_path.name
                log.warning("%s: the view totals of %s were not saved: %s", self.name, name, exc)

    # ================================================================== removing segments

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Kafka's retention: by time, by size and by log start offset (:mod:`seglogfs.retention`).
        Returns the number of segments deleted.

        Deleted segments are renamed ``.deleted`` at once and removed after ``file.delete.delay.ms``.
        """
        if self.read_only or self._closed:
            return 0
        now = clock_ms(self._clock) if now_ms is None else now_ms
        with self._lock:
            segments = self._segments.all
            deletable = deletable_segment_count(segments, self.config, self._start_offset, now, self.name)
            # Never delete the last segment when it is empty; if all would go, roll first (as Kafka).
            if deletable >= len(segments):
                if segments[-1].size == 0:
                    deletable = len(segments) - 1
                else:
                    self.roll()
                    segments = self._segments.all
            if deletable > 0:
                self._delete_segments(segments[:deletable], segments[deletable:], now)
            self._removal.purge(now)
            return max(deletable, 0)

    def delete_records_before(self, offset: int, now_ms: int | None = None) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset`` (never down; ``-1`` means
        the end offset) and delete the segments wholly below it. Returns the new start offset.
        OffsetOutOfRangeError for an offset past the end."""
        with self._lock:
            if self.read_only or self._closed:
                raise ReadOnlyLogError(f"log {self.name} is read-only")
            end = self._next_offset
            target = end if offset == -1 else offset
            if not 0 <= target <= end:
                raise OffsetOutOfRangeError(f"offset {offset} is outside log {self.name} [0, {end}]")
            self._start_offset = max(self._start_offset, target)
            self._batch_cache.clear()
        self.delete_old_segments(now_ms)
        return self._start_offset

    def _delete_segments(self, doomed: list[LogSegment], kept: list[LogSegment], now_ms: int) -> None:
        # The start offset with the list (readers take both without the lock), before the removal
        # renames files (slow on a busy disk): a start offset below the list's first segment would
        # name records (by-offset, info) no longer there, a list still holding segments below the
        # start offset would start a new `cat records` before it.
        self._start_offset = max(self._start_offset, kept[0].base_offset)
        self._batch_cache.clear()
        self._removal.delete(doomed, kept, now_ms + self.config.file_delete_delay_ms)
        try:
            self._transactions.forget_snapshots_below(kept[0].base_offset)
        except OSError as exc:  # a snapshot left behind is harmless: the next load drops it
            log.warning("%s: old producer snapshots not deleted: %s", self.name, exc)
        self._dirty.difference_update(doomed)

    def replace_segments(self, old: Sequence[LogSegment], base_offset: int, now_ms: int) -> LogSegment | None:
        """Swap in the cleaned segment at ``base_offset`` (its ``.cleaned`` files written and fsync'd)
        for the consecutive segments ``old`` (:mod:`seglogfs.segment_swap`); readers see either list.
        None, with nothing changed, when ``old`` is no longer part of the log (retention deleted some
        of them meanwhile) or the log is closed or offline: the caller discards the ``.cleaned`` files."""
        with self._lock:
            current = self._segments.all
            at = next((i for i, s in enumerate(current) if s is old[0]), None)
            if self._closed or self._offline_reason is not None:
                return None
            if at is None or any(a is not b for a, b in zip(current[at:], old, strict=False)):
                return None
            if at + len(old) >= len(current):
                return None  # never the active segment
            new = self._removal.replace(old, at, base_offset, now_ms + self.config.file_delete_delay_ms)
            self._dirty.difference_update(old)
            self._batch_cache.clear()
            return new

    @property
    def deleted_segments(self) -> list[LogSegment]:
        """Segments retention deleted whose files (renamed ``.deleted``) are kept until
        ``file.delete.delay.ms`` has passed, oldest first: a reader in the middle of one may finish it."""
        return self._removal.deleted_segments

    # ================================================================== flushing

    def flush(self) -> None:
        """fsync everything appended so far; the recovery point moves to the end offset.
        LogOfflineError when the log's files vanished (nothing would be found at the next start)."""
        with self._lock:
            if self._offline_reason is not None:
                self._check_writable()
            if not self.read_only and not self._closed:
                self._flush_locked()

    def _flush_locked(self) -> None:
        try:
            for segment in list(self._dirty):
                segment.flush()
            self._dirty.clear()
            if self._segment_created:
                fsync_dir(self.dir)
                self._segment_created = False
        except OSError as exc:  # ENOENT from the directory's fsync: maybe it is gone
            self._require_files(exc)
            raise
        self._require_files()  # on disk, and where the next start will look
        self._unflushed_messages = 0
        self._last_flush_ms = clock_ms(self._clock)
        self.recovery_point = self._next_offset

    def maybe_flush(self, now_ms: int | None = None) -> None:
        """Flush when ``flush.ms`` has passed since the last flush and something is unflushed."""
        now = clock_ms(self._clock) if now_ms is None else now_ms
        with self._lock:
            if self._dirty and now - self._last_flush_ms >= self.config.flush_ms and not self._closed:
                self._flush_locked()

    # ================================================================== reading

    def _check_range(self, offset: int) -> None:
        if not self._start_offset <= offset < self._next_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside log {self.name} [{self._start_offset}, {self._next_offset})"
            )

    def lookup(self, offset: int) -> tuple[LogSegment, BatchHeader]:
        """The segment and batch holding ``offset``: a batch found lately (:class:`BatchLocator`), else
        bisect, offset index, then a header scan."""
        self._check_range(offset)
        found = self._batch_cache.locator.find(offset, self._segments.removals)
        if found is not None:
            return found.segment, found.header
        return self._find(offset, self._segments.removals)

    def _find(self, offset: int, removals: int) -> tuple[LogSegment, BatchHeader]:
        """:meth:`lookup` without the remembered batches; remembers what it finds with ``removals``
        (the count read before the segment list: see BatchLocator)."""
        segments = self._segments.all
        i = segment_index_for(offset, segments)
        while i < len(segments):
            header = segments[i].find_batch(offset)
            if header is not None:
                if header.magic >= 2 and header.base_offset <= offset:
                    self._batch_cache.locator.remember(segments[i], header, removals)
                return segments[i], header
            i += 1
        raise OffsetOutOfRangeError(f"offset {offset} is not in log {self.name}")

    def read(self, offset: int, *, isolation: Isolation = READ_UNCOMMITTED) -> Record:
        """The record at ``offset``. OffsetOutOfRangeError outside the log (or for a control record's
        offset; under ``read_committed`` also for a record of an aborted transaction or at or past the
        last stable offset); CorruptRecordError when its batch is corrupt."""
        if isolation != READ_COMMITTED:
            # The hot path of a by-offset read: a remembered uncompressed batch with its record bounds.
            self._check_range(offset)
            found = self._batch_cache.locator.find(offset, self._segments.removals)
            if found is not None and found.bounds is not None:
                try:
                    record = found.segment.read_record(found.header, found.bounds, offset)
                except CorruptRecordError:
                    pass  # the general way below, which surveys the segment
                else:
                    if record is None:
                        message = f"offset {offset} of log {self.name} holds no user record"
                        raise OffsetOutOfRangeError(message)
                    return record
        try:
            segment, header = self.lookup(offset)
        except OffsetOutOfRangeError:
            if not self._start_offset <= offset < self._next_offset:
                raise
            # An append moves the end offset before its batch is published: a read of one of its
            # offsets in between waits for that append (it holds the log's lock) rather than say that
            # a record the log counts does not exist.
            with self._lock:
                segment, header = self.lookup(offset)
        if isolation == READ_COMMITTED:
            if offset >= self.last_stable_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} of log {self.name} is at or past its last stable offset "
                    f"{self.last_stable_offset} (read_committed)"
                )
            if self.hidden_batch()(header):
                raise OffsetOutOfRangeError(
                    f"offset {offset} of log {self.name} is in an aborted transaction (read_committed)"
                )
        try:
            return self._read_in(segment, header, offset)
        except CorruptRecordError:
            # The batch the headers led to fails its CRC: its lastOffsetDelta may be what is damaged,
            # so whether it holds ``offset`` at all is for a CRC-checked survey to say.
            located = segment.find_batch(offset, surveyed=True)
            if located is None or located.position == header.position:
                raise
            return self._read_in(segment, located, offset)

    def _read_in(self, segment: LogSegment, header: BatchHeader, offset: int) -> Record:
        """The record at ``offset`` of the batch ``header`` of ``segment``."""
        if header.magic >= 2 and header.compression == Compression.NONE and not header.is_control:
            # Uncompressed: after one CRC-checked pass over the batch (cached as 8 bytes a record),
            # a read fetches just its own record's bytes.
            bounds = self._batch_cache.bounds(segment, header)
            locator = self._batch_cache.locator
            entry = locator.find(offset, self._segments.removals)
            if entry is not None and entry.bounds is None and entry.header is header:
                locator.keep_bounds(entry, bounds)
            record = segment.read_record(header, bounds, offset)
            if record is None:
                raise OffsetOutOfRangeError(f"offset {offset} of log {self.name} holds no user record")
            return record
        columns = self._batch_cache.columns(segment, header)
        i = int(np.searchsorted(columns.offsets, offset))
        if i >= len(columns) or int(columns.offsets[i]) != offset:
            raise OffsetOutOfRangeError(f"offset {offset} of log {self.name} holds no user record")
        return columns.record(i)

    def _invalidate_cache(self) -> None:
        """Forget every cached batch (bench/engine.py starts each log size with a cold cache)."""
        self._batch_cache.clear()

    def iter_batches(
        self, start: int | None = None, end: int | None = None
    ) -> Iterator[tuple[LogSegment, BatchHeader, bytes]]:
        """(segment, header, batch bytes) of every CRC-valid batch overlapping offsets [start, end).

        ``header.position`` is the batch's position in ``segment.log_path``. A corrupt batch raises
        CorruptRecordError naming the file and position.
        """
        start = self._start_offset if start is None else max(start, self._start_offset)
        end_offset = self._next_offset if end is None else min(end, self._next_offset)
        return self._segments.iter_checked_batches(start, end_offset)

    def iter_records(
        self, start: int | None = None, end: int | None = None, *, isolation: Isolation = READ_UNCOMMITTED
    ) -> Iterator[Record]:
        """User records with offsets in [start, end), in order (control records skipped). Under
        ``read_committed`` as a Kafka consumer sees them: no record of an aborted transaction, nothing
        at or past the last stable offset."""
        lo = self._start_offset if start is None else start
        hi = self._next_offset if end is None else end
        hidden = None
        if isolation == READ_COMMITTED:
            hi = min(hi, self.last_stable_offset)
            hidden = self.hidden_batch() if self.has_aborted_transactions() else None
        for segment, header, data in self.iter_batches(lo, hi):
            if hidden is not None and hidden(header):
                continue
            for record in decode_batch(data, header.at(0), path=segment.log_path):
                if lo <= record.offset < hi:
                    yield record

    # ================================================================== transactions

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the end offset (Kafka's LSO)."""
        return self._transactions.last_stable_offset(self._start_offset, self._next_offset)

    def hidden_batch(self) -> Callable[[BatchHeader], bool]:
        """``hidden(header)``: True for a data batch of an aborted transaction, which a read_committed
        reader never sees (what lies at or past :attr:`last_stable_offset` is the caller's to leave out)."""
        segments = self._segments
        start, end = self._start_offset, self._next_offset
        return self._transactions.hides(segments.all, start, end, segments.removals)

    def has_aborted_transactions(self) -> bool:
        """True when the log holds an aborted transaction (a read_committed reader then skips some)."""
        segments, start, end = self._segments.all, self._start_offset, self._next_offset
        return self._transactions.has_aborted(segments, start, end, self._segments.removals)

    def last_batches_of_producers(self) -> dict[int, ProducerLastBatch]:
        """Each known producer's last batch, as the producer state has it (Kafka's
        lastRecordsOfActiveProducers): the cleaner keeps those batches."""
        with self._lock:
            return self._transactions.last_batches()

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping offsets [start, end), by first offset (from the
        segments' ``.txnindex`` files)."""
        return self._transactions.aborted(self._segments.all, start, end)

    def offset_for_timestamp(self, timestamp_ms: int, *, isolation: Isolation = READ_UNCOMMITTED) -> int:
        """Kafka's offsetsForTimes: the offset of the first record with timestamp >= ``timestamp_ms``;
        under ``read_committed`` the first record from there on that such a reader sees (below the last
        stable offset, in no aborted transaction), TimestampNotFoundError when there is none."""
        found = self._offset_for_timestamp(timestamp_ms)
        if isolation != READ_COMMITTED:
            return found
        visible = first_existing_offset(self, found, isolation=isolation)
        if visible is None:
            raise TimestampNotFoundError(
                f"no committed record of log {self.name} at or after timestamp {timestamp_ms} lies below "
                f"its last stable offset {self.last_stable_offset}"
            )
        return visible

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """Kafka's MAX_TIMESTAMP lookup: (timestamp, offset) of the first record holding the log's
        largest timestamp, None when no record has one. Work: one look at each segment's cached max,
        then the batches from the one the time index names (the record within its batch)."""
        segments = self._segments.all
        best = max(segments, key=lambda segment: segment.max_timestamp, default=None)  # the first of equals
        if best is None or best.max_timestamp < 0:
            return None
        stamp, shallow = best.max_timestamp, best.offset_of_max_timestamp
        for segment, header, data in self.iter_batches(max(shallow, self._start_offset)):
            if segment is not best:
                break
            if header.max_timestamp != stamp:
                continue
            for record in decode_batch(data, header.at(0), path=segment.log_path):
                if record.timestamp == stamp and record.offset >= self._start_offset:
                    return stamp, record.offset
            return stamp, header.last_offset  # a control batch: its own offset, as Kafka's shallow one
        return None

    def _offset_for_timestamp(self, timestamp_ms: int) -> int:
        for segment in self._segments.all:
            if segment.max_timestamp < timestamp_ms and segment is not self._segments.active:
                continue
            found = find_offset_by_timestamp(segment, timestamp_ms, self._start_offset, self._batch_cache)
            if found is not None:
                return found
        raise TimestampNotFoundError(f"no record in log {self.name} has a timestamp >= {timestamp_ms}")

    # ================================================================== config and lifecycle

    def update_config(self, config: LogConfig) -> None:
        """Apply new settings live (they take effect for the next append, roll and retention run)."""
        with self._lock:
            self.config = self._segments.config = config
            for segment in self._segments.all:
                segment.index_interval_bytes = config.index_interval_bytes

    def close(self) -> None:
        """Flush, record the final time entries, trim the indexes, release the owner lock."""
        with self._lock:
            if self._closed:
                return
            snapshot_failed = None
            if not self.read_only:
                self._flush_locked()
                snapshot_failed = self._transactions.close_snapshot(self._next_offset)
            counter().unwatch(self)
            active = self._segments.active
            for segment in self._segments.all:
                segment.close(trim=segment is active and not self.read_only)
            self._removal.purge(2**62)
            if not self.read_only:
                try:
                    save_totals(self.dir, self._segments.all)
                except OSError as exc:  # the next open counts them again
                    log.warning("%s: the view totals were not saved: %s", self.name, exc)
            self._closed = True
            self._release()
            self._batch_cache.clear()
            if snapshot_failed is not None:
                raise snapshot_failed

    def abandon(self) -> None:
        """Close every file without writing anything (no flush, no trim, no snapshot) and release
        the owner lock: for a log whose directory can no longer be trusted (a create that failed
        half-way, files removed under a running daemon)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._segments.all:
                with contextlib.suppress(OSError):
                    segment.close(trim=False)
            self._release()
            self._batch_cache.clear()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Log({str(self.dir)!r}, start={self._start_offset}, end={self._next_offset})"


def _dir_stamp(directory: Path) -> tuple[int, int]:
    """What changes when an entry of ``directory`` is created, removed or renamed."""
    st = os.stat(directory)
    return st.st_mtime_ns, st.st_ctime_ns

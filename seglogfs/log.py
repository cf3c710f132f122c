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
import errno
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .compression import Compression
from .config import LogConfig
from .errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    ReadOnlyLogError,
    RecordTooLargeError,
    TimestampNotFoundError,
)
from .lock import LogLock
from .log_files import (
    CLEANED_SUFFIX,
    CORRUPT_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    base_offset_from_name,
    parse_log_dir_name,
    validate_log_name,
)
from .records import (
    V2_HEADER_SIZE,
    BatchHeader,
    ProducerRecord,
    Record,
    RecordColumns,
    TimestampType,
    batch_max_timestamp,
    decode_batch,
    decode_batch_columns,
    decode_record,
    encode_batch,
    encode_values,
    first_record_stamp,
    record_bounds,
    single_value_batch_size,
    validate_batch,
)
from .segment import (
    LogSegment,
    next_offset_of_file,
    pread_header,
    random_roll_jitter,
)

log = logging.getLogger(__name__)

_BATCH_CACHE_BYTES = 32 * 1024 * 1024  # per log: bounds of ~8M records, or decoded batches


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Where an append landed: offsets [first_offset, last_offset], its max timestamp."""

    first_offset: int
    last_offset: int
    max_timestamp: int


def _now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)


def _swap_damage(path: Path, base_offset: int) -> str | None:
    """Why a ``.log.swap`` cannot replace segments (no batch at all, a batch that fails its CRC, an
    offset below the swap's base, a torn tail), or None when every batch of it is whole and valid."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        end = os.fstat(fd).st_size
        if end == 0:  # renamed into place it would replace the segment of its name with nothing
            return f"{path} is empty"
        position = 0
        while (header := pread_header(fd, position, end, path)) is not None:
            if header.base_offset < base_offset:
                return f"{path} has offset {header.base_offset} below its base at position {position}"
            validate_batch(os.pread(fd, header.size, position), header.at(0), path=path)
            position += header.size
    except CorruptRecordError as exc:
        return str(exc)
    finally:
        os.close(fd)
    return None if position == end else f"{path} has a torn tail at position {position}"


def _discard_new_segment(segment: LogSegment) -> None:
    """Close and delete a segment that was never part of the log (a roll that failed half-way)."""
    segment.close(trim=False)
    for path in (segment.log_path, segment.index_path, segment.time_index_path):
        path.unlink(missing_ok=True)


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
        self._next_offset = 0
        self._start_offset = 0
        self.recovery_point = 0
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms(clock)
        self._dirty: set[LogSegment] = set()
        self._pending_deletes: list[tuple[int, LogSegment, list[Path]]] = []
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
        self._refuse_symlinks()
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
                self._recover_segments(segments, first_to_recover)
        if not segments:
            segments = [self._new_segment(max(log_start_offset, 0))]
        self._set_segments(segments)
        active = segments[-1]
        next_offset, valid_end = active.intact_end()
        if valid_end < active.size:
            # Whatever the clean-shutdown marker says: a preallocated (zero-filled) or garbage tail, or
            # a damaged last batch (the end offset comes from the last intact batch, never its header).
            if self.read_only:
                log.warning(
                    "%s: not reading %d bytes of torn or garbage data at position %d of %s",
                    self.name,
                    active.size - valid_end,
                    valid_end,
                    active.log_path,
                )
                active.size = valid_end
            else:
                self._recover_segments(segments, len(segments) - 1)
                next_offset, _ = active.intact_end()
        if not self.read_only:
            self._grow_active_indexes(active)
        self._next_offset = max(next_offset, active.base_offset)
        self._start_offset = max(log_start_offset, segments[0].base_offset)
        if self._start_offset > self._next_offset:
            self._start_offset = self._next_offset
        # After a clean load or a recovery everything up to the end offset is known good.
        self.recovery_point = self._next_offset

    def _refuse_symlinks(self) -> None:
        """Raise ELOOP when a segment, index or leftover file is a symlink: loading and cleanup open,
        truncate, rename and delete these files, and must never act outside the data dir."""
        with os.scandir(self.dir) as entries:
            for entry in entries:
                if entry.name.split(".", 1)[0].isdigit() and entry.is_symlink():
                    reason = "a segment file is a symbolic link (seglogfs follows no symlinks)"
                    raise OSError(errno.ELOOP, reason, entry.path)

    def _remove_leftovers(self) -> None:
        """Kafka's first load steps: drop .deleted/.cleaned files, finish complete .swap sets."""
        cleaned_bases = []
        for path in self.dir.iterdir():
            if not path.name.split(".", 1)[0].isdigit():
                continue  # not a segment file of Kafka's (nor of ours): never ours to delete
            if path.name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)
            elif path.name.endswith(CLEANED_SUFFIX):
                cleaned_bases.append(base_offset_from_name(path.name))
                path.unlink(missing_ok=True)
        lowest_cleaned = min(cleaned_bases, default=None)
        for swap in self._offset_named(SWAP_SUFFIX):
            base = base_offset_from_name(swap.name)
            if lowest_cleaned is not None and base >= lowest_cleaned:
                swap.unlink(missing_ok=True)  # an incomplete split or clean: discard
        for swap in self._offset_named(LOG_SUFFIX + SWAP_SUFFIX):
            self._complete_swap(swap)
        for swap in self._offset_named(SWAP_SUFFIX):  # index swaps with no .log swap left
            swap.rename(swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))
        # Index files without a .log are deleted, as Kafka does.
        logs = {p.name.split(".", 1)[0] for p in self.dir.glob("*" + LOG_SUFFIX)}
        for path in self.dir.iterdir():
            stem, _, suffix = path.name.partition(".")
            if stem.isdigit() and "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem not in logs:
                path.unlink(missing_ok=True)

    def _offset_named(self, suffix: str) -> list[Path]:
        """The files of this log dir named ``<offset>.<...><suffix>``, sorted."""
        return sorted(
            p for p in self.dir.iterdir() if p.name.endswith(suffix) and p.name.split(".", 1)[0].isdigit()
        )

    def _complete_swap(self, swap_log: Path) -> None:
        """A valid .swap replaces the segments it covers: [swap base, swap next offset).

        A corrupt one replaces nothing: when the segment it would replace is still there, its files
        are set aside as ``*.swap.corrupt`` (kept, never deleted); when it is not, the swap may hold
        the only copy of its records, so the log cannot be opened (it goes offline, files untouched).
        """
        swap_base = base_offset_from_name(swap_log.name)
        damage = _swap_damage(swap_log, swap_base)
        if damage is not None:
            swap_files = sorted(self.dir.glob(f"{swap_base:020d}.*{SWAP_SUFFIX}"))
            if not (self.dir / f"{swap_base:020d}{LOG_SUFFIX}").is_file():
                raise CorruptRecordError(
                    f"{damage}; no segment holds its offsets, so the .swap may be their only copy"
                )
            for path in swap_files:
                os.rename(path, path.with_name(path.name + CORRUPT_SUFFIX))
            log.warning(
                "%s: %s; kept the segment it would replace and set %s aside as *%s",
                self.name,
                damage,
                ", ".join(p.name for p in swap_files),
                CORRUPT_SUFFIX,
            )
            return
        swap_end = next_offset_of_file(swap_log, swap_base)
        for path in list(self.dir.iterdir()):
            stem, _, suffix = path.name.partition(".")
            if stem.isdigit() and "." + suffix in SEGMENT_SUFFIXES and swap_base <= int(stem) < swap_end:
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
        """Rebuild the missing indexes of a segment that is otherwise trusted, without cutting its .log
        (a damaged batch in a sealed segment costs only itself). Indexes that exist are checked against
        the .log when first used, and rebuilt then if they are wrong (LogSegment.index_problem)."""
        if segment.needs_index_rebuild:
            log.warning("%s: index missing, rebuilding it from %s", self.name, segment.log_path)
            segment.rebuild_indexes()

    def _recover_segments(self, segments: list[LogSegment], first: int) -> None:
        """Validate every batch of segments[first:], rebuilding their indexes; cut the last one's torn
        tail. Kafka cuts at the first bad batch and deletes every later segment; seglogfs keeps the
        intact batches after damage and every later segment (they may hold the only copy of their
        records): the damage stays in place, its offsets unreadable, and appends go after the last
        intact batch of the active segment."""
        self._set_segments(segments)  # each segment's offset limit: a witness for its last batch
        for segment in segments[first:]:
            truncated = segment.recover(cut_torn_tail=segment is segments[-1])
            if truncated:
                log.warning(
                    "%s: recovery cut %d bytes of torn or corrupt data at position %d of %s",
                    self.name,
                    truncated,
                    segment.size,
                    segment.log_path,
                )

    def _set_segments(self, segments: list[LogSegment]) -> None:
        # Copy-on-write: readers hold on to whichever list they fetched.
        self._segments = list(segments)
        for segment, following in zip(segments, [*segments[1:], None], strict=True):
            # A sealed segment's batches end before the next one begins: a witness for their offsets.
            segment.offset_limit = following.base_offset if following is not None else None

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
        for segment in reversed(self._segments):
            if segment.max_timestamp >= 0:
                return segment.max_timestamp
            last = segment.last_intact_batch()
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

    def append_split(self, items: Sequence[ProducerRecord] | Sequence[bytes]) -> list[AppendInfo]:
        """Append ``items`` in order as one batch, or as several consecutive batches when together
        they exceed ``max.message.bytes``: each batch as long as fits, judged by its exact encoded
        (compressed) size. ``bytes`` items are key-less values sharing one timestamp, as in
        :meth:`append_values`; :class:`ProducerRecord` items keep keys, headers and timestamps.

        Every batch is encoded before the first is appended, so a record too large even alone raises
        :class:`RecordTooLargeError` (its ``index`` names it) with nothing appended. All or nothing:
        the batches go in with one write (see :meth:`_append_batches`), so an I/O error (a full disk)
        leaves none of them.
        """
        if not items:
            raise ValueError("nothing to append")
        with self._lock:
            self._check_writable()
            now = _now_ms(self._clock)
            encode = self._split_encoder(items, now)
            limit = self.config.max_message_bytes
            planned: list[tuple[bytes, int]] = []
            start, base, n = 0, self._next_offset, len(items)
            whole = encode(0, n, base)
            if len(whole) <= limit:
                planned.append((whole, n))
                start = n
            while start < n:
                end, batch = self._longest_fitting(encode, start, n, base, limit)
                planned.append((batch, end - start))
                base += end - start
                start = end
            return self._append_batches(planned, now)

    def _split_encoder(
        self, items: Sequence[ProducerRecord] | Sequence[bytes], now: int
    ) -> Callable[[int, int, int], bytes]:
        """``encode(start, end, base_offset)``: the batch of ``items[start:end]`` at ``base_offset``."""
        codec, timestamp_type = self._codec(), self._timestamp_type()
        if isinstance(items[0], bytes | bytearray | memoryview):
            return lambda start, end, base: encode_values(
                items[start:end], base, now, compression=codec, timestamp_type=timestamp_type
            )
        return lambda start, end, base: encode_batch(
            items[start:end], base, now_ms=now, compression=codec, timestamp_type=timestamp_type
        )

    def _longest_fitting(
        self, encode: Callable[[int, int, int], bytes], start: int, n: int, base: int, limit: int
    ) -> tuple[int, bytes]:
        """The largest ``end`` (> start) whose batch ``items[start:end]`` fits ``limit``, and that batch:
        grows the batch 1, 2, 4... records until one does not fit, then bisects the last step. Costs
        O(k log k) encoding for a batch of k records, however many items remain."""
        best = encode(start, start + 1, base)
        if len(best) > limit:
            raise RecordTooLargeError(
                f"record {start} (of {n}) alone makes a batch of {len(best)} bytes for log {self.name}, "
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

    def _codec(self) -> Compression:
        return Compression.from_name(self.config.codec)

    def _timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.config.log_append_time else TimestampType.CREATE_TIME

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyLogError(f"log {self.name} is open read-only")
        if self._closed:
            raise ReadOnlyLogError(f"log {self.name} is closed")

    def max_value_bytes(self) -> int:
        """The largest value ``append``, ``append.raw`` and :meth:`append_values` can take as a record of
        its own: its one-record batch (no key, no headers) fits ``max.message.bytes`` exactly; -1 when
        none does. With a compression codec this is the uncompressed size (Kafka's producer checks
        the serialized size before compression too); a batch that compression makes larger, as
        incompressible data can, is still refused at append."""
        limit = self.config.max_message_bytes
        size = limit - V2_HEADER_SIZE - 7  # a record needs at least 7 bytes besides its value
        while size >= 0 and single_value_batch_size(size) > limit:
            size -= 1
        return max(size, -1)

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
            # Kafka checks the whole (possibly compressed) batch against max.message.bytes.
            if len(batch) > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {len(batch)} bytes for log {self.name} exceeds max.message.bytes="
                    f"{self.config.max_message_bytes}"
                )
        infos, first = [], self._next_offset
        for batch, count in batches:
            max_ts = batch_max_timestamp(batch)
            infos.append(AppendInfo(first, first + count - 1, max_ts))
            first += count
        total = sum(len(batch) for batch, _ in batches)
        segment = self._maybe_roll(total, max(i.max_timestamp for i in infos), infos[-1].last_offset, now_ms)
        placed = zip(batches, infos, strict=True)
        segment.append_batches([(batch, info.last_offset, info.max_timestamp) for (batch, _), info in placed])
        self._dirty.add(segment)
        self._next_offset = first
        self._unflushed_messages += sum(count for _, count in batches)
        if self._unflushed_messages >= self.config.flush_messages:
            self._flush_locked()
        return infos

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

    def _grow_active_indexes(self, active: LogSegment) -> None:
        """After loading, grow the active segment's indexes back to ``segment.index.bytes``. On a full
        disk they stay trimmed (full), so the next append rolls and that roll reports ENOSPC."""
        try:
            active.resize_indexes(self.config.segment_index_bytes)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            log.warning("%s: no room to preallocate the indexes of %s (%s); appends roll first",
                        self.name, active.log_path.name, exc.strerror)

    def roll(self) -> LogSegment:
        """Seal the active segment (final time entry, trimmed indexes); start a new one at the end offset."""
        with self._lock:
            self._check_writable()
            active = self._segments[-1]
            if active.size == 0 and active.base_offset == self._next_offset:
                # Its indexes may have stayed small when the disk was full at load: grow them now.
                active.resize_indexes(self.config.segment_index_bytes)
                return active
            # The new segment and its preallocated indexes first: when the disk has no room for them,
            # the roll fails (ENOSPC) with nothing changed, and the next append tries again.
            new = self._new_segment(self._next_offset)
            try:
                new.resize_indexes(self.config.segment_index_bytes)
                active.on_become_inactive()
                active.flush()  # Kafka flushes the sealed segment right after a roll
            except BaseException:
                _discard_new_segment(new)
                raise
            self._dirty.discard(active)
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
                        if not self._expired(segment, now, cfg.retention_ms):
                            break
                        by_time += 1
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
            # Open until purged (as in Kafka): a reader in the middle of one, on an older snapshot of the
            # segment list, goes on reading the renamed files for file.delete.delay.ms. Listed as
            # deleted before they leave the segment list: a reader finds each in one list or the other.
            pending = [(now + cfg.file_delete_delay_ms, segment, []) for segment in doomed]
            self._pending_deletes.extend(pending)
            self._set_segments(kept)
            self._start_offset = max(self._start_offset, kept[0].base_offset)
            self._invalidate_cache()
            for _, segment, paths in pending:
                self._dirty.discard(segment)
                name = segment.log_path.name
                paths.extend(segment.rename_suffix(DELETED_SUFFIX))
                log.info("%s: retention deleted segment %s", self.name, name)
            self._purge_deleted(now)
            return len(doomed)

    def _expired(self, segment: LogSegment, now_ms: int, retention_ms: int) -> bool:
        """Whether ``segment`` is older than ``retention_ms``: by its time index (Kafka's largest
        timestamp), confirmed by its last batch's own header, so a wrong index never deletes data."""
        if now_ms - segment.largest_timestamp() <= retention_ms:
            return False
        last = segment.last_intact_batch()
        if last is not None and last.max_timestamp >= 0 and now_ms - last.max_timestamp <= retention_ms:
            log.warning(
                "%s: not deleting %s: its time index says %d, its last batch %d",
                self.name, segment.log_path, segment.largest_timestamp(), last.max_timestamp,
            )
            return False
        return True

    @property
    def deleted_segments(self) -> list[LogSegment]:
        """Segments retention deleted whose files (renamed ``.deleted``) are kept until
        ``file.delete.delay.ms`` has passed, oldest first: a reader in the middle of one may finish it."""
        return [segment for _, segment, _ in self._pending_deletes]

    def _purge_deleted(self, now_ms: int) -> None:
        due = [p for p in self._pending_deletes if p[0] <= now_ms]
        self._pending_deletes = [p for p in self._pending_deletes if p[0] > now_ms]
        for _, segment, paths in due:
            segment.close(trim=False)
            for path in paths:
                path.unlink(missing_ok=True)

    # ================================================================== reading

    @staticmethod
    def _segment_for(offset: int, segments: list[LogSegment]) -> int:
        """Index in ``segments`` (one snapshot of the list, which retention and rolls replace) of the
        segment that would hold ``offset``."""
        return max(bisect.bisect_right(segments, offset, key=lambda s: s.base_offset) - 1, 0)

    def _check_range(self, offset: int) -> None:
        if not self._start_offset <= offset < self._next_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside log {self.name} [{self._start_offset}, {self._next_offset})"
            )

    def lookup(self, offset: int) -> tuple[LogSegment, BatchHeader]:
        """The segment and batch holding ``offset``: bisect, offset index, then a header scan."""
        self._check_range(offset)
        segments = self._segments
        i = self._segment_for(offset, segments)
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
            bounds = self._cached(("bounds", segment.base_offset, header.position), segment, header)
            i = bounds.index_of(header, offset)
            if i < 0:
                raise OffsetOutOfRangeError(f"offset {offset} of log {self.name} holds no user record")
            start, end = bounds.span(i)
            data = segment.read(header.position + V2_HEADER_SIZE + start, end - start)
            record = decode_record(data, header, path=segment.log_path)
            if record.offset != offset:  # never another offset's bytes
                message = f"the record read for offset {offset} says offset {record.offset}"
                raise CorruptRecordError(message, segment.log_path, header.position)
            return record
        columns = self._columns(segment, header)
        i = int(np.searchsorted(columns.offsets, offset))
        if i >= len(columns) or int(columns.offsets[i]) != offset:
            raise OffsetOutOfRangeError(f"offset {offset} of log {self.name} holds no user record")
        return columns.record(i)

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
        try:
            validate_batch(data, local, path=segment.log_path)
            if key[0] == "bounds":
                value = record_bounds(data, local, path=segment.log_path)
                weight = value.nbytes
            else:
                value = decode_batch_columns(data, local, path=segment.log_path)
                weight = value.data.nbytes
        except CorruptRecordError as exc:  # positions within ``data``: name the file's
            raise exc.at(segment.log_path, header.position) from None
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
        i = self._segment_for(start, segments)
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
                try:
                    validate_batch(data, header.at(0))
                except CorruptRecordError as exc:
                    raise exc.at(segment.log_path, header.position) from None
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
        stamp, indexed_offset = segment.time_index.lookup(timestamp_ms - 1)
        if stamp >= 0 and not segment.time_entry_holds(stamp, indexed_offset):
            # A damaged entry could send the search past the answer: search from the segment start.
            wrong = f"entry ({stamp}, offset {indexed_offset}) does not match the .log"
            segment.index_contradicted(f"{segment.time_index_path}: {wrong}")
            indexed_offset = segment.base_offset
        start = max(indexed_offset, self._start_offset, segment.base_offset)
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
                found = self._first_at_or_after(segment, batch, timestamp_ms)
            except CorruptRecordError:
                continue  # a damaged batch answers nothing; the next intact one may
            # The answer must be an offset a read finds in this very batch: a batch whose offsets
            # are damage (a changed baseOffset) would name another record's offset.
            if found is not None and self._located_in(segment, batch, found):
                return found
        return None

    def _first_at_or_after(self, segment: LogSegment, batch: BatchHeader, timestamp_ms: int) -> int | None:
        """The offset of the first record of ``batch`` with timestamp >= ``timestamp_ms``, or None."""
        if batch.magic >= 2 and batch.compression == Compression.NONE:
            # Often the batch's first record already qualifies (always so for a batch whose
            # records share one timestamp): a 32-byte read answers without decoding the batch.
            # Like Kafka's search, this reads no CRC; reading the record itself checks it.
            first = first_record_stamp(segment.read(batch.position + V2_HEADER_SIZE, 32), batch)
            if first is not None and first[1] >= timestamp_ms and first[0] >= self._start_offset:
                return first[0]
        columns = self._columns(segment, batch)
        hits = np.flatnonzero((columns.timestamps >= timestamp_ms) & (columns.offsets >= self._start_offset))
        return int(columns.offsets[hits[0]]) if hits.size else None

    @staticmethod
    def _located_in(segment: LogSegment, batch: BatchHeader, offset: int) -> bool:
        """Whether a lookup of ``offset`` lands on ``batch`` (False when it lands on damage)."""
        try:
            located = segment.find_batch(offset)
        except CorruptRecordError:
            return False
        return located is not None and located.position == batch.position

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

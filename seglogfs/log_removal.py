"""The segment removals of a :class:`~seglogfs.log.Log` (mixed into it): retention's deletions and
the log cleaner's swaps. Removed segments are renamed ``.deleted`` at once and stay open, readable by
a reader in the middle of one, until ``file.delete.delay.ms`` has passed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .batch_cache import BatchCache
from .config import LogConfig
from .log_files import DELETED_SUFFIX
from .log_segments import LogSegments
from .log_transactions import LogTransactions
from .retention import deletable_segment_count
from .segment import LogSegment
from .segment_swap import replace_files, txn_index_path
from .timestamps import clock_ms

__all__ = ["SegmentRemoval"]

log = logging.getLogger("seglogfs.log")


class SegmentRemoval:
    """Retention and segment replacement, under the log's lock (see :class:`~seglogfs.log.Log`)."""

    # Provided by Log.
    dir: Path
    name: str
    config: LogConfig
    read_only: bool
    _clock: Callable[[], float]
    _lock: threading.RLock
    _segments: LogSegments
    _start_offset: int
    _closed: bool
    _offline_reason: str | None
    _dirty: set[LogSegment]
    _pending_deletes: list[tuple[int, LogSegment, list[Path]]]
    _batch_cache: BatchCache
    _transactions: LogTransactions

    if TYPE_CHECKING:

        def roll(self) -> LogSegment: ...

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
            self._purge_deleted(now)
            return max(deletable, 0)

    def _delete_segments(self, doomed: list[LogSegment], kept: list[LogSegment], now_ms: int) -> None:
        """Take ``doomed`` out of the log: renamed ``.deleted``, purged after ``file.delete.delay.ms``."""
        # Open until purged (as in Kafka): a reader in the middle of one, on an older snapshot of the
        # segment list, goes on reading the renamed files for file.delete.delay.ms. Listed as
        # deleted before they leave the segment list: a reader finds each in one list or the other.
        pending = [(now_ms + self.config.file_delete_delay_ms, segment, []) for segment in doomed]
        self._pending_deletes.extend(pending)
        self._segments.replace(kept)
        self._start_offset = max(self._start_offset, kept[0].base_offset)
        self._batch_cache.clear()
        try:
            self._transactions.forget_snapshots_below(kept[0].base_offset)
        except OSError as exc:  # a snapshot left behind is harmless: the next load drops it
            log.warning("%s: old producer snapshots not deleted: %s", self.name, exc)
        for _, segment, paths in pending:
            self._dirty.discard(segment)
            name = segment.log_path.name
            paths.extend(segment.rename_suffix(DELETED_SUFFIX))
            log.info("%s: retention deleted segment %s", self.name, name)

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
            replace_files(self.dir, base_offset, old)
            new = self._segments.new_segment(base_offset)
            self._segments.replace([*current[:at], new, *current[at + len(old) :]])
            due = now_ms + self.config.file_delete_delay_ms
            for segment in old:  # open until purged: a reader in the middle of one finishes it
                # txn_index_path follows the renamed .log: <base>.txnindex.deleted
                paths = [segment.log_path, segment.index_path, segment.time_index_path]
                paths.append(txn_index_path(segment))
                self._pending_deletes.append((due, segment, paths))
                self._dirty.discard(segment)
            self._batch_cache.clear()
            return new

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


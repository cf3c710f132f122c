"""The segment removals of a :class:`~seglogfs.log.Log`: retention's deletions (a moved log start,
Kafka's DeleteRecords, too) and the log cleaner's swaps. Removed segments are renamed ``.deleted`` at
once and stay open, readable by a reader in the middle of one, until ``file.delete.delay.ms`` has
passed. The log decides what goes (under its lock) and keeps its own bookkeeping; :class:`SegmentRemoval`
takes segments out of its :class:`~seglogfs.log_segments.LogSegments` and owns their files until they
are purged."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from .log_files import DELETED_SUFFIX
from .log_segments import LogSegments
from .segment import LogSegment
from .segment_swap import replace_files, txn_index_path
from .totals_file import totals_path

__all__ = ["SegmentRemoval"]

log = logging.getLogger("seglogfs.log")


class SegmentRemoval:
    """The removals from the segments of log ``name``; called under the log's lock."""

    def __init__(self, name: str, segments: LogSegments) -> None:
        self._name = name
        self._segments = segments
        #: (due time in ms, segment, its renamed files), oldest first
        self._pending: list[tuple[int, LogSegment, list[Path]]] = []

    def delete(self, doomed: Sequence[LogSegment], kept: list[LogSegment], due_ms: int) -> None:
        """Take ``doomed`` out of the list (``kept`` stays): renamed ``.deleted``, purged at ``due_ms``."""
        # Open until purged (as in Kafka): a reader in the middle of one, on an older snapshot of the
        # segment list, goes on reading the renamed files for file.delete.delay.ms. Listed as
        # deleted before they leave the segment list: a reader finds each in one list or the other.
        pending: list[tuple[int, LogSegment, list[Path]]] = [(due_ms, segment, []) for segment in doomed]
        self._keep_superseded(doomed)
        self._pending.extend(pending)
        # The list first, with the caller's new start offset: the file work below takes its time, and
        # a reader sees the log without them (a new `cat records` starts at the new start offset).
        self._segments.replace(kept)
        _forget_totals(self._segments.dir, doomed)
        for _, segment, paths in pending:
            name = segment.log_path.name
            paths.extend(segment.rename_suffix(DELETED_SUFFIX))
            log.info("%s: retention deleted segment %s", self._name, name)

    def replace(self, old: Sequence[LogSegment], at: int, base_offset: int, due_ms: int) -> LogSegment:
        """Swap in the cleaned segment at ``base_offset`` for the consecutive segments ``old``, found at
        index ``at`` of the current list (:mod:`seglogfs.segment_swap`); the old ones are purged at
        ``due_ms``. Returns the new segment."""
        current = self._segments.all
        self._keep_superseded(old)
        _forget_totals(self._segments.dir, old)
        replace_files(self._segments.dir, base_offset, old)
        new = self._segments.new_segment(base_offset)
        self._segments.replace([*current[:at], new, *current[at + len(old) :]])
        for segment in old:  # open until purged: a reader in the middle of one finishes it
            # txn_index_path follows the renamed .log: <base>.txnindex.deleted
            paths = [segment.log_path, segment.index_path, segment.time_index_path, txn_index_path(segment)]
            self._pending.append((due_ms, segment, paths))
        return new

    def _keep_superseded(self, renamed: Sequence[LogSegment]) -> None:
        """Before ``renamed`` take their ``.deleted`` names: a segment still waiting for its purge under
        one of those names (the cleaner replaced a segment at the same base offset again within
        ``file.delete.delay.ms``) keeps its own file open, so a reader in the middle of it reads its
        bytes to the end, and its purge leaves the names, now the newer segment's, alone."""
        bases = {segment.base_offset for segment in renamed}
        for _, segment, paths in self._pending:
            if segment.base_offset in bases and paths:
                with contextlib.suppress(FileNotFoundError):  # removed under the daemon: nothing to keep
                    segment.hold_open()
                paths.clear()

    @property
    def deleted_segments(self) -> list[LogSegment]:
        """The removed segments whose files are kept until they are due, oldest first."""
        return [segment for _, segment, _ in self._pending]

    def purge(self, now_ms: int) -> None:
        """Close the removed segments due by ``now_ms`` and delete their files."""
        due = [p for p in self._pending if p[0] <= now_ms]
        self._pending = [p for p in self._pending if p[0] > now_ms]
        for _, segment, paths in due:
            segment.close(trim=False)
            for path in paths:
                path.unlink(missing_ok=True)


def _forget_totals(directory: Path, leaving: Sequence[LogSegment]) -> None:
    """Remove the saved view totals of segments that leave the log (retention, the cleaner): a log
    that runs for months keeps only its live segments' files, not one per segment it ever had."""
    for segment in leaving:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(totals_path(directory, segment.base_offset))

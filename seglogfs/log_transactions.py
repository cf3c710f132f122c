"""LogTransactions: a log's producer state through its life, as Kafka's UnifiedLog and LogLoader keep it.

- At open (:meth:`LogTransactions.load`): after a clean shutdown with no snapshot, nothing is scanned
  and empty snapshots are written at the last two segment bases and the log end (Kafka's shortcut: a
  log without snapshots was written without transactions). Otherwise the newest usable snapshot is
  loaded and the batches after it are replayed; a snapshot above the first segment the loader
  recovered is not used, and the ``.txnindex`` of every recovered segment is rebuilt from the replay
  (Kafka's ``LogSegment.recover``). A writable log then snapshots its state at the log end.
- A snapshot at every roll (at the new segment's base) and at a clean close; retention deletes the
  snapshots below the new log start.
- For readers: the last stable offset and the aborted transactions overlapping a range (from the
  segments' ``.txnindex`` files), which :func:`~seglogfs.read_committed.committed_batches` needs.

Our own appends carry no producer id, so they never change the state; only data written by a broker
(a copied data dir) holds transactions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import CorruptIndexError, CorruptRecordError
from .producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    EndTxnMarker,
    ProducerStateManager,
    end_txn_marker,
)
from .read_committed import hidden_batches
from .records import BatchHeader
from .segment import Damage, LogSegment
from .transaction_index import AbortedTxn, collect_aborted_transactions

__all__ = ["LogTransactions"]

log = logging.getLogger(__name__)


class LogTransactions:
    """The producer state of one log and its snapshots; the owning :class:`~seglogfs.log.Log`
    serialises every change (load, roll, close, retention)."""

    def __init__(
        self,
        directory: Path,
        *,
        read_only: bool,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.name = Path(directory).name
        self.read_only = read_only
        self.state = ProducerStateManager(
            directory, producer_id_expiration_ms=producer_id_expiration_ms, read_only=read_only
        )
        # (segment list, log start, its hidden_batches) of the last list asked about
        self._hides_for: tuple[Sequence[LogSegment], int, Callable[[BatchHeader], bool]] | None = None

    # ------------------------------------------------------------------ opening

    def load(
        self,
        segments: Sequence[LogSegment],
        log_start: int,
        log_end: int,
        *,
        recovered_from: int | None,
        clean_shutdown: bool,
        now_ms: int,
    ) -> None:
        """Build the state of the loaded ``segments`` (see the module docstring)."""
        state = self.state
        recovered_from = self._first_insane_txn_index(segments, recovered_from)
        usable_up_to = log_end if recovered_from is None else recovered_from
        has_snapshot = any(log_start <= o <= usable_up_to for o in state.snapshot_offsets())
        if clean_shutdown and recovered_from is None and not has_snapshot:
            if not self.read_only:
                bases = [s.base_offset for s in segments[-2:]]
                for offset in sorted({*bases, log_end}):
                    self.snapshot(offset)
            state.update_map_end_offset(log_end)
            return
        start = state.load_latest(log_start, usable_up_to, now_ms)
        rebuild_from = None if self.read_only else recovered_from
        if rebuild_from is not None:
            for segment in segments:
                if segment.base_offset >= rebuild_from:
                    segment.txn_index.reset()
        for segment in segments:
            if segment.offset_limit is None or segment.offset_limit > start:
                rebuild = rebuild_from is not None and segment.base_offset >= rebuild_from
                self._replay(segment, start, log_end, rebuild=rebuild)
        state.update_map_end_offset(log_end)
        if not self.read_only and start != log_end:
            self.snapshot(log_end)

    def _first_insane_txn_index(
        self, segments: Sequence[LogSegment], recovered_from: int | None
    ) -> int | None:
        """``recovered_from``, or the base of an earlier segment whose ``.txnindex`` fails Kafka's sanity
        check (the only index Kafka checks at load): that segment's and every later one's are rebuilt."""
        if self.read_only:
            return recovered_from
        for segment in segments:
            if recovered_from is not None and segment.base_offset >= recovered_from:
                break
            try:
                segment.txn_index.sanity_check()
            except CorruptIndexError as exc:
                log.warning("%s: %s; rebuilding it from the log", self.name, exc)
                return segment.base_offset
        return recovered_from

    def _replay(self, segment: LogSegment, start: int, end: int, *, rebuild: bool) -> None:
        """Apply the batches of ``segment`` in [start, end) to the state; ``rebuild``: append the
        aborted transactions whose markers it holds to its (emptied) ``.txnindex``."""
        if segment.size == 0:  # nothing to replay (a reader's segment may not even have a file)
            return
        position = 0
        if segment.base_offset < start:
            located = segment.find_batch(start)
            if located is None:
                return
            position = located.position
        state = self.state
        for header, data in segment.iter_batches(position, on_damage=self._damage_reporter(segment)):
            if header.last_offset < start:
                continue
            if header.base_offset >= end:
                break
            completed = state.update(header, self._marker(segment, header, data))
            if completed is None:
                continue
            last_stable = state.last_stable_offset(completed)
            if completed.is_aborted and rebuild:
                pid, first, last = completed.producer_id, completed.first_offset, completed.last_offset
                segment.txn_index.append(AbortedTxn(pid, first, last, last_stable))
            state.complete_txn(completed)

    def _marker(self, segment: LogSegment, header: BatchHeader, data: bytes) -> EndTxnMarker | None:
        if not header.is_control or header.producer_id < 0:
            return None
        try:
            return end_txn_marker(header, data, path=segment.log_path)
        except CorruptRecordError as exc:  # a CRC-valid batch whose marker does not parse: no marker
            log.warning("%s: ignoring a transaction marker that does not parse: %s", self.name, exc)
            return None

    def _damage_reporter(self, segment: LogSegment) -> Callable[[Damage], None]:
        def report(damage: Damage) -> None:
            log.warning("%s: producer state skips damage in %s: %s", self.name, segment.log_path, damage)

        return report

    # ------------------------------------------------------------------ changes

    def snapshot(self, offset: int) -> None:
        """Write the state as ``<offset>.snapshot`` (at open, at a roll: the new base, at a close: the
        end). A failure (a full disk) costs only a longer replay at the next open: logged, not raised."""
        self.state.update_map_end_offset(offset)
        try:
            self.state.take_snapshot()
        except OSError as exc:
            log.warning("%s: no producer snapshot at offset %d: %s", self.name, offset, exc)

    def forget_snapshots_below(self, offset: int) -> None:
        """Retention moved the log start to ``offset``: older snapshots are of no use."""
        self.state.delete_snapshots_below(offset)

    # ------------------------------------------------------------------ readers

    def last_stable_offset(self, log_end: int) -> int:
        """The first offset of the oldest open transaction, else ``log_end``."""
        first_unstable = self.state.first_unstable_offset()
        return log_end if first_unstable is None else min(first_unstable, log_end)

    def hides(
        self, segments: Sequence[LogSegment], log_start: int, log_end: int
    ) -> Callable[[BatchHeader], bool]:
        """``hidden(header)`` (:func:`~seglogfs.read_committed.hidden_batches`) for the aborted
        transactions of ``segments``, kept until the segment list changes."""
        # the list itself is kept (not its id, which a new list may reuse): a new one means a roll,
        # retention or a clean, whose .txnindex files must be read again
        cached = self._hides_for
        if cached is None or cached[0] is not segments or cached[1] != log_start:
            cached = (segments, log_start, hidden_batches(self.aborted(segments, log_start, log_end)))
            self._hides_for = cached
        return cached[2]

    @staticmethod
    def aborted(segments: Sequence[LogSegment], start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, end), from the ``.txnindex`` of the segments
        from the one holding ``start`` on (stopping once a segment's entries complete the range)."""
        from_segment = [s for s in segments if s.offset_limit is None or s.offset_limit > start]
        return collect_aborted_transactions((s.txn_index for s in from_segment), start, end)

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
  segments' ``.txnindex`` files), which :func:`~seglogfs.read_committed.hidden_batches` needs.

Our own appends carry no producer id, so they never change the state; an idempotent Kafka client's
batches do (:meth:`LogTransactions.appended`); only data written by a broker (a copied data dir) holds
transactions.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from .cleaner_transactions import ProducerLastBatch
from .errors import CorruptIndexError, CorruptRecordError
from .log_files import TXN_INDEX_SUFFIX
from .log_loader import LoadedLog
from .log_segments import segment_index_for
from .producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    EndTxnMarker,
    ProducerStateEntry,
    ProducerStateManager,
    end_txn_marker,
)
from .read_committed import hidden_batches
from .records import BatchHeader
from .segment import Damage, LogSegment
from .transaction_index import AbortedTxn

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
        self.dir = Path(directory)
        self.name = self.dir.name
        self.read_only = read_only
        self.state = ProducerStateManager(
            directory, producer_id_expiration_ms=producer_id_expiration_ms, read_only=read_only
        )
        # ((removals, log start), any aborted?, hidden_batches) of the last state asked about
        self._hides_for: tuple[tuple[int, int], bool, Callable[[BatchHeader], bool]] | None = None
        #: segment uid -> its aborted transactions, used instead of its .txnindex file: a reader's
        #: replay (a reader writes nothing, and never cleans or deletes a segment)
        self._memory: dict[int, list[AbortedTxn]] = {}
        self._pending: Callable[[], None] | None = None  # a reader's deferred load
        self._pending_lock = threading.Lock()

    # ------------------------------------------------------------------ opening

    def load(self, loaded: LoadedLog, *, clean_shutdown: bool, now_ms: int) -> None:
        """Build the state of the ``loaded`` log (see the module docstring). A reader's log does it at
        its first question about transactions: most readers (a read_uncommitted Spark query, which
        opens its logs several times a micro-batch) never ask, and need no replay."""
        build = functools.partial(self._load, loaded, clean_shutdown, now_ms)
        if self.read_only:
            self._pending = build
        else:
            build()

    def _ready(self) -> None:
        """Run a reader's deferred :meth:`load` (once, whichever thread asks first)."""
        if self._pending is not None:
            with self._pending_lock:
                if self._pending is not None:
                    self._pending()
                    self._pending = None

    def _load(self, loaded: LoadedLog, clean_shutdown: bool, now_ms: int) -> None:
        segments, log_start, log_end = loaded.segments, loaded.log_start_offset, loaded.next_offset
        recovered_from = loaded.recovered_from
        state = self.state
        if not self.read_only:
            for leftover in self.dir.glob("*" + TXN_INDEX_SUFFIX + ".tmp"):  # a rewrite a crash cut short
                leftover.unlink(missing_ok=True)
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
        if recovered_from is not None and start > recovered_from:
            # No usable snapshot, and the log start lies inside the first recovered segment: replay
            # it whole from its base, as Kafka's segment recovery does, so its .txnindex is rebuilt.
            start = recovered_from
        rebuilt: dict[LogSegment, list[AbortedTxn]] = {}
        for segment in segments:
            if segment.offset_limit is not None and segment.offset_limit <= start:
                continue
            aborted = self._replay(segment, start, log_end)
            if segment.base_offset < start:
                continue  # replayed in part: its markers before the snapshot were not seen
            if recovered_from is not None and segment.base_offset >= recovered_from:
                rebuilt[segment] = aborted
            elif self.read_only:
                self._memory[segment.uid] = aborted  # a reader cannot rebuild the file: it keeps its own
        self._write_txn_indexes(rebuilt)
        state.update_map_end_offset(log_end)
        if not self.read_only and start != log_end:
            self.snapshot(log_end)

    def _write_txn_indexes(self, rebuilt: dict[LogSegment, list[AbortedTxn]]) -> None:
        """Replace each segment's ``.txnindex`` with its rebuilt entries, file by file and atomically
        (written only once the whole replay is done: a crash leaves the old files, and the next open
        rebuilds again). A reader keeps them in memory instead. A file that cannot be written (a full
        disk) fails the open, and the log stays offline until there is room: entries kept only in
        memory would be lost at the next start, which trusts the files on disk (as Kafka does)."""
        for segment, entries in rebuilt.items():
            if self.read_only:
                self._memory[segment.uid] = entries
            else:
                segment.txn_index.rewrite(entries)

    def _first_insane_txn_index(
        self, segments: Sequence[LogSegment], recovered_from: int | None
    ) -> int | None:
        """``recovered_from``, or the base of an earlier segment whose ``.txnindex`` fails Kafka's sanity
        check (the only index Kafka checks at load): that segment's and every later one's are rebuilt
        (a reader's are rebuilt in memory)."""
        for segment in segments:
            if recovered_from is not None and segment.base_offset >= recovered_from:
                break
            try:
                segment.txn_index.sanity_check()
            except CorruptIndexError as exc:
                log.warning("%s: %s; rebuilding it from the log", self.name, exc)
                return segment.base_offset
        return recovered_from

    def _replay(self, segment: LogSegment, start: int, end: int) -> list[AbortedTxn]:
        """Apply the batches of ``segment`` in [start, end) to the state; the aborted transactions whose
        markers it holds, with their last stable offsets (its ``.txnindex`` entries)."""
        if segment.size == 0:  # nothing to replay (a reader's segment may not even have a file)
            return []
        position = 0
        if segment.base_offset < start:
            located = segment.find_batch(start)
            if located is None:
                return []
            position = located.position
        walk = segment.iter_batches(position, on_damage=self._damage_reporter(segment))
        batches = itertools.takewhile(
            lambda batch: batch[0].base_offset < end, (b for b in walk if b[0].last_offset >= start)
        )
        completed = self.state.replay(batches, marker=functools.partial(self._marker, segment))
        return [
            AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable)
            for txn, last_stable in completed
            if txn.is_aborted
        ]

    def _marker(
        self, segment: LogSegment, header: BatchHeader, data: bytes | memoryview
    ) -> EndTxnMarker | None:
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
        """Write the state as ``<offset>.snapshot`` (at open, at a roll: the new base). A failure (a
        full disk) costs only a longer replay at the next open: logged, not raised."""
        self.state.update_map_end_offset(offset)
        try:
            self.state.take_snapshot()
        except OSError as exc:
            log.warning("%s: no producer snapshot at offset %d: %s", self.name, offset, exc)

    def close_snapshot(self, offset: int) -> OSError | None:
        """The snapshot of a clean close, at the log end. Its failure is returned (the close must then
        not count as clean: the next clean open would trust the files and start from an empty state)
        when the state holds producers; with none, it costs nothing and is only logged."""
        self.state.update_map_end_offset(offset)
        try:
            self.state.take_snapshot()
        except OSError as exc:
            if self.state.producers:
                return exc
            log.warning("%s: no producer snapshot at offset %d: %s", self.name, offset, exc)
        return None

    def producer(self, producer_id: int) -> ProducerStateEntry | None:
        """What the state knows of ``producer_id`` (None when nothing)."""
        return self.state.producers.get(producer_id)

    def appended(self, header: BatchHeader) -> None:
        """A data batch of an idempotent producer was appended (at ``header``'s offsets)."""
        self.state.update(header, None)

    def forget_snapshots_below(self, offset: int) -> None:
        """Retention moved the log start to ``offset``: older snapshots are of no use."""
        self.state.delete_snapshots_below(offset)

    # ------------------------------------------------------------------ readers

    def last_stable_offset(self, log_start: int, log_end: int) -> int:
        """The first offset of the oldest open transaction, else ``log_end``; never below ``log_start``
        (retention may delete a hanging transaction's first segment: Kafka then moves it up too)."""
        self._ready()
        first_unstable = self.state.first_unstable_offset()
        return log_end if first_unstable is None else min(max(first_unstable, log_start), log_end)

    def hides(
        self, segments: Sequence[LogSegment], log_start: int, log_end: int, version: int
    ) -> Callable[[BatchHeader], bool]:
        """``hidden(header)`` (:func:`~seglogfs.read_committed.hidden_batches`) for the aborted
        transactions of ``segments``; ``version`` (the log's removals) and ``log_start`` say when to
        read the ``.txnindex`` files again. A roll does not: our appends never abort a transaction."""
        self._ready()
        cached = self._hides_for
        if cached is None or cached[0] != (version, log_start):
            aborted = self.aborted(segments, log_start, log_end)
            cached = ((version, log_start), bool(aborted), hidden_batches(aborted))
            self._hides_for = cached
        return cached[2]

    def last_batches(self) -> dict[int, ProducerLastBatch]:
        """Each producer's last data batch (its last offset), or its marker when it has none since
        its epoch began (see :class:`~seglogfs.cleaner_transactions.ProducerLastBatch`)."""
        self._ready()
        return {
            pid: ProducerLastBatch(entry.last_offset if entry.last_offset >= 0 else None, entry.epoch)
            for pid, entry in self.state.producers.items()
        }

    def has_aborted(self, segments: Sequence[LogSegment], log_start: int, log_end: int, version: int) -> bool:
        """True when some aborted transaction is left in the log (see :meth:`hides`)."""
        self.hides(segments, log_start, log_end, version)
        cached = self._hides_for
        assert cached is not None  # hides() just set it
        return cached[1]

    def aborted(self, segments: Sequence[LogSegment], start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, end), by first offset, from the ``.txnindex``
        of the segments from the one holding ``start`` on, stopping once a segment's entries complete
        the range (Kafka's collectAbortedTransactions). A damaged index counts as empty (logged): one
        bad file must not make every read of the log fail."""
        self._ready()
        found: list[AbortedTxn] = []
        # no stop at `end`: a transaction begun before it may end (and be indexed) in any later segment
        for segment in segments[segment_index_for(start, segments) :]:
            entries, complete = self._collect(segment, start, end)
            found += entries
            if complete:
                break
        return sorted(found, key=lambda txn: txn.first_offset)

    def _collect(self, segment: LogSegment, start: int, end: int) -> tuple[list[AbortedTxn], bool]:
        memory = self._memory.get(segment.uid)
        if memory is not None:
            hits = [t for t in memory if t.last_offset >= start and t.first_offset < end]
            return hits, any(t.last_stable_offset >= end for t in memory)
        try:
            return segment.txn_index.collect_aborted(start, end)
        except (CorruptIndexError, OSError) as exc:
            log.warning("%s: ignoring %s: %s", self.name, segment.txn_index.path, exc)
            return [], False

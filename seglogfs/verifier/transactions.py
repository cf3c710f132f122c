"""The verifier's transaction checks: producer state replayed over a log's batches, against the
``.txnindex`` of every segment and the producer ``.snapshot`` files.

:class:`TransactionCheck` is fed every CRC-valid batch of one log, in offset order, by the ``.log``
scan (no second pass over the bytes; only control batches are decoded). It trusts no snapshot: the
state is replayed from the log's first batch. The replay is exact only while every offset from 0 on
was seen; once offsets are missing (retention removed the head, compaction removed batches, a batch
was unreadable, or only some segments were given) producers' transactions there are unknown, so the
``.txnindex`` and snapshot contents from there on are only checked for their own soundness.
"""

from __future__ import annotations

from dataclasses import astuple, fields
from pathlib import Path

from seglogfs.errors import CorruptIndexError, CorruptRecordError
from seglogfs.log_files import (
    INDEX_SUFFIX,
    PRODUCER_SNAPSHOT_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file_name,
    sibling_path,
)
from seglogfs.producer_state import (
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    end_txn_marker,
    producers_listed_twice,
    read_snapshot,
)
from seglogfs.records import BatchHeader
from seglogfs.records.types import ByteSource
from seglogfs.regular_files import non_regular_kind
from seglogfs.transaction_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex

from .report import Problem, VerifyReport

__all__ = ["TransactionCheck"]

_MAX_LISTED = 50  # wrong .txnindex entries listed one by one per file; the rest are counted
_ENTRY_FIELDS = [f.name for f in fields(ProducerStateEntry)]


def _describe(txn: AbortedTxn) -> str:
    return (
        f"(producerId {txn.producer_id}, firstOffset {txn.first_offset}, lastOffset {txn.last_offset}, "
        f"lastStableOffset {txn.last_stable_offset})"
    )


class TransactionCheck:
    """Transaction checks of one log dir; call :meth:`batch` per batch, :meth:`end_segment` after
    each segment's scan, :meth:`finish` once after the last."""

    def __init__(
        self, log_dir: Path, report: VerifyReport, *, log_start: int = 0, snapshots: bool = True
    ) -> None:
        """``log_start``: the base offset of the log's first segment; ``snapshots``: check the log
        dir's snapshot files too (not when checking one segment alone)."""
        self.log_dir = log_dir
        self.report = report
        self._state = ProducerStateManager(log_dir)  # in memory only: never takes a snapshot
        self._producers = self._state.producers  # a live read-only view, made once
        self._next_offset = 0  # the offset after the last batch replayed
        self._exact_until: int | None = None  # where offsets first went missing (None: none yet)
        self._aborted: list[AbortedTxn] = []  # completed aborted transactions of the current segment
        self._snapshots: list[int] = []  # offsets of the snapshots still to compare, ascending
        for offset in self._state.snapshot_offsets() if snapshots else ():
            path = self._snapshot_path(offset)
            if non_regular_kind(path) is not None:
                continue  # reported by the log dir check; never opened (a FIFO would block forever)
            if offset < log_start:
                report.note(path, None, f"below the log's first offset {log_start} (recovery deletes it)")
                self._check_format(path)
            else:
                self._snapshots.append(offset)

    # ------------------------------------------------------------------ per batch

    def batch(self, buf: ByteSource, header: BatchHeader, log_path: Path) -> None:
        """Apply one CRC-valid batch (``buf``: the whole ``.log``) after comparing the snapshots taken
        before it."""
        if header.base_offset > self._next_offset:
            self._lose_exactness()  # offsets [next, base) are gone: what they held is unknown
        if self._snapshots and self._snapshots[0] <= header.base_offset:
            self._compare_snapshots_up_to(header.base_offset)
        is_control = header.is_control
        if header.producer_id < 0 and not is_control:
            self._next_offset = header.last_offset + 1  # ours and legacy batches: no producer
            return
        marker = None
        if is_control:
            try:
                marker = end_txn_marker(header, bytes(buf[header.position : header.position + header.size]))
            except CorruptRecordError as exc:
                self._problem(log_path, header.position, f"corrupt control record: {exc}")
                self._lose_exactness()  # a transaction it may have ended stays open in the replay
            if marker is not None:
                self._check_marker_batch(header, log_path, marker.control_type.name)
        entry = self._producers.get(header.producer_id)
        if (
            entry is not None
            and header.producer_epoch < entry.epoch
            and (marker is not None or not is_control)
        ):
            self._warn_fenced(header, log_path, entry.epoch, marker is not None)
        completed = self._state.update(header, marker)
        if completed is not None:
            if completed.is_aborted:
                lso = self._state.last_stable_offset(completed)
                self._aborted.append(
                    AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)
                )
            self._state.complete_txn(completed)
        self._next_offset = header.last_offset + 1

    def _check_marker_batch(self, header: BatchHeader, log_path: Path, kind: str) -> None:
        """A COMMIT/ABORT marker is written by a transaction coordinator: always in a transactional
        batch of a producer id. (KRaft's control batches, e.g. the metadata log's, are neither by
        design and hold no marker, so they are not looked at.)"""
        what = f"control batch at offset {header.base_offset} holds a {kind} marker but"
        if not header.is_transactional:
            self._problem(log_path, header.position, f"{what} is not transactional")
        if header.producer_id < 0:
            self._problem(log_path, header.position, f"{what} has no producer id")

    def _warn_fenced(self, header: BatchHeader, log_path: Path, epoch: int, is_marker: bool) -> None:
        """A batch whose epoch is below its producer's was written by a fenced producer: a broker
        refuses it from a client, but replaying a log it only warns and applies it, so do we."""
        what = "transaction marker" if is_marker else "data batch"
        self.report.warn(
            log_path,
            header.position,
            f"{what} at offset {header.base_offset} of producer {header.producer_id} has epoch "
            f"{header.producer_epoch}, below the producer's epoch {epoch} (a fenced producer's write)",
        )

    def lose_track(self) -> None:
        """A segment could not be read to its end: the replay is no longer exact."""
        self._lose_exactness()
        self._aborted = []

    def _lose_exactness(self) -> None:
        if self._exact_until is None:
            self._exact_until = self._next_offset

    # ------------------------------------------------------------------ per segment

    def end_segment(self, log_path: Path, base_offset: int) -> None:
        """Check the segment's ``.txnindex``: Kafka's sanity check, then its entries against the
        aborted transactions whose markers the segment holds (those with a marker below any offset
        where the replay stopped being exact)."""
        expected, self._aborted = self._aborted, []
        path = log_path.parent / sibling_path(log_path, TXN_INDEX_SUFFIX).name
        if non_regular_kind(path) is not None:
            return  # reported by the log dir check; never opened
        index = TransactionIndex(path, base_offset, writable=False)
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            self._problem(path, None, f"fails the transaction index sanity check: {_bare(exc, path)}")
        except OSError as exc:
            self._problem(path, None, f"cannot read: {exc}")
            return
        if self._exact_until is not None:  # markers from there on ended transactions the replay missed
            expected = [txn for txn in expected if txn.last_offset < self._exact_until]
        if expected and not path.exists() and not sibling_path(path, INDEX_SUFFIX).exists():
            # Without its .index a segment is recovered batch by batch, which rebuilds the .txnindex
            # too (Kafka's sanity check of a segment starts with the .index). With the .index there,
            # nothing notices: the missing entries below are damage.
            self.report.note(
                path, None, f"missing, with {len(expected)} aborted transaction(s) (recovery rebuilds it)"
            )
            return
        try:
            stored = index.entries()
        except CorruptIndexError:
            return  # a bad version: reported by the sanity check
        if self._exact_until is not None:
            stored = [txn for txn in stored if txn.last_offset < self._exact_until]
        self._compare_entries(path, stored, expected)

    def _compare_entries(self, path: Path, stored: list[AbortedTxn], expected: list[AbortedTxn]) -> None:
        """Missing, extra and different entries (the same marker offset, other fields)."""
        wanted = {txn.last_offset: txn for txn in expected}
        findings: list[tuple[int | None, str]] = []
        for i, txn in enumerate(stored):
            want = wanted.pop(txn.last_offset, None)
            if want is None:
                why = f"no aborted transaction of producer {txn.producer_id} ends at offset {txn.last_offset}"
                findings.append((i * ABORTED_TXN_SIZE, f"extra entry {_describe(txn)}: {why}"))
            elif want != txn:
                findings.append((i * ABORTED_TXN_SIZE, f"entry {_describe(txn)} should be {_describe(want)}"))
        for txn in wanted.values():
            where = "" if path.exists() else " (the file does not exist)"
            why = f"its ABORT marker is in this segment{where}"
            findings.append((None, f"missing entry {_describe(txn)}: {why}"))
        for position, message in findings[:_MAX_LISTED]:
            self._problem(path, position, message)
        if len(findings) > _MAX_LISTED:
            self._problem(path, None, f"... and {len(findings) - _MAX_LISTED} more wrong entries")

    # ------------------------------------------------------------------ snapshots

    def finish(self) -> None:
        """Compare the snapshots at or below the log end offset with the final state; a snapshot past
        it is a note (recovery deletes it)."""
        end = self._next_offset
        self._compare_snapshots_up_to(end)
        for offset in self._snapshots:
            path = self._snapshot_path(offset)
            self.report.note(path, None, f"past the log end offset {end} (recovery deletes it)")
            self._check_format(path)
        self._snapshots = []

    def _compare_snapshots_up_to(self, offset: int) -> None:
        while self._snapshots and self._snapshots[0] <= offset:
            snapshot_offset = self._snapshots.pop(0)
            path = self._snapshot_path(snapshot_offset)
            entries = self._check_format(path)
            if entries is None:
                continue
            if snapshot_offset < self._next_offset:
                self._problem(
                    path,
                    None,
                    f"offset {snapshot_offset} is inside the batch ending at offset {self._next_offset - 1}: "
                    "no log end offset was ever there",
                )
            elif self._exact_until is None or snapshot_offset <= self._exact_until:
                self._compare_snapshot(path, snapshot_offset, entries)

    def _check_format(self, path: Path) -> list[ProducerStateEntry] | None:
        """The snapshot's entries, or None with the problem reported (bad version, CRC or length)."""
        try:
            return read_snapshot(path)
        except CorruptSnapshotError as exc:
            self._problem(path, None, f"corrupt producer snapshot: {_bare(exc, path, 'snapshot')}")
        except OSError as exc:
            self._problem(path, None, f"cannot read: {exc}")
        return None

    def _compare_snapshot(self, path: Path, offset: int, entries: list[ProducerStateEntry]) -> None:
        """Each producer of the snapshot against the replayed state at ``offset``. A producer the
        snapshot lacks is fine unless a transaction of it is open: only idle producers expire."""
        replayed = self._producers
        stored = {entry.producer_id: entry for entry in entries}
        for pid in producers_listed_twice(entries):  # loading refuses such a snapshot
            self._problem(path, None, f"producer {pid} is listed twice")
        for pid, entry in stored.items():
            have = replayed.get(pid)
            if have is None:
                why = f"is in the snapshot, but no batch of it is below offset {offset}"
                self._problem(path, None, f"producer {pid} {why}")
            elif have != entry:
                diffs = [
                    f"{name} {mine} in the snapshot, {theirs} in the log"
                    for name, mine, theirs in zip(_ENTRY_FIELDS, astuple(entry), astuple(have), strict=True)
                    if mine != theirs
                ]
                why = f"differs from the log at offset {offset}: {'; '.join(diffs)}"
                self._problem(path, None, f"producer {pid} {why}")
        for pid, have in replayed.items():
            if pid not in stored and have.current_txn_first_offset is not None:
                self._problem(
                    path,
                    None,
                    f"producer {pid} is missing, but its transaction from offset "
                    f"{have.current_txn_first_offset} is open at offset {offset}",
                )

    def _snapshot_path(self, offset: int) -> Path:
        return self.log_dir / segment_file_name(offset, PRODUCER_SNAPSHOT_SUFFIX)

    def _problem(self, path: Path, position: int | None, message: str) -> None:
        self.report.problems.append(Problem(path, position, message))


def _bare(exc: Exception, path: Path, prefix: str = "transaction index") -> str:
    """The message without its leading "<prefix> <path>: " (the Problem names the file)."""
    return str(exc).removeprefix(f"{prefix} {path}").removeprefix(": ").removeprefix(" ")

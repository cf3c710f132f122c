"""The verifier's checks of a segment's ``.index`` and ``.timeindex`` against its batch table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from seglogfs.errors import CorruptIndexError
from seglogfs.index import OffsetIndex, TimeIndex

from .report import BatchTable, Problem, VerifyReport

_MAX_LISTED = 50  # wrong index entries listed one by one per file; the rest are counted


def _drop_zero_tail(index: OffsetIndex | TimeIndex, path: Path, active: bool, report: VerifyReport) -> int:
    """Limit ``index`` to its entries before a zero-filled tail, then run Kafka's sanity check.

    The active segment's index is preallocated while a writer runs, so its tail is expected; any
    other segment's index should be trimmed (a crash between a roll and the trim leaves the zeros,
    which recovery trims). A file of zeros only is all tail: a segment sealed with no entry leaves
    one when a power loss keeps its preallocated size and not its trim (Kafka's dump would take the
    first zero entry for a real one, naming the base offset at position 0).
    """
    n = index.entries_before_zero_tail()
    if n == 1 and index.entries > 1 and index.is_zero_filled():
        n = 0
    if n < index.entries:
        if not active:
            report.note(
                path,
                n * index.ENTRY_SIZE,
                f"{index.entries - n} zero-filled entries after the last one "
                "(not trimmed; recovery trims it)",
            )
        index.limit_entries(n)
    try:
        index.sanity_check()
    except CorruptIndexError as exc:
        report.problems.append(Problem(path, None, f"fails Kafka's sanity check: {exc}"))
    return n


def _entries_in_use(
    index: OffsetIndex | TimeIndex, path: Path, active: bool, report: VerifyReport
) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
    """The entries of ``index`` before any zero-filled tail (see :func:`_drop_zero_tail`): their count
    and their two columns; the index is closed."""
    try:
        n = _drop_zero_tail(index, path, active, report)
        return n, index.to_arrays()
    finally:
        index.close()


def _matches(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``wanted``: the slot of the first key >= it (clipped to the table) and whether that
    key equals it. ``keys`` is sorted (batch positions or last offsets, ascending)."""
    if not len(keys):
        return np.zeros(len(wanted), np.int64), np.zeros(len(wanted), bool)
    slot = np.searchsorted(keys, wanted)
    clipped = np.minimum(slot, len(keys) - 1)
    return clipped, (slot < len(keys)) & (keys[clipped] == wanted)


def _list_wrong(
    path: Path, wrong: np.ndarray, entry_size: int, why: Callable[[int], str], report: VerifyReport
) -> None:
    """A problem for each wrong entry (the first ``_MAX_LISTED``), then a count of the rest."""
    for i in wrong[:_MAX_LISTED]:
        report.problems.append(Problem(path, int(i) * entry_size, f"entry {i} {why(int(i))}"))
    if len(wrong) > _MAX_LISTED:
        report.problems.append(Problem(path, None, f"... and {len(wrong) - _MAX_LISTED} more wrong entries"))


def check_offset_index(path: Path, base: int, batches: BatchTable, active: bool, report: VerifyReport) -> int:
    """Check the .index against the batch table; returns its entries in use."""
    n, (offsets, positions) = _entries_in_use(OffsetIndex(path, base, writable=False), path, active, report)
    if n == 0:
        return 0
    size = OffsetIndex.ENTRY_SIZE
    bad = np.flatnonzero((np.diff(offsets) <= 0) | (np.diff(positions) <= 0)) + 1
    for i in bad[:20]:
        report.problems.append(
            Problem(
                path,
                int(i) * size,
                f"entry {i} (offset {offsets[i]}, position {positions[i]}) does not "
                f"increase on the entry before it (offset {offsets[i - 1]}, position {positions[i - 1]})",
            )
        )
    bpos, blast, _ = batches.numpy()
    clipped, at_start = _matches(bpos, positions)
    wrong = np.flatnonzero(~at_start | (blast[clipped] != offsets)) if len(bpos) else np.arange(n)

    def why(i: int) -> str:
        pos, off = int(positions[i]), int(offsets[i])
        if not at_start[i]:
            return f"(offset {off}, position {pos}): no batch starts there"
        last = int(blast[clipped[i]])
        return f"(offset {off}, position {pos}): the batch at position {pos} has lastOffset {last}"

    _list_wrong(path, wrong, size, why, report)
    return n


def check_time_index(path: Path, base: int, batches: BatchTable, active: bool, report: VerifyReport) -> int:
    """Check the .timeindex against the batch table; returns its entries in use."""
    n, (stamps, offsets) = _entries_in_use(TimeIndex(path, base, writable=False), path, active, report)
    size = TimeIndex.ENTRY_SIZE
    _, blast, bmax = batches.numpy()
    if n:
        bad = np.flatnonzero((np.diff(stamps) <= 0) | (np.diff(offsets) < 0)) + 1
        for i in bad[:20]:
            report.problems.append(
                Problem(
                    path,
                    int(i) * size,
                    f"entry {i} (timestamp {stamps[i]}, offset {offsets[i]}) is out of "
                    f"order after (timestamp {stamps[i - 1]}, offset {offsets[i - 1]})",
                )
            )
        clipped, found = _matches(blast, offsets)
        wrong = np.flatnonzero(~found | (bmax[clipped] != stamps)) if len(blast) else np.arange(n)

        def why(i: int) -> str:
            ts, off = int(stamps[i]), int(offsets[i])
            if not found[i]:
                return f"(timestamp {ts}, offset {off}): no batch has lastOffset {off}"
            batch_max = int(bmax[clipped[i]])
            return (
                f"(timestamp {ts}, offset {off}): "
                f"the batch with lastOffset {off} has max timestamp {batch_max}"
            )

        _list_wrong(path, wrong, size, why, report)
    if not active and len(bmax):
        seg_max = int(bmax.max())
        last_ts = int(stamps[-1]) if n else -1
        if seg_max >= 0 and last_ts < seg_max:  # a larger one is a wrong entry, reported above
            report.note(
                path,
                max(n - 1, 0) * size,
                f"last entry timestamp {last_ts} is not the segment's max timestamp {seg_max} "
                "(written on roll, retention reads it; recovery writes it again)",
            )
    return n

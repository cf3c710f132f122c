"""``HiddenTotal``: the stream bytes of a segment's records that read_committed leaves out.

A read_committed view (``records``, ``from/<n>``... of :mod:`seglogfs.views.value_stream`) shows every
record the engine's totals (:mod:`seglogfs.segment_totals`) count except the data batches of aborted
transactions (:mod:`seglogfs.read_committed`) and what lies at or past the last stable offset. Its size
is then those totals minus this segment's hidden bytes, cut at the last stable offset: lookups, never a
walk of the log.

Counted by the background counter (:mod:`seglogfs.totals_counter`) for the logs a read_committed
view reads (:func:`want`) that hold an aborted transaction (a log without one hides nothing, and needs
none). A total covers the batches below an offset (``upto``) at or below the last stable offset: every
transaction with a batch there is complete (its marker is in the log), so which of them are hidden never
changes. A sealed segment wholly below the last stable offset is counted once; the segment holding the
last stable offset or the log end again when either moved. A segment no aborted transaction overlaps
costs no read; in the others only the batches within the aborted transactions' offset ranges are walked
(the offset index finds the first). A sealed segment's total is kept in its totals file
(:mod:`seglogfs.totals_file`) with a checksum of the aborted ranges it was counted under: at the next
start it is taken again, without a read, when the ``.log`` is the same file and the ranges the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import weakref
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .errors import CorruptRecordError
from .records import BatchHeader
from .segment import LogSegment
from .stream_format import JSON_LINES, VALUES
from .transaction_index import AbortedTxn

__all__ = [
    "ZERO", "HiddenLog", "HiddenTotal", "count_log", "hidden_total", "kept_total", "pending", "restore",
    "want",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HiddenTotal:
    """The ``records`` and ``records.jsonl`` bytes of one segment's aborted data batches below offset
    ``upto``, counted under the aborted ranges whose checksum is ``ranges``."""

    values: int
    jsonl: int
    upto: int
    ranges: int = 0

    def covers(self, cut: int, frontier: int) -> bool:
        """Whether this total is the hidden part of the batches below offset ``cut`` of a segment whose
        totals are counted up to ``frontier`` (the offset after the last batch counted)."""
        return self.upto == cut or (cut == frontier and self.upto >= cut)

    def of(self, fmt: str) -> int:
        """The bytes in format ``fmt`` (a :data:`~seglogfs.segment_totals.FORMAT_NAMES` name)."""
        return self.values if fmt == VALUES.name else self.jsonl


ZERO = HiddenTotal(0, 0, 1 << 63)


class HiddenLog(Protocol):
    """What the count reads of a log (a :class:`~seglogfs.log.Log`)."""

    name: str

    @property
    def closed(self) -> bool: ...

    @property
    def segments(self) -> Sequence[LogSegment]: ...

    @property
    def last_stable_offset(self) -> int: ...

    def has_aborted_transactions(self) -> bool: ...

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]: ...

    def hidden_batch(self) -> Callable[[BatchHeader], bool]: ...

    def save_sealed_totals(self, segment: LogSegment, *, again: bool = False) -> None: ...


# Weak: a segment retention or the cleaner replaced takes its total with it.
_TOTALS: weakref.WeakKeyDictionary[LogSegment, HiddenTotal] = weakref.WeakKeyDictionary()
#: totals read from the segments' totals files, taken by the next count when their ranges still hold
_KEPT: weakref.WeakKeyDictionary[LogSegment, HiddenTotal] = weakref.WeakKeyDictionary()
_WANTED: weakref.WeakSet[HiddenLog] = weakref.WeakSet()
_PENDING: weakref.WeakKeyDictionary[HiddenLog, int] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def want(lg: HiddenLog) -> None:
    """Have the counter count ``lg``'s hidden totals (a read_committed view reads it)."""
    if lg not in _WANTED:
        with _LOCK:
            _WANTED.add(lg)
            _PENDING.setdefault(lg, -1)  # not looked at yet


def hidden_total(segment: LogSegment) -> HiddenTotal | None:
    """The hidden bytes of ``segment``, if counted."""
    return _TOTALS.get(segment)


def restore(segment: LogSegment, total: HiddenTotal) -> None:
    """A total ``segment``'s totals file kept (its ``.log`` is the same file); the next count takes it
    if the aborted ranges it was counted under are still those of the log."""
    _KEPT[segment] = total


def kept_total(segment: LogSegment) -> HiddenTotal | None:
    """What the totals file of the sealed ``segment`` keeps: its total when it covers the segment whole."""
    found = _TOTALS.get(segment)
    if found is None or segment.offset_limit is None or found.upto != segment.offset_limit:
        return None
    return found


def pending(lg: HiddenLog) -> int:
    """Segments of ``lg`` left to count (-1: not looked at yet; 0 for a log nobody wants)."""
    return _PENDING.get(lg, 0)


def count_log(lg: HiddenLog) -> None:
    """Count the hidden totals ``lg``'s segments lack (the counter's thread; see the module doc)."""
    if lg not in _WANTED:
        return
    if not lg.has_aborted_transactions():
        _PENDING[lg] = 0
        return
    lso = lg.last_stable_offset
    todo: list[tuple[LogSegment, int]] = []
    for segment in lg.segments:
        if segment.base_offset >= lso:
            break
        cut = _cut(segment, lso)
        found = _TOTALS.get(segment)
        if cut is not None and (found is None or found.upto != cut):
            todo.append((segment, cut))
    _PENDING[lg] = len(todo)
    if not todo:
        return
    ranges = _merged(lg.aborted_transactions(todo[0][0].base_offset, todo[-1][1]))
    hidden = lg.hidden_batch()
    for left, (segment, cut) in enumerate(todo):
        if lg.closed:
            return
        overlapping = _overlapping(segment, cut, ranges)
        kept = _KEPT.pop(segment, None)
        if kept is not None and kept.upto == cut and kept.ranges == _ranges_key(overlapping):
            _TOTALS[segment] = kept  # the same .log, the same aborted ranges: nothing to read
        else:
            with contextlib.suppress(FileNotFoundError):  # retention or the cleaner took it meanwhile
                _TOTALS[segment] = _count(segment, cut, overlapping, hidden)
                if cut == segment.offset_limit:
                    lg.save_sealed_totals(segment, again=True)  # for the next start
        _PENDING[lg] = len(todo) - left - 1


def _cut(segment: LogSegment, lso: int) -> int | None:
    """The offset below which ``segment``'s hidden batches are counted: its end, or the last stable
    offset when that lies inside it; None while its totals are not counted to its end (the counter
    counts them first)."""
    if segment.offset_limit is not None and segment.offset_limit <= lso:
        return segment.offset_limit
    totals = segment.totals
    if not totals.counted(segment.size):
        return None
    return min(lso, totals.frontier.offset)


def _merged(aborted: Sequence[AbortedTxn]) -> list[tuple[int, int]]:
    """The offset ranges [first, last] of the ``aborted`` transactions (by first offset), overlaps merged."""
    ranges: list[tuple[int, int]] = []
    for txn in aborted:
        if ranges and txn.first_offset <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], txn.last_offset))
        else:
            ranges.append((txn.first_offset, txn.last_offset))
    return ranges


def _overlapping(segment: LogSegment, cut: int, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``ranges`` with offsets in ``segment`` below ``cut``."""
    base = segment.base_offset
    return [(first, last) for first, last in ranges if last >= base and first < cut]


def _ranges_key(overlapping: Sequence[tuple[int, int]]) -> int:
    """A checksum of the aborted ranges a total was counted under."""
    return zlib.crc32(b"".join(struct.pack("<qq", first, last) for first, last in overlapping))


def _count(
    segment: LogSegment, cut: int, overlapping: Sequence[tuple[int, int]],
    hidden: Callable[[BatchHeader], bool],
) -> HiddenTotal:
    """The hidden bytes of ``segment`` below offset ``cut``: its batches within ``overlapping`` (the
    aborted ranges with offsets there) that ``hidden`` names."""
    key = _ranges_key(overlapping)
    if not overlapping:
        return HiddenTotal(0, 0, cut, key)
    values = jsonl = 0
    path = str(segment.log_path)
    fd = segment.open_reader_fd()
    try:
        for first, last in overlapping:
            position = segment.offset_index.lookup(max(first, segment.base_offset)).position
            for header, data in segment.iter_batches(position, fd=fd, on_damage=lambda d: None):
                if header.base_offset > last or header.base_offset >= cut:
                    break
                if header.base_offset < first or not hidden(header):
                    continue
                try:
                    v = VALUES.count(data, header.at(0), path)
                    j = JSON_LINES.count(data, header.at(0), path)
                except CorruptRecordError:  # the totals count such a batch 0 too
                    continue
                values, jsonl = values + v, jsonl + j
    finally:
        os.close(fd)
    return HiddenTotal(values, jsonl, cut, key)

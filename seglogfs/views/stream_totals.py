"""Totals of sealed segments shared by the read_committed streams of a log (seglogfs/views/value_stream.py,
which count for themselves: aborted transactions and the last stable offset leave batches out):
``records``, ``records.jsonl`` and each ``from/<n>`` count a sealed segment once between them, per
format. read_uncommitted streams take the engine's totals instead (seglogfs/segment_totals.py)."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from seglogfs.segment import LogSegment


@dataclass(frozen=True, slots=True)
class SealedTotal:
    """What a whole scan of a sealed segment found (every batch from its start, none left out)."""

    nbytes: int  # stream bytes of its records
    scanned: int  # the file position the scan ended at
    next_offset: int  # the offset after its last batch


# Weak: a segment retention or compaction replaced takes its totals with it.
_TOTALS: weakref.WeakKeyDictionary[LogSegment, dict[str, SealedTotal]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def sealed_total(segment: LogSegment, fmt: str) -> SealedTotal | None:
    """The total of ``segment`` in format ``fmt``, if a stream counted it whole."""
    with _LOCK:
        return _TOTALS.get(segment, {}).get(fmt)


def remember_sealed_total(segment: LogSegment, fmt: str, total: SealedTotal) -> None:
    """Record what a whole scan of the sealed ``segment`` found."""
    with _LOCK:
        _TOTALS.setdefault(segment, {})[fmt] = total


def forget_sealed_total(segment: LogSegment, fmt: str) -> None:
    """Forget what a scan of ``segment`` in format ``fmt`` found (it was damaged since)."""
    with _LOCK:
        _TOTALS.get(segment, {}).pop(fmt, None)

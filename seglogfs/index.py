"""Kafka's segment indexes in one import: ``OffsetIndex`` (.index), ``TimeIndex`` (.timeindex), their
entry types and sizes, and ``EmptyIndex``, the stand-in a reader uses for a missing or corrupt index.

Each index has its own module (:mod:`~seglogfs.offset_index`, :mod:`~seglogfs.time_index`) over
:mod:`~seglogfs.abstract_index`; this one names them all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .abstract_index import DEFAULT_MAX_INDEX_SIZE, WARM_SECTION_BYTES, AbstractIndex, InvalidIndexAppendError
from .offset_index import OFFSET_INDEX_ENTRY_SIZE, OffsetIndex, OffsetPosition
from .time_index import TIME_INDEX_ENTRY_SIZE, TimeIndex, TimestampOffset

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "OFFSET_INDEX_ENTRY_SIZE",
    "TIME_INDEX_ENTRY_SIZE",
    "WARM_SECTION_BYTES",
    "AbstractIndex",
    "EmptyIndex",
    "InvalidIndexAppendError",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
]


class EmptyIndex:
    """A missing or corrupt index when reading only: every lookup falls back to a scan from the start.

    Stands in for an OffsetIndex (``is_offset_index``) or a TimeIndex, with no entries.
    """

    entries = 0
    path: Path | None = None  # no file

    def __init__(self, is_offset_index: bool, base_offset: int) -> None:
        self._is_offset_index = is_offset_index
        self.base_offset = base_offset

    def lookup(self, target: int) -> OffsetPosition | TimestampOffset:
        """What an empty index of that kind answers: (base_offset, 0) or (-1, base_offset)."""
        if self._is_offset_index:
            return OffsetPosition(self.base_offset, 0)
        return TimestampOffset(-1, self.base_offset)

    def lookup_with_previous(self, target: int) -> tuple[TimestampOffset, TimestampOffset]:
        """As an empty time index: no entry, twice."""
        none = TimestampOffset(-1, self.base_offset)
        return none, none

    def lookup_bounds(self, target: int) -> tuple[OffsetPosition, None]:
        """No entry on either side: scan from the start."""
        return OffsetPosition(self.base_offset, 0), None

    def position_floor(self, position: int) -> int:
        """No entry at or before ``position``: a walk starts where its caller does."""
        return -1

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """No entries."""
        return np.zeros(0, np.int64), np.zeros(0, np.int64)

    @property
    def last_entry(self) -> TimestampOffset:
        """As an empty time index: (-1, base_offset)."""
        return TimestampOffset(-1, self.base_offset)

    def is_full(self) -> bool:
        """Never full."""
        return False

    def sanity_check(self) -> None:
        """Nothing to check."""

    def flush(self) -> None:
        """Nothing to write."""

    def close(self) -> None:
        """Nothing to close."""

"""What the verifier finds: :class:`Problem` (damage or a note), the totals of a run
(:class:`VerifyReport`), where progress goes, and the batch table a segment's indexes are checked
against."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from seglogfs.records import BatchHeader


@dataclass(frozen=True)
class Problem:
    """One defect: the file, the byte position in it (when there is one) and what is wrong."""

    path: Path
    position: int | None
    message: str
    note: bool = False  # recovery repairs it without loss: not damage

    def __str__(self) -> str:
        where = f"{self.path}: position {self.position}" if self.position is not None else str(self.path)
        return f"{where}: {'note: ' if self.note else ''}{self.message}"


@dataclass
class VerifyReport:
    """The outcome of a verification run."""

    logs: int = 0
    segments: int = 0
    batches: int = 0
    bytes: int = 0
    records: int = 0  # user records: decoded with ``decode_records``, else the batch headers' counts
    index_entries: int = 0  # .index entries in use
    time_index_entries: int = 0  # .timeindex entries in use
    problems: list[Problem] = field(default_factory=list)  # damage
    notes: list[Problem] = field(default_factory=list)  # repaired by recovery without loss

    @property
    def ok(self) -> bool:
        """No damage (notes allowed)."""
        return not self.problems

    def note(self, path: Path, position: int | None, message: str) -> None:
        """Record a condition that recovery repairs without loss."""
        self.notes.append(Problem(path, position, message, note=True))


class VerifyProgress(Protocol):
    """Where :func:`verify_paths` reports its progress over the bytes of the ``.log`` files."""

    def start_file(self, label: str) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def finish(self) -> None: ...


@dataclass
class BatchTable:
    """Positions, last offsets and max timestamps of a segment's batches (compact int64 arrays)."""

    positions: array = field(default_factory=lambda: array("q"))
    last_offsets: array = field(default_factory=lambda: array("q"))
    max_timestamps: array = field(default_factory=lambda: array("q"))

    def add(self, header: BatchHeader) -> None:
        self.positions.append(header.position)
        self.last_offsets.append(header.last_offset)
        self.max_timestamps.append(header.max_timestamp)

    def numpy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _int64s(self.positions), _int64s(self.last_offsets), _int64s(self.max_timestamps)


def _int64s(values: array) -> np.ndarray:
    return np.frombuffer(values, dtype=np.int64) if values else np.zeros(0, np.int64)

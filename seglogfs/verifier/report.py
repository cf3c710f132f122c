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
    note: bool = False  # not damage: recovery repairs it without loss, or (``warning``) it is suspect
    warning: bool = False  # readable but suspect (a fenced producer's write); also a note

    def __str__(self) -> str:
        where = f"{self.path}: position {self.position}" if self.position is not None else str(self.path)
        label = "warning: " if self.warning else "note: " if self.note else ""
        return f"{where}: {label}{self.message}"


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
    # not damage: repaired by recovery without loss, and warnings (exit 0, or 1 with --strict)
    notes: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No damage (notes allowed)."""
        return not self.problems

    def note(self, path: Path, position: int | None, message: str) -> None:
        """Record a condition that recovery repairs without loss."""
        self.notes.append(Problem(path, position, message, note=True))

    def warn(self, path: Path, position: int | None, message: str) -> None:
        """Record something readable but suspect, that recovery leaves as it is (a fenced producer's
        write: a broker replaying the log warns and applies it). Kept with the notes: not damage."""
        self.notes.append(Problem(path, position, message, note=True, warning=True))

    @property
    def warnings(self) -> list[Problem]:
        """The notes that are warnings."""
        return [p for p in self.notes if p.warning]


class VerifyProgress(Protocol):
    """Where :func:`verify_paths` reports its progress over the bytes of the ``.log`` files."""

    def start_file(self, label: str) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def finish(self) -> None: ...


@dataclass
class BatchTable:
    """Positions, last offsets and max timestamps of a segment's batches (compact int64 arrays)."""

    positions: array[int] = field(default_factory=lambda: array("q"))
    last_offsets: array[int] = field(default_factory=lambda: array("q"))
    max_timestamps: array[int] = field(default_factory=lambda: array("q"))

    def add(self, header: BatchHeader) -> None:
        self.positions.append(header.position)
        self.last_offsets.append(header.last_offset)
        self.max_timestamps.append(header.max_timestamp)

    def numpy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _int64s(self.positions), _int64s(self.last_offsets), _int64s(self.max_timestamps)


def _int64s(values: array[int]) -> np.ndarray:
    return np.frombuffer(values, dtype=np.int64) if values else np.zeros(0, np.int64)

"""``SegmentTotals``: the stream bytes of one segment's batches, counted once, kept as the log changes.

The views (``records``, ``records.jsonl``, ``from/<n>``...: :mod:`seglogfs.views.value_stream`) need, per
segment, how many bytes its records make in each format. A segment's totals are counted from its
start up to a *frontier* (a batch boundary: file position, next offset, and the bytes of the
``values`` and ``jsonl`` formats before it), and keep sparse cumulative *checkpoints* (every
:data:`CHECKPOINT_BATCHES` batches or :data:`CHECKPOINT_BYTES` of file): a stream's size within a
segment is then a checkpoint lookup plus a count of at most one checkpoint's stretch, and a read finds
its batch the same way. Counting happens at append (the batch is in memory), in the background
(:mod:`seglogfs.totals_counter`) for a segment nobody counted yet, or by a read that needs positions
past the frontier; never twice, and never for the same batch by two callers (one lock). A damaged
batch counts zero bytes (as the views skip it). The totals survive a clean restart through
:mod:`seglogfs.totals_file`.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import sys
import threading
import weakref
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from .errors import CorruptRecordError
from .records import BatchHeader, read_batch_header
from .records._scan import count_run, render_run
from .stream_format import JSON_LINES, VALUES, StreamFormat

if TYPE_CHECKING:
    from .segment_survey import Damage

__all__ = [
    "CHECKPOINT_BATCHES", "CHECKPOINT_BYTES", "FORMAT_NAMES", "CountedSegment", "Goal", "Point",
    "SegmentTotals",
]

log = logging.getLogger(__name__)

CHECKPOINT_BATCHES = 128
CHECKPOINT_BYTES = 256 * 1024
_CHUNK = 4 << 20  # file bytes read at a time when counting
_ROW = struct.Struct("=4q")  # a count_run row: end, next offset, values bytes, jsonl bytes
_NO_LIMIT = (1 << 63) - 1
#: the formats counted, in the order of :class:`Point`'s cumulative fields
FORMAT_NAMES = (VALUES.name, JSON_LINES.name)
_FORMATS = (VALUES, JSON_LINES)


class Goal(NamedTuple):
    """Where a count may stop: once the frontier's ``field`` (``offset``: passes; ``values``, ``jsonl``:
    reaches) ``target``."""

    field: str
    target: int

    def reached(self, point: Point) -> bool:
        """Whether ``point`` is at or past the goal."""
        return point.offset > self.target if self.field == "offset" else point.cum(self.field) >= self.target

    def first(self, offsets: np.ndarray, values: np.ndarray, jsonl: np.ndarray) -> int:
        """The index of the first of these frontiers at or past the goal (their length when none)."""
        if self.field == "offset":
            return int(np.searchsorted(offsets, self.target, "right"))
        return int(np.searchsorted(values if self.field == VALUES.name else jsonl, self.target, "left"))


class Point(NamedTuple):
    """A batch boundary of a segment and what lies before it."""

    position: int  # file position
    offset: int  # the offset of the next batch (the one after the last batch before it)
    values: int  # ``records`` bytes before it
    jsonl: int  # ``records.jsonl`` bytes before it

    def cum(self, fmt: str) -> int:
        """The bytes before this point in format ``fmt`` (a :data:`FORMAT_NAMES` name)."""
        return self.values if fmt == VALUES.name else self.jsonl


def _count(data: bytes | memoryview, header: BatchHeader, path: str) -> tuple[int, int] | None:
    """(values bytes, jsonl bytes) of a whole batch; None when its records do not parse (damage)."""
    try:
        return VALUES.count(data, header, path), JSON_LINES.count(data, header, path)
    except CorruptRecordError:
        return None


class CountedSegment(Protocol):
    """What counting reads of its segment (the :class:`~seglogfs.segment.LogSegment` that owns the
    totals)."""

    base_offset: int
    log_path: Path
    size: int
    offset_limit: int | None

    def open_reader_fd(self) -> int: ...

    def iter_batches(
        self,
        start_position: int = 0,
        end_position: int | None = None,
        *,
        fd: int | None = None,
        sealed: bool | None = None,
        on_damage: Callable[[Damage], None] | None = None,
    ) -> Iterator[tuple[BatchHeader, bytes]]: ...


class SegmentTotals:
    """The counted totals of one :class:`~seglogfs.segment.LogSegment` (see the module docstring)."""

    def __init__(self, segment: CountedSegment) -> None:
        self._segment = weakref.ref(segment)
        self.base_offset = segment.base_offset
        self._lock = threading.Lock()
        self._positions = array("q", [0])
        self._offsets = array("q", [segment.base_offset])
        self._values = array("q", [0])
        self._jsonl = array("q", [0])
        #: the counted frontier: replaced whole (readers take it without the lock)
        self.frontier = Point(0, segment.base_offset, 0, 0)
        self._since_batches = 0
        self._since_bytes = 0
        self.saved = False  # its file (seglogfs.totals_file) holds this state (sealed segments only)
        self._previous = -1  # where the last batch counted starts (-1: unknown): a careful walk starts there

    # ------------------------------------------------------------------ state
    def counted(self, size: int) -> bool:
        """Whether everything below file size ``size`` is counted."""
        return self.frontier.position >= size

    def state(self) -> tuple[Point, int, int, list[array[int]]]:
        """(frontier, batches and bytes since the last checkpoint, the checkpoint arrays) for
        :mod:`seglogfs.totals_file`."""
        with self._lock:
            arrays = [array("q", a) for a in (self._positions, self._offsets, self._values, self._jsonl)]
            return self.frontier, self._since_batches, self._since_bytes, arrays

    def restore(self, frontier: Point, since: tuple[int, int], arrays: Sequence[array[int]]) -> None:
        """Take a state :meth:`state` gave (validated by the caller against the segment's file)."""
        with self._lock:
            self._positions, self._offsets, self._values, self._jsonl = (array("q", a) for a in arrays)
            self._since_batches, self._since_bytes = since
            self.frontier = frontier

    # ------------------------------------------------------------------ counting
    def _advance(self, header: BatchHeader, counts: tuple[int, int] | None) -> None:
        """Step the frontier over the batch ``header`` (the caller holds the lock)."""
        values, jsonl = counts if counts is not None else (0, 0)
        self._previous = header.position
        f = self.frontier
        self.frontier = Point(header.end_position, header.next_offset, f.values + values, f.jsonl + jsonl)
        self._since_batches += 1
        self._since_bytes += header.size
        if self._since_batches >= CHECKPOINT_BATCHES or self._since_bytes >= CHECKPOINT_BYTES:
            self._checkpoint()

    def _checkpoint(self) -> None:
        f = self.frontier
        self._positions.append(f.position)
        self._offsets.append(f.offset)
        self._values.append(f.values)
        self._jsonl.append(f.jsonl)
        self._since_batches = self._since_bytes = 0

    def appended(self, position: int, batches: Sequence[bytes | memoryview]) -> None:
        """Count batches just written at ``position`` (from their bytes in memory), when the
        frontier stands right there; otherwise (or when a count holds the lock) leave them to
        :meth:`catch_up`."""
        if self.frontier.position != position or not self._lock.acquire(blocking=False):
            return
        try:
            if self.frontier.position != position:
                return
            segment = self._segment()
            path = "" if segment is None else str(segment.log_path)
            data = batches[0] if len(batches) == 1 else b"".join(batches)
            rows, n, consumed = count_run(data, self.frontier.offset, _NO_LIMIT, False)  # our own CRCs
            if n:
                self._apply(rows, n, position, None, n)
            at = consumed
            while at < len(data):  # what the C run does not take (compressed, keyed jsonl...)
                header = read_batch_header(data, at, path=path, base_position=position)
                assert header is not None  # this process wrote the batches whole
                self._advance(header, _count(data[at : at + header.size], header.at(0), path))
                at += header.size
        except Exception:  # never fails an append that is written: the counter recounts from the file
            log.exception("counting an appended batch at %d of %s", position, self._segment())
        finally:
            self._lock.release()

    def catch_up(
        self, end: int | None = None, *, until: Goal | None = None,
        max_batches: int | None = None,
    ) -> bool:
        """Count from the frontier on, up to file position ``end`` (default: the segment's size), or
        until ``until(frontier)`` holds, or about ``max_batches`` batches; True when it reached ``end``.
        Runs of plain batches are counted in C (``count_run``), any other batch by the Python decoders."""
        with self._lock:
            segment = self._segment()
            if segment is None:
                return True
            end = segment.size if end is None else min(end, segment.size)
            if self.frontier.position >= end:
                return True
            if until is not None and until.reached(self.frontier):
                return False
            try:
                fd = segment.open_reader_fd()
            except FileNotFoundError:
                return True  # purged: nobody can read it any more
            budget = sys.maxsize if max_batches is None else max_batches
            limit = _NO_LIMIT if segment.offset_limit is None else segment.offset_limit
            try:
                while self.frontier.position < end and budget > 0:
                    position = self.frontier.position
                    chunk = os.pread(fd, min(_CHUNK, end - position), position)
                    rows, n, _ = count_run(chunk, self.frontier.offset, limit)
                    if n:
                        applied, reached = self._apply(rows, n, position, until, budget)
                    else:
                        applied, reached = self._slow_steps(segment, fd, end, until, budget)
                        if not applied and self.frontier.position == position:
                            break  # a torn tail: the batch being written
                    budget -= applied
                    if reached:
                        return False
            except FileNotFoundError:
                return True
            finally:
                os.close(fd)
            return self.frontier.position >= end

    def _apply(self, rows: bytes, n: int, base: int, until: Goal | None, budget: int) -> tuple[int, bool]:
        """Step the frontier over the batches ``count_run`` described, from file position ``base``
        (the caller holds the lock), with numpy: the checkpoints are found a stretch at a time, not a
        batch at a time; (batches applied, whether ``until`` was reached)."""
        if n <= 4 and until is None and budget >= n:  # an append's few batches: numpy costs more
            return self._apply_few(rows, n, base), False
        a = np.frombuffer(rows, dtype=np.int64).reshape(n, 4)
        take = min(n, budget)
        f = self.frontier
        ends = a[:take, 0] + base
        offsets = a[:take, 1]
        values = np.cumsum(a[:take, 2]) + f.values
        jsonl = np.cumsum(a[:take, 3]) + f.jsonl
        reached = False
        if until is not None:
            k = until.first(offsets, values, jsonl)
            if k < take:
                take, reached = k + 1, True
        if take == 0:
            return 0, reached
        batches, last_checkpoint = self._since_batches, f.position - self._since_bytes
        marks, i = [], 0
        while i < take:
            by_count = i + CHECKPOINT_BATCHES - batches - 1
            by_bytes = int(np.searchsorted(ends, last_checkpoint + CHECKPOINT_BYTES, "left"))
            j = max(min(by_count, by_bytes), i)
            if j >= take:
                batches += take - i
                break
            marks.append(j)
            last_checkpoint, batches, i = int(ends[j]), 0, j + 1
        if marks:
            for column, source in zip(
                (self._positions, self._offsets, self._values, self._jsonl), (ends, offsets, values, jsonl),
                strict=True,
            ):
                column.frombytes(np.ascontiguousarray(source[marks], dtype=np.int64).tobytes())
        last = take - 1
        self._previous = int(ends[last - 1]) if last else f.position
        self._since_batches, self._since_bytes = batches, int(ends[last]) - last_checkpoint
        self.frontier = Point(int(ends[last]), int(offsets[last]), int(values[last]), int(jsonl[last]))
        return take, reached

    def _apply_few(self, rows: bytes, n: int, base: int) -> int:
        """:meth:`_apply` of a handful of batches, in plain Python."""
        position, offset, values, jsonl = self.frontier
        for k in range(n):
            end, offset, v, j = _ROW.unpack_from(rows, 32 * k)
            self._previous = position
            self._since_batches += 1
            self._since_bytes += base + end - position
            position, values, jsonl = base + end, values + v, jsonl + j
            if self._since_batches >= CHECKPOINT_BATCHES or self._since_bytes >= CHECKPOINT_BYTES:
                self.frontier = Point(position, offset, values, jsonl)
                self._checkpoint()
        self.frontier = Point(position, offset, values, jsonl)
        return n

    def _slow_steps(
        self, segment: CountedSegment, fd: int, end: int, until: Goal | None, budget: int
    ) -> tuple[int, bool]:
        """Count batches from the frontier through the Python decoders (stepping over damage) until one
        the C runs could take again (an uncompressed v2 batch), ``until`` holds or ``budget`` is spent;
        (batches counted, whether ``until`` held). The careful walk starts at the batch before, whose
        offsets vouch for the next one's (as one walk of the segment would)."""
        frontier = self.frontier.position
        damaged: list[Damage] = []
        path = str(segment.log_path)
        start = self._previous if 0 <= self._previous < frontier else frontier
        applied = 0
        for header, data in segment.iter_batches(start, end, fd=fd, on_damage=damaged.append):
            damaged[:] = [d for d in damaged if d.end > frontier]
            if header.position < frontier:
                continue
            if damaged:
                self._skip(damaged, segment)
            counts = _count(data, header.at(0), path)
            if counts is None:
                log.error(
                    "records: %s: position %d: the records do not parse; skipped by the views", path,
                    header.position,
                )
            self._advance(header, counts)
            applied += 1
            if until is not None and until.reached(self.frontier):
                return applied, True
            if applied >= budget or (header.magic >= 2 and header.compression == 0):
                return applied, False
        damaged[:] = [d for d in damaged if d.end > frontier]
        if damaged:
            self._skip(damaged, segment)
        return applied, False

    def _skip(self, damaged: list[Damage], segment: CountedSegment) -> None:
        """Step the frontier past damaged stretches (they count nothing), logging each."""
        f = self.frontier
        for damage in damaged:
            log.error(
                "records: %s: position %d: %s; skipped by the views", segment.log_path, damage.position,
                damage.reason,
            )
        self.frontier = Point(max(f.position, damaged[-1].end), f.offset, f.values, f.jsonl)
        damaged.clear()

    # ------------------------------------------------------------------ lookups
    def _walk(
        self, start: Point, end: int, fmt: StreamFormat
    ) -> list[tuple[BatchHeader, bytes, int]]:
        """(header, bytes, format bytes) of the batches counted between ``start`` and file position
        ``end`` (a damaged one counts 0)."""
        segment = self._segment()
        if segment is None:
            raise FileNotFoundError(f"segment {self.base_offset} is gone")
        fd = segment.open_reader_fd()
        out = []
        path = str(segment.log_path)
        try:
            for header, data in segment.iter_batches(start.position, end, fd=fd, on_damage=lambda d: None):
                try:
                    nbytes = fmt.count(data, header.at(0), path)
                except CorruptRecordError:
                    nbytes = 0
                out.append((header, data, nbytes))
        finally:
            os.close(fd)
        return out

    def _checkpoint_at(self, k: int) -> Point:
        return Point(self._positions[k], self._offsets[k], self._values[k], self._jsonl[k])

    def _stretch(self, k: int) -> tuple[Point, int]:
        """Checkpoint ``k`` and the file position where its stretch ends (the next one, or the frontier)."""
        with self._lock:
            point = self._checkpoint_at(k)
            end = self._positions[k + 1] if k + 1 < len(self._positions) else self.frontier.position
        return point, end

    def locate(self, offset: int, fmt: StreamFormat) -> tuple[int, BatchHeader, bytes, int] | None:
        """The counted batch holding ``offset``, or the first after it: (the ``fmt`` bytes before it,
        its header, its bytes, its ``fmt`` bytes); None when the frontier has not passed ``offset``.
        Reads at most one checkpoint's stretch."""
        if self.frontier.offset <= offset:
            return None
        with self._lock:
            k = max(bisect.bisect_right(self._offsets, offset) - 1, 0)
        while True:
            point, end = self._stretch(k)
            cum = point.cum(fmt.name)
            for header, data, nbytes in self._walk(point, end, fmt):
                if header.last_offset >= offset:
                    return cum, header, data, nbytes
                cum += nbytes
            k += 1  # an offset in a damaged stretch: the next batch after it
            if end >= self.frontier.position:
                return None

    def window(self, cum: int, fmt: StreamFormat) -> tuple[int, bytes]:
        """The ``fmt`` bytes of the checkpoint stretch holding byte ``cum`` of the segment's counted
        bytes, and the segment's bytes before them. CorruptRecordError when they are not the bytes
        counted (the file changed since)."""
        name = fmt.name
        with self._lock:
            cums = self._values if name == VALUES.name else self._jsonl
            k = max(bisect.bisect_right(cums, cum) - 1, 0)
            point = self._checkpoint_at(k)
            last = self._checkpoint_at(k + 1) if k + 1 < len(self._positions) else self.frontier
        segment = self._segment()
        if segment is None:
            raise FileNotFoundError(f"segment {self.base_offset} is gone")
        limit = _NO_LIMIT if segment.offset_limit is None else segment.offset_limit
        fd = segment.open_reader_fd()
        pieces: list[bytes] = []
        try:
            buf = memoryview(os.pread(fd, last.position - point.position, point.position))
            at, next_offset, previous = 0, point.offset, -1
            while at < len(buf):
                data, n, consumed, following, last_start = render_run(
                    buf[at:], fmt is JSON_LINES, next_offset, limit
                )
                if n:
                    pieces.append(data)
                    at, next_offset, previous = at + consumed, following, at + last_start
                    continue
                step = self._slow_render(segment, fd, point.position, at, previous, last.position, fmt)
                if step is None:
                    break
                data, previous, position, next_offset = step
                pieces.append(data)
                at = position - point.position
        finally:
            os.close(fd)
        joined = b"".join(pieces)
        if point.cum(name) + len(joined) != last.cum(name):
            # damaged (or rewritten) since it was counted: its positions no longer hold; the next open
            # counts it again (the file's mtime changed)
            raise CorruptRecordError(
                "the batches changed since they were counted", segment.log_path, point.position
            )
        return point.cum(name), joined

    @staticmethod
    def _slow_render(
        segment: CountedSegment, fd: int, base: int, at: int, previous: int, end: int, fmt: StreamFormat
    ) -> tuple[bytes, int, int, int] | None:
        """(the ``fmt`` bytes of the batch at ``base + at``, where it starts relative to ``base``, the
        position after it, its next offset) through the Python decoders, past any damage before it (a
        damaged batch renders nothing); the careful walk starts at the batch before (``previous``)."""
        damaged: list[Damage] = []
        path = str(segment.log_path)
        position = base + at
        start = base + previous if 0 <= previous < at else position
        for header, data in segment.iter_batches(start, end, fd=fd, on_damage=damaged.append):
            if header.position < position:
                continue
            try:
                rendered = fmt.render(data, header.at(0), path)
            except CorruptRecordError:
                rendered = b""
            return rendered, header.position - base, header.end_position, header.next_offset
        damaged = [d for d in damaged if d.end > position]
        if damaged:
            return b"", previous, damaged[-1].end, -(1 << 63)
        return None

"""``ValueStream``: the ``records`` view of a log - every user record value + ``b"\\n"``, in offset order.

Byte positions are counted from the log start offset (null values count as empty lines). The stream
keeps, per segment, the number of bytes its records contribute; a sealed segment is scanned once, the
active one only from where the last scan stopped, so :meth:`ValueStream.size` costs one look at the
new batches. To serve :meth:`ValueStream.read`, a segment also gets a batch table (file position and
first stream byte of every batch), kept for the active segment and a few recently read sealed ones.

When retention removes old segments, positions shift down by the bytes they held (the file is then
shorter, as after a truncation - ``tail -f`` says so and carries on).
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seglogfs.records import BatchHeader, decode_batch_columns, read_batch_header

_NEWLINE = 10
_TABLES_KEPT = 8  # sealed segments whose batch table stays in memory


@dataclass(slots=True)
class _Segment:
    """What the stream knows about one segment."""

    base_offset: int
    path: str
    next_offset: int  # scanned up to here
    nbytes: int = 0
    complete: bool = False  # sealed and fully scanned
    # batch table: positions in the .log, sizes, and each batch's first byte within this segment's part
    positions: list[int] | None = field(default_factory=list)
    sizes: list[int] | None = field(default_factory=list)
    starts: list[int] | None = field(default_factory=list)


def batch_values(buf: Any, header: BatchHeader, path: str | None = None) -> bytes:
    """The values of one batch's user records, each followed by a newline (``buf`` holds the batch)."""
    cols = decode_batch_columns(buf, header, path=path)
    n = len(cols)
    if n == 0:
        return b""
    lengths = np.maximum(cols.value_lengths, 0)
    sizes = lengths + 1
    ends = np.cumsum(sizes)
    total = int(ends[-1])
    data = np.append(cols.data, np.uint8(_NEWLINE))  # index len(data) is the newline
    index = np.repeat(cols.value_starts - (ends - sizes), sizes) + np.arange(total, dtype=np.int64)
    index[ends - 1] = data.shape[0] - 1
    return data[index].tobytes()


def batch_value_bytes(buf: Any, header: BatchHeader, path: str | None = None) -> int:
    """How many stream bytes one batch contributes."""
    cols = decode_batch_columns(buf, header, path=path)
    return int(np.maximum(cols.value_lengths, 0).sum()) + len(cols)


class ValueStream:
    """The ``records`` file of ``log``: :meth:`size` and :meth:`read` by byte position."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self._lock = threading.RLock()
        self._segments: OrderedDict[int, _Segment] = OrderedDict()  # base offset -> state, oldest first
        self._with_table: OrderedDict[int, None] = OrderedDict()  # LRU of sealed segments with a table
        self._cached: tuple[int, int, bytes] | None = None  # (segment base, batch position, values)

    # ------------------------------------------------------------------ scanning
    @staticmethod
    def _read_batch(seg: _Segment, position: int, size: int) -> bytes:
        fd = os.open(seg.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, size, position)
        finally:
            os.close(fd)

    def _scan(self, seg: _Segment, end: int | None, keep_table: bool) -> None:
        """Count the batches of ``seg`` from ``seg.next_offset`` (up to ``end``, the next segment)."""
        table = keep_table and seg.positions is not None
        for _segment, header, data in self.log.iter_batches(seg.next_offset, end):
            if header.next_offset <= seg.next_offset:
                continue
            nbytes = batch_value_bytes(data, header.at(0), seg.path)
            if table:
                seg.positions.append(header.position)
                seg.sizes.append(header.size)
                seg.starts.append(seg.nbytes)
            seg.nbytes += nbytes
            seg.next_offset = header.next_offset
        if end is not None:
            seg.complete = True

    def _refresh(self) -> list[_Segment]:
        """Bring every segment's totals up to date; the segments in order."""
        segments = self.log.segments
        bases = [s.base_offset for s in segments]
        live = set(bases)
        for base in [b for b in self._segments if b not in live]:
            del self._segments[base]
            self._with_table.pop(base, None)
        out = []
        for i, segment in enumerate(segments):
            state = self._segments.get(segment.base_offset)
            if state is None:
                state = _Segment(segment.base_offset, str(segment.log_path), segment.base_offset)
                self._segments[segment.base_offset] = state
            if not state.complete:
                end = bases[i + 1] if i + 1 < len(bases) else None
                self._scan(state, end, keep_table=True)
                if state.complete:
                    self._remember_table(state)
            out.append(state)
        return out

    def _remember_table(self, seg: _Segment) -> None:
        self._with_table[seg.base_offset] = None
        self._with_table.move_to_end(seg.base_offset)
        while len(self._with_table) > _TABLES_KEPT:
            base, _ = self._with_table.popitem(last=False)
            old = self._segments.get(base)
            if old is not None:
                old.positions = old.sizes = old.starts = None

    def _table(self, seg: _Segment, end: int | None) -> _Segment:
        """``seg`` with its batch table (rescanning a sealed segment whose table was dropped)."""
        if seg.positions is None:
            fresh = _Segment(seg.base_offset, seg.path, seg.base_offset)
            self._scan(fresh, end, keep_table=True)
            seg.positions, seg.sizes, seg.starts = fresh.positions, fresh.sizes, fresh.starts
        if seg.complete:
            self._remember_table(seg)
        return seg

    # ------------------------------------------------------------------ public
    def size(self) -> int:
        """The current length of the stream in bytes."""
        with self._lock:
            return sum(s.nbytes for s in self._refresh())

    def _values(self, seg: _Segment, i: int) -> bytes:
        position = seg.positions[i]
        cached = self._cached
        if cached is not None and cached[0] == seg.base_offset and cached[1] == position:
            return cached[2]
        buf = self._read_batch(seg, position, seg.sizes[i])
        header = read_batch_header(buf, 0, path=seg.path)
        values = batch_values(buf, header, seg.path)
        self._cached = (seg.base_offset, position, values)
        return values

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (``b""`` at or past the end)."""
        if size <= 0 or position < 0:
            return b""
        with self._lock:
            segments = self._refresh()
            out: list[bytes] = []
            wanted = size
            seg_start = 0
            for k, seg in enumerate(segments):
                seg_end = seg_start + seg.nbytes
                if position >= seg_end:
                    seg_start = seg_end
                    continue
                end = segments[k + 1].base_offset if k + 1 < len(segments) else None
                self._table(seg, end)
                rel = position - seg_start
                i = bisect.bisect_right(seg.starts, rel) - 1
                while wanted > 0 and i < len(seg.positions):
                    values = self._values(seg, i)
                    skip = rel - seg.starts[i]
                    piece = values[skip : skip + wanted]
                    out.append(piece)
                    wanted -= len(piece)
                    rel += len(piece)
                    position += len(piece)
                    i += 1
                if wanted <= 0:
                    break
                seg_start = seg_end
            return b"".join(out)

"""``ValueStream``: the ``records`` view of a log - every user record value + ``b"\\n"``, in offset order.

Positions are stable: byte ``p`` of the stream always holds the same byte of the same record, from the
first record the stream saw (the log start when it was created) on, whatever rolls and retention do.
The stream keeps, per segment, the number of bytes its records contribute; each segment is scanned
through its own file, by file position, up to the size that file had when scanned - a scan never runs
on into a segment rolled after it. A sealed segment is scanned once, the active one only from where
the last scan stopped, so :meth:`ValueStream.size` costs one look at the new batches. To serve reads, a
segment also gets a batch table (file position and first stream byte of every batch), kept for the
active segment and a few recently read sealed ones. A damaged batch (one whose records are EIO through
``by-offset``) contributes no bytes: the scan resyncs on the next intact batch (the segment's careful
survey) and logs the damage once, so damage costs the stream only its own records, never a read or a stat.

Retention: a segment the log deletes stays readable while its renamed ``.deleted`` file exists (Kafka's
``file.delete.delay.ms``, which exists for readers in the middle of it). Once it is gone its bytes
become the stream's *hole*: they still count in positions and in :meth:`size` (which therefore never
shrinks, so ``tail -f`` never sees a truncation), but no longer read. Each open file reads through a
:class:`StreamReader`: a new reader whose first read lies before the log start offset starts there
(``cat records`` after retention shows the log from its start offset); a reader never sees a torn or
repeated line: one overtaken mid-record by the deletion gets OffsetOutOfRangeError, one overtaken
between records gets end of file, and when it asks again it goes on from the log start offset.
The hole lasts only while someone may hold positions: with no reader open and no :meth:`size` asked
for longer than the kernel caches it, the stream drops its hole and begins at the log start offset
again (so ``tail -n`` finds every line before the end, as in a file that never had a hole).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from seglogfs.errors import CorruptRecordError, OffsetOutOfRangeError
from seglogfs.records import read_batch_header
from seglogfs.segment import Damage, LogSegment
from seglogfs.stream_format import VALUES, StreamFormat
from seglogfs.stream_totals import SealedTotal, remember_sealed_total, sealed_total

if TYPE_CHECKING:
    from seglogfs.log import Log

log = logging.getLogger(__name__)

_NEWLINE = 10
_TABLES_KEPT = 8  # sealed segments whose batch table stays in memory, and more while their tables
_TABLE_ENTRIES_KEPT = 100_000  # hold this many batches (~100 bytes each): then no segment is counted twice
#: how long after the last size() with no reader open the stream may drop its hole; the mount then
#: invalidates the sizes the kernel cached (``rebases`` changes, seglogfs.fs.invalidation)
QUIET_BEFORE_REBASE_S = 1.5


@dataclass(slots=True, eq=False)
class _Segment:
    """What the stream knows about one segment."""

    segment: LogSegment
    scanned: int = 0  # file position scanned up to
    nbytes: int = 0  # stream bytes of the records scanned so far
    sealed: bool = False  # a later segment exists: the file will not grow
    complete: bool = False  # sealed and fully scanned
    dropped: bool = False  # retention removed it from the log; readable while its file exists
    min_offset: int = -1  # batches wholly below it are not part of the stream (the log start offset)
    first_position: int = 0  # where the scan starts (a from-stream's first segment: found by the index)
    next_offset: int = -1  # the offset after the last batch scanned (the base offset before any)
    # batch table: positions in the .log, sizes, and each batch's first byte within this segment's part
    positions: list[int] | None = field(default_factory=list)
    sizes: list[int] | None = field(default_factory=list)
    starts: list[int] | None = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.next_offset < 0:
            self.next_offset = self.segment.base_offset
        self.scanned = max(self.scanned, self.first_position)

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset

    @property
    def whole(self) -> bool:
        """Every batch of the segment counts in full (no first offset or start offset inside it)."""
        return self.first_position == 0 and self.min_offset <= self.segment.base_offset


class _Gone(Exception):
    """A dropped segment's file disappeared while it was being read (it is now part of the hole)."""


class ValueStream:
    """The ``records`` file of ``log``: :meth:`size`, and reads by stable byte position.

    ``fmt`` chooses the bytes of each record (:data:`VALUES`, or :data:`~seglogfs.stream_format.JSON_LINES`
    for ``records.jsonl``). With ``first_offset`` the stream is ``from/<n>``: it begins at the record
    ``first_offset`` (or the first after it), whose batch the segment's offset index finds; the
    segments before it are never read, and a new reader starts there (not at the log start offset).
    """

    def __init__(self, log: Log, *, first_offset: int | None = None, fmt: StreamFormat = VALUES) -> None:
        self.log = log
        self.first_offset = first_offset
        self.fmt = fmt
        self._lock = threading.RLock()
        self._hole = 0  # stream bytes of segments retention deleted and that can no longer be read
        self._hole_next_offset: int | None = None  # the offset after the hole's last record
        self._segments: OrderedDict[int, _Segment] = OrderedDict()  # base offset -> state, oldest first
        self._with_table: OrderedDict[int, None] = OrderedDict()  # LRU of sealed segments with a table
        self._table_entries = 0  # batches in the tables of _with_table
        self._cached: tuple[int, int, bytes] | None = None  # (segment base, batch position, values)
        self._readers = 0  # open StreamReaders
        self._last_size = 0.0  # time.monotonic() of the last size()
        self.rebases = 0  # how many times the stream dropped its hole (its size shrank)

    # ------------------------------------------------------------------ scanning
    def _open(self, seg: _Segment) -> int:
        """A descriptor of ``seg``'s .log, the stream's own (``LogSegment.open_reader_fd``): the
        segment's may be closed (and its number reused) when retention purges the files, while the
        stream still reads them; a segment retention renamed ``.deleted`` reads the renamed file.
        _Gone when the files are gone."""
        try:
            return seg.segment.open_reader_fd()
        except FileNotFoundError:
            self._raise_if_gone(seg)
            raise

    def _scan(self, seg: _Segment, *, report: bool = True) -> None:
        """Count the batches of ``seg`` from ``seg.scanned`` up to the size its file has now. A damaged
        batch contributes nothing: the walk resyncs on the next intact one, and (when ``report``) the
        damage is logged once, naming the file, the position and the offsets skipped. A sealed segment
        another stream counted whole is taken from :mod:`seglogfs.stream_totals` (when ``report``: not for a
        batch table's rescan), its batch table left to the first read."""
        if report and seg.sealed and seg.whole and seg.scanned == 0 and self._adopt_total(seg):
            return
        segment = seg.segment
        end = segment.size  # only complete batches lie below it
        damaged: list[Damage] = []
        fd = self._open(seg)
        try:
            for header, data in segment.iter_batches(
                seg.scanned, end, fd=fd, sealed=seg.sealed, on_damage=damaged.append
            ):
                included = header.last_offset >= seg.min_offset
                path = str(segment.log_path)
                try:
                    nbytes = self.fmt.count(data, header.at(0), path, self.first_offset) if included else 0
                except CorruptRecordError as exc:  # its CRC holds, its records do not parse
                    damaged.append(Damage(header.position, header.end_position, str(exc).split(" in ", 1)[0]))
                    continue
                if damaged:
                    self._skipped(seg, damaged, header.base_offset, report=report)
                if included:
                    if seg.positions is not None:
                        seg.positions.append(header.position)
                        seg.sizes.append(header.size)
                        seg.starts.append(seg.nbytes)
                    seg.nbytes += nbytes
                seg.scanned = header.end_position
                seg.next_offset = header.next_offset
        except FileNotFoundError:  # the survey past damage reads the segment's own file: purged
            self._raise_if_gone(seg)
            raise
        finally:
            os.close(fd)
        if damaged:
            self._skipped(seg, damaged, segment.offset_limit, report=report)
        if seg.sealed:
            seg.complete = True  # a torn or garbage tail of a sealed segment never completes
            if report and seg.whole and not seg.dropped:
                total = SealedTotal(seg.nbytes, seg.scanned, seg.next_offset)
                remember_sealed_total(segment, self.fmt.name, total)

    def _adopt_total(self, seg: _Segment) -> bool:
        """Take ``seg``'s counts from another stream's whole scan; False when there is none."""
        total = sealed_total(seg.segment, self.fmt.name)
        if total is None:
            return False
        seg.nbytes, seg.scanned, seg.next_offset = total.nbytes, total.scanned, total.next_offset
        seg.positions = seg.sizes = seg.starts = None  # built by _table when a read needs them
        seg.complete = True
        return True

    def _skipped(
        self, seg: _Segment, damaged: list[Damage], next_offset: int | None, *, report: bool
    ) -> None:
        """Step ``seg``'s scan past ``damaged`` (the stretches before the batch at ``next_offset``, or
        before the segment's end when None); log each stretch unless ``report`` is False (a rescan)."""
        seg.scanned = max(seg.scanned, damaged[-1].end)
        if report:
            skipped = f"{seg.next_offset}..{'' if next_offset is None else next_offset - 1}"
            for damage in damaged:
                log.error(
                    "%s: records: %s: position %d: %s; offsets %s skipped",
                    self.log.name, seg.segment.log_path, damage.position, damage.reason, skipped,
                )
        damaged.clear()

    def _check_continuity(self, newest: _Segment | None, base_offset: int) -> None:
        """Before counting a segment starting at ``base_offset``: when the records before it are not
        the last ones counted (segments retention deleted and purged between two looks), they are
        lost and no position can stand for them. Everything counted becomes hole, plus one byte no
        one can read: a reader at the end of what it saw meets the hole, never a silent jump."""
        expected = self._hole_next_offset if newest is None else newest.next_offset
        if expected is None or base_offset == expected or (newest is not None and not newest.complete):
            return
        if newest is not None:
            self._forget_through(newest)
        self._hole += 1
        log.warning(
            "%s: records: offsets %d to %d were deleted by retention before anyone read them",
            self.log.name, expected, base_offset - 1,
        )

    def _scan_incomplete(self, *, sealed_only: bool = False) -> None:
        """Scan every segment not complete yet; one whose files are gone becomes hole."""
        for seg in list(self._segments.values()):
            if seg.complete or seg.base_offset not in self._segments or (sealed_only and not seg.sealed):
                continue
            try:
                self._scan(seg)
            except _Gone:
                self._forget_through(seg)
                continue
            if seg.complete and seg.positions is not None:
                self._remember_table(seg)

    def _raise_if_gone(self, seg: _Segment) -> None:
        """_Gone when ``seg``'s file is missing because retention deleted it (maybe since the last
        refresh); otherwise nothing (the caller re-raises its error)."""
        if seg.dropped or all(s is not seg.segment for s in self.log.segments):
            seg.dropped = seg.sealed = True
            raise _Gone from None

    def _refresh(self) -> list[_Segment]:
        """Bring every segment's totals up to date; the known segments, oldest first."""
        live = self.log.segments  # a snapshot: the list is replaced, never changed in place
        # Deleted segments still on disk, read after the live ones: one deleted in between is in both.
        retired = [s for s in self.log.deleted_segments if all(s is not x for x in live)]
        live_index = {s.base_offset: k for k, s in enumerate(live)}
        for seg in self._segments.values():
            k = live_index.get(seg.base_offset)
            if k is None:
                seg.dropped = True
            seg.sealed = seg.sealed or k is None or k + 1 < len(live)
        self._scan_incomplete(sealed_only=True)  # their final next offsets tell whether records were lost
        candidates = [*retired, *live]
        for k, segment in enumerate(candidates):
            state = self._segments.get(segment.base_offset)
            if state is None:
                newest = next(reversed(self._segments.values()), None)
                if newest is not None and segment.base_offset < newest.base_offset:
                    continue  # older than what the stream already counts: not part of it
                fresh = not self._segments and not self._hole
                if fresh and self._before_first_offset(candidates, k):
                    continue
                self._check_continuity(newest, segment.base_offset)
                state = self._segments[segment.base_offset] = self._new_segment(segment, fresh=fresh)
            state.dropped = state.dropped or k < len(retired)
            state.sealed = state.sealed or state.dropped or k + 1 < len(candidates)
        self._scan_incomplete()
        for seg in list(self._segments.values()):
            if not seg.dropped or os.path.exists(seg.segment.log_path):  # renamed .deleted until purged
                break
            self._forget_through(seg)  # purged: its bytes can no longer be read
        return list(self._segments.values())

    def _before_first_offset(self, candidates: list[LogSegment], k: int) -> bool:
        """Whether ``candidates[k]`` lies wholly before a from-stream's first offset."""
        first = self.first_offset
        return first is not None and k + 1 < len(candidates) and candidates[k + 1].base_offset <= first

    def _new_segment(self, segment: LogSegment, *, fresh: bool) -> _Segment:
        """The state of a segment the stream meets for the first time (``fresh``: its first)."""
        if self.first_offset is not None:
            position = 0
            if fresh and self.first_offset > segment.base_offset:
                # the indexed batch at or before the first offset: the scan skips the few before it
                position = segment.offset_index.lookup(self.first_offset).position
            return _Segment(segment, min_offset=self.first_offset, first_position=position)
        # The stream begins at the log start offset, which may lie inside its first segment.
        return _Segment(segment, min_offset=self.log.start_offset if fresh else -1)

    def _forget_through(self, gone: _Segment) -> None:
        """Turn ``gone`` and every segment before it into hole."""
        while self._segments:
            base, seg = self._segments.popitem(last=False)
            if base in self._with_table:
                del self._with_table[base]
                self._table_entries -= len(seg.positions or ())
            self._hole += seg.nbytes
            self._hole_next_offset = seg.next_offset
            if seg is gone:
                break
        if self._cached is not None and self._cached[0] not in self._segments:
            self._cached = None

    def _remember_table(self, seg: _Segment) -> None:
        if seg.base_offset not in self._with_table:
            self._table_entries += len(seg.positions)
        self._with_table[seg.base_offset] = None
        self._with_table.move_to_end(seg.base_offset)
        while len(self._with_table) > _TABLES_KEPT and self._table_entries > _TABLE_ENTRIES_KEPT:
            base, _ = self._with_table.popitem(last=False)
            old = self._segments.get(base)
            if old is not None and old.positions is not None:
                self._table_entries -= len(old.positions)
                old.positions = old.sizes = old.starts = None

    def _table(self, seg: _Segment) -> _Segment:
        """``seg`` with its batch table (rescanning a sealed segment whose table was dropped)."""
        if seg.positions is None:
            fresh = _Segment(
                seg.segment, sealed=True, dropped=seg.dropped, min_offset=seg.min_offset,
                first_position=seg.first_position,
            )
            self._scan(fresh, report=False)  # its damage was logged by the first scan
            seg.positions, seg.sizes, seg.starts = fresh.positions, fresh.sizes, fresh.starts
        if seg.complete:
            self._remember_table(seg)
        return seg

    def _values(self, seg: _Segment, i: int) -> bytes:
        position = seg.positions[i]
        cached = self._cached
        if cached is not None and cached[0] == seg.base_offset and cached[1] == position:
            return cached[2]
        fd = self._open(seg)
        try:
            buf = os.pread(fd, seg.sizes[i], position)
        finally:
            os.close(fd)
        header = read_batch_header(buf, 0, path=seg.segment.log_path)
        values = self.fmt.render(buf, header, str(seg.segment.log_path), self.first_offset)
        self._cached = (seg.base_offset, position, values)
        return values

    def _read_at(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from stream ``position`` >= the hole (the caller holds the lock)."""
        out: list[bytes] = []
        wanted = size
        seg_start = self._hole
        for seg in list(self._segments.values()):
            seg_end = seg_start + seg.nbytes
            if position >= seg_end:
                seg_start = seg_end
                continue
            try:
                self._table(seg)
                rel = position - seg_start
                i = bisect.bisect_right(seg.starts, rel) - 1
                while wanted > 0 and i < len(seg.positions) and rel < seg.nbytes:
                    values = self._values(seg, i)
                    piece = values[rel - seg.starts[i] : rel - seg.starts[i] + wanted]
                    out.append(piece)
                    wanted -= len(piece)
                    rel += len(piece)
                    position += len(piece)
                    i += 1
            except _Gone:
                if out:
                    break  # what was read before is whole: the rest is the next read's business
                self._forget_through(seg)
                raise
            if wanted <= 0:
                break
            seg_start = seg_end
        return b"".join(out)

    # ------------------------------------------------------------------ public
    @property
    def readers(self) -> int:
        """How many :class:`StreamReader` of this stream are open."""
        return self._readers

    def size(self) -> int:
        """The current length of the stream in bytes (it never shrinks while a reader is open)."""
        with self._lock:
            self._maybe_rebase()
            self._last_size = time.monotonic()
            segments = self._refresh()
            return self._hole + sum(s.nbytes for s in segments)

    def _maybe_rebase(self) -> None:
        """With no reader open and no recent size(), begin the stream at the log start offset again:
        nobody can see the positions shift, and ``tail -n`` then finds every line before the end."""
        if self._readers or time.monotonic() - self._last_size < QUIET_BEFORE_REBASE_S:
            return
        dropped = [seg for seg in self._refresh() if seg.dropped]  # they lead: segments are in order
        if dropped:
            self._forget_through(dropped[-1])
        self.rebases += bool(self._hole)  # sizes shrank: a cached st_size is stale (seglogfs.fs.invalidation)
        self._hole = 0

    def bounds(self) -> tuple[int, int]:
        """(The first stream position that can still be read, i.e. the end of the hole; the position of
        the log start offset.) Between them lie segments retention deleted that are still readable."""
        with self._lock:
            segments = self._refresh()  # may turn segments into hole: read the hole after it
            live_from = self._hole
            for seg in segments:
                if not seg.dropped:
                    break
                live_from += seg.nbytes
            return self._hole, live_from

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from stream ``position`` (``b""`` at or past the end).

        OffsetOutOfRangeError when ``position`` lies in the hole (records retention removed).
        """
        if size <= 0 or position < 0:
            return b""
        with self._lock:
            self._refresh()
            return self._read_refreshed(position, size)

    def _read_refreshed(self, position: int, size: int) -> bytes:
        """:meth:`read`, by a caller holding the lock that has just refreshed."""
        for attempt in range(len(self._segments) + 2):
            if attempt:
                self._refresh()
            if position < self._hole:
                break
            try:
                return self._read_at(position, size)
            except _Gone:
                continue
        raise OffsetOutOfRangeError(
            f"bytes {position}.. of the records of log {self.log.name} were removed by retention"
        )

    def reader(self) -> StreamReader:
        """A reader for one open file of the stream; :meth:`StreamReader.close` it when done."""
        with self._lock:
            self._maybe_rebase()
            self._readers += 1
        return StreamReader(self)

    def _reader_closed(self) -> None:
        with self._lock:
            self._readers -= 1


class StreamReader:
    """One open ``records`` file: reads by position, as :meth:`ValueStream.read`, except where the
    stream's hole begins (see the module docstring): a reader never sees a torn or repeated line."""

    def __init__(self, stream: ValueStream) -> None:
        self.stream = stream
        self._lock = threading.Lock()
        self._skip = 0  # added to every position asked: the bytes of the hole this reader jumped over
        self._started = False  # a read was answered (bytes, or the end of the stream)
        self._next = 0  # the position after the last bytes returned
        self._at_line_start = True  # the last bytes returned ended a line
        self._eof_in_hole: int | None = None  # position of the last read answered b"" for the hole
        self._closed = False

    def close(self) -> None:
        """The file is closed (the stream may then drop its hole, see :meth:`ValueStream.size`)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self.stream._reader_closed()

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at this reader's ``position``."""
        if size <= 0 or position < 0:
            return b""
        with self._lock, self.stream._lock:  # one refresh (in bounds) serves the read
            while True:
                target = position + self._skip
                readable, live = self.stream.bounds()
                fresh = not self._started and target < live
                if fresh or (target < readable and position == self._eof_in_hole):
                    # A new reader starts at the log start offset; one that met the hole and asks again
                    # (tail -f after its end of file) goes on from there.
                    if not fresh:
                        log.warning(
                            "%s: a records reader fell behind retention: %d bytes of records skipped",
                            self.stream.log.name, live - target,
                        )
                    self._skip += live - target
                    self._eof_in_hole = None
                    target = live
                elif target < readable:
                    if position == self._next and not self._at_line_start:
                        raise OffsetOutOfRangeError(
                            f"the record being read from the records of log {self.stream.log.name} "
                            f"was removed by retention"
                        )
                    self._eof_in_hole = position
                    return b""
                try:
                    data = self.stream._read_refreshed(target, size)
                except OffsetOutOfRangeError:
                    continue  # the hole grew meanwhile: decide again
                self._started = True  # one that opened an empty log follows it from its start
                if data:
                    self._next = position + len(data)
                    self._at_line_start = data[-1] == _NEWLINE
                return data

"""``ValueStream``: the ``records`` view of a log - every user record value + ``b"\\n"``, in offset order.

Positions are stable: byte ``p`` of the stream always holds the same byte of the same record, from the
first record the stream saw (the log start when it was created) on, whatever rolls and retention do.
Under read_uncommitted, a segment's bytes and the batch holding a position come from the engine's totals
(:mod:`seglogfs.segment_totals`: counted once, a checkpoint lookup and at most one stretch read per
question; see :meth:`ValueStream.size` for a segment still being counted). Under read_committed (which
leaves batches out) the stream keeps, per segment, the number of bytes its records contribute; each
segment is scanned through its own file, by file position, up to the size that file had when scanned - a
scan never runs on into a segment rolled after it. A sealed segment is scanned once, the active one only
from where the last scan stopped, so :meth:`ValueStream.size` costs one look at the new batches. To
serve reads, a segment also gets a batch table (file position and first stream byte of every batch),
kept for the active segment and a few recently read sealed ones. A damaged batch (one whose records are
EIO through ``by-offset``) contributes no bytes: the scan resyncs on the next intact batch (the
segment's careful survey) and logs the damage once, so damage costs the stream only its own records,
never a read or a stat.

Retention: a segment the log deletes stays readable while its renamed ``.deleted`` file exists (Kafka's
``file.delete.delay.ms``, which exists for readers in the middle of it). Once it is gone its bytes
become the stream's *hole*: they still count in positions and in :meth:`size` (which therefore never
shrinks, so ``tail -f`` never sees a truncation), but no longer read. Each open file reads through a
:class:`StreamReader`: a new reader whose first read lies before the log start offset starts there
(``cat records`` after retention shows the log from its start offset); a reader never sees a torn or
repeated line: one overtaken mid-record by the deletion gets OffsetOutOfRangeError, one overtaken
between records gets end of file, and when it asks again it goes on from the log start offset.
The hole lasts only while someone may hold positions: with no reader open and no :meth:`size` asked
for a while, the next :meth:`size` asked for a getattr drops the hole and begins at the log start offset
again (so ``tail -n`` finds every line before the end, as in a file that never had a hole); an open
never does, since its opener gets the size the kernel cached (:meth:`rebase_due`).

Compaction: a segment the log cleaner replaced (the same base offset, a new :class:`LogSegment`, often
several old segments grouped into one) is, for a stream that counted it, like one retention deleted:
read from its ``.deleted`` file while that exists, then hole; the size never shrinks while a reader is
open. The replacing segment holds offsets the stream counted already, so it is not counted again (of
one whose predecessors were purged before the stream finished them, only the batches after the last
offset counted). A new reader of such a stream starts at the first position still readable (the
pre-clean records, while their files exist). A fresh stream (a new one, or one that begins again after
its quiet time) counts the live segments only: the compacted content, offset gaps skipped.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from seglogfs.errors import CorruptRecordError, OffsetOutOfRangeError
from seglogfs.hidden_totals import ZERO, hidden_total, want
from seglogfs.log_segments import segment_index_for
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED, Isolation
from seglogfs.records import read_batch_header
from seglogfs.segment import Damage, LogSegment, pread_within
from seglogfs.segment_totals import Goal, SegmentTotals
from seglogfs.stream_format import VALUES, StreamFormat
from seglogfs.views.stream_totals import SealedTotal, forget_sealed_total, remember_sealed_total, sealed_total

if TYPE_CHECKING:
    from seglogfs.log import Log

__all__ = ["QUIET_BEFORE_REBASE_S", "StreamReader", "ValueStream"]

log = logging.getLogger(__name__)

_TABLES_KEPT = 8  # sealed segments whose batch table stays in memory, and more while their tables
_TABLE_ENTRIES_KEPT = 100_000  # hold this many batches (~100 bytes each): then no segment is counted twice
#: how long after the last size() with no reader open the stream may drop its hole; the mount then
#: invalidates the sizes the kernel cached (``rebases`` changes, seglogfs.fs.invalidation)
QUIET_BEFORE_REBASE_S = 1.5
#: a segment's uncounted rest a size() counts itself rather than leave to the background counter
COUNT_INLINE_BYTES = 256 * 1024
#: while a log's totals are being counted, sizes are the counted part rounded down to this (see size())
UNCOUNTED_ROUNDING = 4096
_WINDOWS_KEPT = 4
_NEWLINE = 10


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
    # totals mode: sizes and batch lookups come from the engine's counts (seglogfs.segment_totals)
    totals: SegmentTotals | None = None
    part_pos: int = -1  # the file position the stream's part of the segment starts at (-1: not found yet)
    part_cum: int = 0  # the format's bytes of the segment before part_pos
    head: int = 0  # bytes of a from-stream's first batch (its records from the first offset on)
    head_batch: tuple[int, int] | None = None  # that batch's (position, size)
    counted_all: bool = True  # the engine counted the segment to its current end

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

    def __init__(
        self,
        log: Log,
        *,
        first_offset: int | None = None,
        fmt: StreamFormat = VALUES,
        isolation: Isolation = READ_UNCOMMITTED,
        end_at: int = 0,
    ) -> None:
        """``end_at``: the size the stream must not start below (a new stream of a file whose older
        stream a reader still has open: its first positions are hole, so both end at one size)."""
        self.log = log
        self.first_offset = first_offset
        self.fmt = fmt
        self.isolation = isolation
        # sealed-segment totals are shared by the streams of one format and isolation
        self._totals_key = fmt.name if isolation == READ_UNCOMMITTED else f"{fmt.name} {isolation}"
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
        # read_committed may leave batches out (aborted transactions, the last stable offset): it counts
        # for itself; read_uncommitted takes the engine's totals
        self._use_totals = isolation == READ_UNCOMMITTED
        self._reported = 0  # the largest size() answered while the log was being counted
        self._windows: OrderedDict[int, tuple[LogSegment, int, bytes]] = OrderedDict()
        #: the cleaner replaced segments the stream counted: a new open would not see the log as it is
        self.outdated = False
        #: set by the owner while an older stream of the same file is still read: no rebase then
        self.hold_positions = False
        self._start_hole = 0  # the hole the stream began with (end_at)
        if end_at > 0:
            size = self.size()
            with self._lock:
                self._start_hole = max(end_at - size, 0)
                self._hole += self._start_hole

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

    def _scan(
        self, seg: _Segment, *, report: bool = True, adopt: bool = True, end: int | None = None
    ) -> None:
        """Count the batches of ``seg`` from ``seg.scanned`` up to the size its file has now (or file
        position ``end``). A damaged batch contributes nothing: the walk resyncs on the next intact one,
        and (when ``report``) the damage is logged once, naming the file, the position and the offsets
        skipped. A sealed segment another stream counted whole is taken from
        :mod:`seglogfs.views.stream_totals` (when ``report``: not for a batch table's rescan), its batch
        table left to the first read; under read_committed, a whole segment not scanned yet is taken
        from the engine's totals (when ``adopt``: not for a count again after damage), or left to the
        background counter while it counts it (:meth:`_from_engine`)."""
        if seg.totals is not None:
            self._sync(seg)
            return
        if report and seg.sealed and seg.whole and seg.scanned == 0 and self._adopt_total(seg):
            return
        if report and adopt and seg.whole and seg.scanned == 0 and seg.nbytes == 0 and self._from_engine(seg):
            return
        segment = seg.segment
        end = segment.size if end is None else end  # only complete batches lie below it
        damaged: list[Damage] = []
        committed = self.isolation == READ_COMMITTED
        stable_end = self.log.last_stable_offset if committed else None
        hidden = self.log.hidden_batch() if committed else None
        stopped = False  # at the last stable offset: the next scan goes on from there
        fd = self._open(seg)
        try:
            for header, data in segment.iter_batches(
                seg.scanned, end, fd=fd, sealed=seg.sealed, on_damage=damaged.append
            ):
                if stable_end is not None and header.base_offset >= stable_end:
                    stopped = True
                    break
                included = header.last_offset >= seg.min_offset
                if hidden is not None and included:
                    included = not hidden(header)
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
        if seg.sealed and not stopped:
            seg.complete = True  # a torn or garbage tail of a sealed segment never completes
            if report and seg.whole and not seg.dropped:
                total = SealedTotal(seg.nbytes, seg.scanned, seg.next_offset)
                remember_sealed_total(segment, self._totals_key, total)

    # ------------------------------------------------------------------ totals mode
    def _sync(self, seg: _Segment, *, small: bool = True) -> None:
        """Take ``seg``'s counts from the engine's totals; with ``small``, first count a rest of at
        most :data:`COUNT_INLINE_BYTES` (what was appended since, or a small recovered segment)."""
        t, segment = seg.totals, seg.segment
        size = segment.size
        if small and not t.counted(size) and size - t.frontier.position <= COUNT_INLINE_BYTES:
            self._catch_up(seg)
        f = t.frontier
        if seg.dropped and f.position > seg.scanned and not os.path.exists(segment.log_path):
            # counted in memory, but purged before this stream saw those bytes: it can never read them
            self._raise_if_gone(seg)
        seg.counted_all = t.counted(size)
        if seg.part_pos < 0 and not self._locate(seg):
            return
        seg.nbytes = seg.head + max(f.cum(self.fmt.name) - seg.part_cum, 0)
        seg.scanned = f.position
        seg.next_offset = max(seg.next_offset, f.offset)
        if seg.sealed and seg.counted_all:
            seg.complete = True

    def _catch_up(self, seg: _Segment, **kwargs: object) -> None:
        """``seg.totals.catch_up(**kwargs)``; _Gone when retention purged its files."""
        try:
            seg.totals.catch_up(**kwargs)
        except FileNotFoundError:
            self._raise_if_gone(seg)
            raise

    def _locate(self, seg: _Segment) -> bool:
        """Find where the stream's part of ``seg`` starts (a from-stream's first record, the log
        start offset): a lookup in the totals' checkpoints and at most one stretch read. False while
        the totals have not passed it."""
        t = seg.totals
        if seg.min_offset <= seg.base_offset:
            seg.part_pos, seg.part_cum = 0, 0
            return True
        try:
            found = t.locate(seg.min_offset, self.fmt)
        except FileNotFoundError:
            self._raise_if_gone(seg)
            raise
        if found is None:
            if seg.sealed and seg.counted_all:  # no batch of the segment is part of the stream
                seg.part_pos, seg.part_cum = t.frontier.position, t.frontier.cum(self.fmt.name)
                return True
            return False
        cum, header, data, nbytes = found
        first = self.first_offset
        if first is not None and header.base_offset < first:
            try:
                seg.head = self.fmt.count(data, header.at(0), str(seg.segment.log_path), first)
            except CorruptRecordError:
                seg.head = 0
            seg.head_batch = (header.position, header.size)
            seg.part_pos, seg.part_cum = header.end_position, cum + nbytes
        else:
            seg.part_pos, seg.part_cum = header.position, cum
        return True

    def _count_for(self, end: int) -> None:
        """Have the engine count (in this request) as far as stream position ``end`` needs: a read
        past what the background counter has reached so far."""
        seg_start = self._hole
        for seg in list(self._segments.values()):
            if not seg.counted_all:
                if seg.part_pos >= 0 and seg_start + seg.nbytes >= end:
                    return
                if seg.part_pos < 0:
                    low = seg.min_offset
                    self._catch_up(seg, until=Goal("offset", low))
                    self._sync(seg, small=False)
                if seg.part_pos >= 0:
                    name, target = self.fmt.name, end - seg_start - seg.head + seg.part_cum
                    self._catch_up(seg, until=Goal(name, target))
                    self._sync(seg, small=False)
                if not seg.counted_all:
                    return
            seg_start += seg.nbytes

    def _window(self, seg: _Segment, cum: int) -> tuple[int, bytes]:
        """The bytes of the checkpoint stretch of ``seg`` holding byte ``cum``, and where they start."""
        key = seg.segment.uid
        kept = self._windows.get(key)
        if kept is not None and kept[0] is seg.segment and kept[1] <= cum < kept[1] + len(kept[2]):
            self._windows.move_to_end(key)
            return kept[1], kept[2]
        try:
            start, data = seg.totals.window(cum, self.fmt)
        except FileNotFoundError:
            self._raise_if_gone(seg)
            raise
        self._windows[key] = (seg.segment, start, data)
        self._windows.move_to_end(key)
        while len(self._windows) > _WINDOWS_KEPT:
            self._windows.popitem(last=False)
        return start, data

    def _render(self, seg: _Segment, position: int, size: int) -> bytes:
        """The stream bytes of the batch at ``position`` of ``seg`` (the last one kept)."""
        cached = self._cached
        if cached is not None and cached[0] == seg.segment.uid and cached[1] == position:
            return cached[2]
        fd = self._open(seg)
        try:
            buf = os.pread(fd, size, position)
        finally:
            os.close(fd)
        header = read_batch_header(buf, 0, path=seg.segment.log_path)
        values = self.fmt.render(buf, header, str(seg.segment.log_path), self.first_offset)
        self._cached = (seg.segment.uid, position, values)
        return values

    def _piece(self, seg: _Segment, rel: int, wanted: int) -> bytes:
        """Up to ``wanted`` bytes from byte ``rel`` of ``seg``'s part, within one batch."""
        if rel < seg.head:
            values = self._render(seg, *seg.head_batch)
            return values[rel : rel + wanted]
        cum = rel - seg.head + seg.part_cum
        start, data = self._window(seg, cum)
        return data[cum - start : cum - start + wanted]

    def _read_totals(self, position: int, size: int) -> bytes:
        """:meth:`_read_at` in totals mode."""
        self._count_for(position + size)
        out: list[bytes] = []
        wanted = size
        seg_start = self._hole
        for seg in list(self._segments.values()):
            seg_end = seg_start + seg.nbytes
            if position < seg_end:
                try:
                    while wanted > 0 and position < seg_end:
                        piece = self._piece(seg, position - seg_start, wanted)
                        if not piece:
                            return b"".join(out)
                        out.append(piece)
                        wanted -= len(piece)
                        position += len(piece)
                except _Gone:
                    if out:
                        break
                    self._forget_through(seg)
                    raise
                except CorruptRecordError:
                    if out:
                        break  # what was read before is whole: the next read meets the damage first
                    if not self._count_without_totals():
                        raise
                    self._refresh()
                    return self._read_at(position, size)
            if wanted <= 0 or not seg.counted_all:
                break
            seg_start = seg_end
        return b"".join(out)

    def _count_without_totals(self) -> bool:
        """A batch the engine counted is unreadable now (its file cut or damaged under the daemon):
        from here on the stream counts batch by batch, as a read_committed stream does, so that only
        the lost batches' records go (the damage logged with their offsets) and ``records`` goes on.
        Not while another reader is open (positions after the damage move down). True when switched."""
        if self._readers > 1 or not self._use_totals:
            return False
        log.warning("%s: a batch counted before is unreadable now: its views count batch by batch",
                    self.log.name)
        self._use_totals = False
        self._segments.clear()
        self._with_table.clear()
        self._table_entries = 0
        self._cached = None
        self._windows.clear()
        self.rebases += 1  # sizes shrank: a cached st_size is stale (seglogfs.fs.invalidation)
        return True

    def _adopt_total(self, seg: _Segment) -> bool:
        """Take ``seg``'s counts from another stream's whole scan; False when there is none."""
        total = sealed_total(seg.segment, self._totals_key)
        if total is None:
            return False
        seg.nbytes, seg.scanned, seg.next_offset = total.nbytes, total.scanned, total.next_offset
        seg.positions = seg.sizes = seg.starts = None  # built by _table when a read needs them
        seg.complete = True
        return True

    def _from_engine(self, seg: _Segment) -> bool:
        """A read_committed stream's counts of the whole segment ``seg`` from the engine's totals minus
        what read_committed leaves out (:mod:`seglogfs.hidden_totals`), cut at the last stable offset
        (one checkpoint lookup); its batch table is left to the first read. While the background counter
        has not counted what that needs, a segment too big to scan here is left uncounted (``size()``
        is then a lower bound; a read scans it). False when the caller must scan it."""
        if self.isolation != READ_COMMITTED:
            return False
        segment = seg.segment
        t, size = segment.totals, segment.size
        lso = self.log.last_stable_offset
        if segment.base_offset >= lso:
            seg.counted_all = True
            return False  # nothing of it is visible yet: the scan stops at its first batch
        if not t.counted(size):
            return self._leave_uncounted(seg, waits=True)
        f = t.frontier
        hidden = ZERO
        if self.log.has_aborted_transactions():
            want(self.log)
            found = hidden_total(segment)
            if found is None or not found.covers(min(f.offset, lso), f.offset):
                sealed_below = segment.offset_limit is not None and segment.offset_limit <= lso
                return self._leave_uncounted(seg, waits=sealed_below)
            hidden = found
        if f.offset <= lso:
            position, next_offset, nbytes = f.position, f.offset, f.cum(self.fmt.name)
        else:
            try:
                found_batch = t.locate(lso, self.fmt)
            except FileNotFoundError:
                return False
            if found_batch is None:
                return False
            nbytes, header = found_batch[0], found_batch[1]
            position, next_offset = header.position, header.base_offset
        seg.nbytes = nbytes - hidden.of(self.fmt.name)
        seg.scanned, seg.next_offset = position, next_offset
        seg.positions = seg.sizes = seg.starts = None  # built by _table when a read needs them
        seg.counted_all = True
        if seg.sealed and position >= size:
            seg.complete = True
        return True

    def _leave_uncounted(self, seg: _Segment, *, waits: bool) -> bool:
        """Leave ``seg`` to the background counter (``waits``: it counts what the stream needs) when
        scanning it here would cost more than :data:`COUNT_INLINE_BYTES`; True when left."""
        if not waits or seg.segment.size <= COUNT_INLINE_BYTES:
            seg.counted_all = True
            return False
        seg.counted_all = False
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
        live_by_base = {s.base_offset: (k, s) for k, s in enumerate(live)}
        for seg in self._segments.values():
            k, segment = live_by_base.get(seg.base_offset, (None, None))
            if segment is not seg.segment:  # retention deleted it, or the cleaner replaced it
                seg.dropped = True
            seg.sealed = seg.sealed or seg.dropped or k + 1 < len(live)
        self._scan_incomplete(sealed_only=True)  # their final next offsets tell whether records were lost
        fresh = not self._segments and self._hole == self._start_hole
        # A fresh stream begins with the live segments: the cleaner's replacements, not what they replaced.
        candidates = [*([] if fresh else retired), *live]
        first_live = len(candidates) - len(live)
        for k, segment in enumerate(candidates):
            state = self._segments.get(segment.base_offset)
            if state is not None and state.segment is not segment:
                continue  # the cleaner's replacement of a segment the stream counted already
            if state is None:
                state = self._add_segment(candidates, k)
                if state is None:
                    continue
            state.dropped = state.dropped or k < first_live
            state.sealed = state.sealed or state.dropped or k + 1 < len(candidates)
        self._scan_incomplete()
        if not self.outdated and live:
            self.outdated = any(seg.dropped and seg.next_offset > live[0].base_offset
                                for seg in self._segments.values())
        for seg in list(self._segments.values()):
            if not seg.dropped or os.path.exists(seg.segment.log_path):  # renamed .deleted until purged
                break
            self._forget_through(seg)  # purged: its bytes can no longer be read
        return list(self._segments.values())

    def _add_segment(self, candidates: list[LogSegment], k: int) -> _Segment | None:
        """The state of ``candidates[k]``, a segment the stream meets for the first time; None when its
        records are not part of the stream (before the stream's first record, or counted already)."""
        segment = candidates[k]
        newest = next(reversed(self._segments.values()), None)
        if newest is not None and segment.base_offset < newest.base_offset:
            return None  # older than what the stream already counts: not part of it
        fresh = not self._segments and self._hole == self._start_hole
        if fresh and self._before_first_offset(candidates, k):
            return None
        counted_to = self._hole_next_offset if newest is None else newest.next_offset
        if counted_to is not None and segment.base_offset < counted_to:
            # A cleaner's replacement of segments whose files are gone: only its records after the
            # last one counted are new (the cleaner keeps batch boundaries, so none straddles it).
            later = (c.base_offset for c in candidates[k + 1 :] if c.base_offset > segment.base_offset)
            ends = min(later, default=self.log.end_offset)
            self.outdated = True  # the records it held before counted_to are not the ones counted
            if ends <= counted_to:
                return None
            state = self._segments[segment.base_offset] = self._state(segment, min_offset=counted_to)
            return state
        self._check_continuity(newest, segment.base_offset)
        state = self._segments[segment.base_offset] = self._new_segment(segment, fresh=fresh)
        return state

    def _before_first_offset(self, candidates: list[LogSegment], k: int) -> bool:
        """Whether ``candidates[k]`` lies wholly before a from-stream's first offset."""
        first = self.first_offset
        return first is not None and k + 1 < len(candidates) and candidates[k + 1].base_offset <= first

    def _new_segment(self, segment: LogSegment, *, fresh: bool) -> _Segment:
        """The state of a segment the stream meets for the first time (``fresh``: its first)."""
        if self.first_offset is not None:
            position = 0
            if fresh and self.first_offset > segment.base_offset and not self._use_totals:
                # the indexed batch at or before the first offset: the scan skips the few before it
                position = segment.offset_index.lookup(self.first_offset).position
            return self._state(segment, min_offset=self.first_offset, first_position=position)
        # The stream begins at the log start offset, which may lie inside its first segment.
        return self._state(segment, min_offset=self.log.start_offset if fresh else -1)

    def _state(self, segment: LogSegment, *, min_offset: int, first_position: int = 0) -> _Segment:
        """A new segment state, in totals mode when the stream takes the engine's totals."""
        if not self._use_totals:
            return _Segment(segment, min_offset=min_offset, first_position=first_position)
        return _Segment(
            segment, min_offset=min_offset, totals=segment.totals, positions=None, sizes=None, starts=None
        )

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
            self._scan(fresh, report=False, end=seg.scanned)  # its damage was logged by the first scan
            if fresh.nbytes != seg.nbytes:  # damaged since: _read_at counts it again
                raise CorruptRecordError("batches counted before are unreadable", seg.segment.log_path)
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
            buf = pread_within(fd, seg.sizes[i], position, position + seg.sizes[i], seg.segment.log_path)
        finally:
            os.close(fd)
        header = read_batch_header(buf, 0, path=seg.segment.log_path)
        values = self.fmt.render(buf, header, str(seg.segment.log_path), self.first_offset)
        self._cached = (seg.base_offset, position, values)
        return values

    def _read_at(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from stream ``position`` >= the hole (the caller holds the lock)."""
        if self._use_totals:
            return self._read_totals(position, size)
        out: list[bytes] = []
        wanted = size
        seg_start = self._hole
        for seg in list(self._segments.values()):
            if not seg.counted_all:  # left to the background counter: this read needs it now
                try:
                    self._scan(seg, adopt=False)
                except _Gone:
                    if out:
                        break
                    self._forget_through(seg)
                    raise
                seg.counted_all = True
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
            except CorruptRecordError:
                if out:
                    break  # as above: the next read meets the damage at a batch's first byte
                if not self._recount(seg, position - seg_start):
                    raise
                return self._read_at(position, size)
            if wanted <= 0:
                break
            seg_start = seg_end
        return b"".join(out)

    def _recount(self, seg: _Segment, rel: int) -> bool:
        """Count ``seg`` again, as a first scan does (its damage logged with the offsets lost), once a
        batch it counted turned out unreadable (its file cut or damaged under the daemon); the stream's
        later bytes move down. Not while another reader is open (its positions would move under it)
        nor for a read that begins inside a batch (its line would be torn). True when the count changed."""
        if self._readers > 1 or (seg.starts is not None and rel not in seg.starts):
            return False
        fresh = _Segment(
            seg.segment, sealed=seg.sealed, dropped=seg.dropped, min_offset=seg.min_offset,
            first_position=seg.first_position,
        )
        shared = sealed_total(seg.segment, self._totals_key) if seg.whole else None
        if shared is not None and shared.nbytes < seg.nbytes:
            self._scan(fresh, report=False)  # another stream counted it again since, and logged why
        else:
            forget_sealed_total(seg.segment, self._totals_key)  # counted before the damage
            self._scan(fresh, adopt=False)
        if fresh.nbytes == seg.nbytes:
            return False
        if seg.base_offset in self._with_table:
            self._table_entries += len(fresh.positions or ()) - len(seg.positions or ())
        seg.nbytes, seg.scanned, seg.next_offset = fresh.nbytes, fresh.scanned, fresh.next_offset
        seg.positions, seg.sizes, seg.starts = fresh.positions, fresh.sizes, fresh.starts
        self._cached = None
        self.rebases += 1  # sizes shrank: a cached st_size is stale (seglogfs.fs.invalidation)
        return True

    # ------------------------------------------------------------------ public
    @property
    def readers(self) -> int:
        """How many :class:`StreamReader` of this stream are open."""
        return self._readers

    def size(self, *, rebase: bool = True) -> int:
        """The current length of the stream in bytes (it never shrinks while a reader is open).
        ``rebase``: the hole may go here (see :meth:`rebase_due`); only for a size whose asker
        takes it as the file's (a getattr, whose answer the kernel caches), never for one an open
        needs: the kernel would go on giving that opener the size it cached before.

        While the engine is still counting a segment of the stream in the background (data seglogfs
        did not write), the size is the part counted so far, from the start, rounded down to
        :data:`UNCOUNTED_ROUNDING` and never less than an answer given before: a lower bound that
        reads go past (they count what they need), see docs/mount.md."""
        with self._lock:
            if rebase:
                self._maybe_rebase()
            self._last_size = time.monotonic()
            segments = self._refresh()
            total, exact = self._hole, True
            for seg in segments:
                total += seg.nbytes
                if not seg.counted_all:
                    exact = False
                    break
            if exact:
                self._reported = total
                return total
            self._reported = max(self._reported, total - total % UNCOUNTED_ROUNDING)
            return self._reported

    def _maybe_rebase(self) -> None:
        """With no reader open and no recent size(), begin the stream at the log start offset again:
        nobody can see the positions shift, and ``tail -n`` then finds every line before the end.
        When the cleaner replaced segments the stream counted, it begins afresh, with their cleaned
        content (sealed segments' totals are shared: :mod:`seglogfs.views.stream_totals`)."""
        if self._readers or self.hold_positions or time.monotonic() - self._last_size < QUIET_BEFORE_REBASE_S:
            return
        segments = self._refresh()
        kept = [seg for seg in segments if not seg.dropped]
        retention_only = segments[len(segments) - len(kept) :] == kept  # the dropped ones lead
        if kept and (self.outdated or not (retention_only and kept[0].segment is self._first_live())):
            # Not simply the log's live segments after retention's: the cleaner replaced some.
            self._forget_through(segments[-1])
            self._hole_next_offset = None
            self.rebases += 1  # positions changed: a cached st_size is stale (seglogfs.fs.invalidation)
            self._hole = self._start_hole = 0
            self.outdated = False
            self._reported = 0
            return
        dropped = [seg for seg in segments if seg.dropped]  # they lead: segments are in order
        if dropped:
            self._forget_through(dropped[-1])
        self.rebases += bool(self._hole)  # sizes shrank: a cached st_size is stale (seglogfs.fs.invalidation)
        if self._hole:
            self._reported = 0
        self._hole = self._start_hole = 0

    def _first_live(self) -> LogSegment | None:
        """The live segment a fresh stream would count first."""
        live = self.log.segments
        if not live:
            return None
        return live[0] if self.first_offset is None else live[segment_index_for(self.first_offset, live)]

    def _replaced(self, seg: _Segment) -> bool:
        """Whether ``seg`` left the log for a cleaned segment (not for retention): the log still
        holds its offsets, in a segment the stream does not count."""
        live = self.log.segments
        return seg.dropped and bool(live) and seg.next_offset > live[0].base_offset

    def bounds(self) -> tuple[int, int]:
        """(The first stream position that can still be read, i.e. the end of the hole; the position of
        the log start offset.) Between them lie segments retention deleted that are still readable;
        segments the cleaner replaced are not skipped (their offsets are still part of the log)."""
        with self._lock:
            segments = self._refresh()  # may turn segments into hole: read the hole after it
            live_from = self._hole
            for seg in segments:
                if not seg.dropped or self._replaced(seg):
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

    def read_chosen(self, size: int, choose: Callable[[int, int], int | None]) -> bytes:
        """Up to ``size`` bytes at the position ``choose(*self.bounds())`` returns (``b""`` when it
        returns None), with the stream locked from the bounds to the read, so they cannot move in
        between; when the hole grows past the chosen position meanwhile, ``choose`` decides again."""
        with self._lock:
            while True:
                position = choose(*self.bounds())
                if position is None:
                    return b""
                try:
                    return self._read_refreshed(position, size)
                except OffsetOutOfRangeError:
                    continue

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

    def rebase_due(self) -> bool:
        """Whether the next :meth:`size` drops the hole or begins afresh (no reader, nothing else
        holding the positions, quiet for :data:`QUIET_BEFORE_REBASE_S`): the mount then invalidates
        the size the kernel cached, so that its next getattr asks (seglogfs.fs.invalidation). Never
        waits: a stream busy counting or reading is not quiet."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return (not self._readers and not self.hold_positions and bool(self._hole or self.outdated)
                    and time.monotonic() - self._last_size >= QUIET_BEFORE_REBASE_S)
        finally:
            self._lock.release()

    def reader(self) -> StreamReader:
        """A reader for one open file of the stream; :meth:`StreamReader.close` it when done. An open
        never moves the positions: the size its opener gets is the one the kernel cached."""
        with self._lock:
            self._readers += 1
        return StreamReader(self)

    def _reader_closed(self) -> None:
        with self._lock:
            self._readers -= 1


class StreamReader:
    """One open file of a :class:`ValueStream` (``records``, ``from/<n>``...): reads by position, as
    :meth:`ValueStream.read`, except where the stream's hole begins (see the module docstring): a reader
    never sees a torn or repeated line."""

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
        in_hole = False

        def choose(readable: int, live: int) -> int | None:
            """The stream position to read for ``position``, None for end of file (see the class)."""
            nonlocal in_hole
            in_hole = False
            target = position + self._skip
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
                return live
            if target < readable:
                if position == self._next and not self._at_line_start:
                    raise OffsetOutOfRangeError(
                        f"the record being read from the records of log {self.stream.log.name} "
                        f"was removed by retention"
                    )
                self._eof_in_hole = position
                in_hole = True
                return None
            return target

        with self._lock:
            data = self.stream.read_chosen(size, choose)
            if not in_hole:
                self._started = True  # one that opened an empty log follows it from its start
            if data:
                self._next = position + len(data)
                self._at_line_start = data[-1] == _NEWLINE
            return data

"""The damage survey of a segment's .log: which stretches hold intact batches, which are damage.

A batch is *intact* when its header parses, it fits the file and its CRC holds. Its *offsets* are a
different matter: the baseOffset lies outside the CRC, so an intact batch may still carry wrong
offsets. The survey labels each batch trusted (an index entry, the segment's base offset or a
trusted neighbour vouches for its offsets) or not, turns untrusted batches that contradict their
neighbours into :class:`Damage`, and resynchronises past damage on the next intact v2 batch.
:class:`SegmentSurvey` holds these walks; each :class:`~seglogfs.segment.LogSegment` has one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from .errors import CorruptRecordError
from .index import OffsetIndex
from .records import MAGIC_OFFSET, V2_HEADER_SIZE, BatchHeader, unchecked_v2_header, validate_batch

__all__ = ["Damage", "IndexedPositions", "SegmentSurvey", "SurveyedSegment", "follows"]

_READ_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes [position, end) of a .log that hold no intact batch, and what is wrong there."""

    position: int
    end: int
    reason: str


class IndexedPositions:
    """An offset index's entries in use, for surveys: which entry sits at a position, and where."""

    def __init__(self, offsets: np.ndarray, positions: np.ndarray) -> None:
        self._offsets, self._positions = offsets, positions

    @classmethod
    def none(cls) -> IndexedPositions:
        """No entries: a survey with no index to vouch for anything."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))

    def slot_at_or_before(self, offset: int) -> int:
        """The slot of the last entry whose offset is <= ``offset`` (-1 when none)."""
        return int(np.searchsorted(self._offsets, offset, side="right")) - 1

    def position(self, slot: int) -> int:
        """The position named by entry ``slot``."""
        return int(self._positions[slot])

    def at(self, position: int) -> int | None:
        """The offset of the entry at ``position``, or None."""
        slot = int(np.searchsorted(self._positions, position))
        if slot < len(self._positions) and int(self._positions[slot]) == position:
            return int(self._offsets[slot])
        return None

    def inside(self, lo: int, hi: int) -> bool:
        """Whether an entry points into [lo, hi)."""
        slot = int(np.searchsorted(self._positions, lo))
        return slot < len(self._positions) and int(self._positions[slot]) < hi


def follows(a: BatchHeader | None, b: BatchHeader | None) -> bool:
    """True when v2 batch ``b`` starts right after ``a`` ends (offsets with no gap)."""
    return a is not None and b is not None and b.magic >= 2 and b.base_offset == a.last_offset + 1


class SurveyedSegment(Protocol):
    """What a survey reads of its segment (a :class:`~seglogfs.segment.LogSegment`)."""

    base_offset: int
    size: int
    offset_limit: int | None
    log_path: Path
    index_path: Path

    @property
    def offset_index(self) -> OffsetIndex: ...
    def read(self, position: int, size: int) -> bytes: ...
    def read_raw(self, position: int, size: int) -> bytes: ...
    def read_header(self, position: int, end: int | None = None) -> BatchHeader | None: ...
    def header_or_none(self, position: int, end: int) -> BatchHeader | None: ...
    def offsets_fit(self, h: BatchHeader) -> bool: ...
    def index_contradicted(self, problem: str) -> None: ...


class SegmentSurvey:
    """The survey walks of ``segment``: every batch CRC-checked, offsets weighed against the
    neighbours' and the index's, damage resynchronised."""

    __slots__ = ("_segment",)

    def __init__(self, segment: SurveyedSegment) -> None:
        self._segment = segment

    def find_batch_careful(self, offset: int, *, use_index: bool = True) -> BatchHeader | None:
        """``find_batch`` by surveying the .log around the offset, every batch CRC-checked."""
        segment = self._segment
        entries = (
            IndexedPositions(*segment.offset_index.to_arrays()) if use_index else IndexedPositions.none()
        )
        slot = entries.slot_at_or_before(offset) - 1  # start one entry early: its batch is a witness
        start = entries.position(slot) if slot >= 0 else 0
        items, index_disagrees = self._survey(start, offset, entries)
        if index_disagrees and use_index:
            problem = f"{segment.index_path}: an entry contradicts the batches at offset {offset}"
            segment.index_contradicted(problem)
            return self.find_batch_careful(offset, use_index=False)
        damage: Damage | None = None
        for item in items:
            if isinstance(item, Damage):
                damage = damage or item
                continue
            if item.last_offset >= offset:
                if item.magic >= 2 and item.base_offset > offset and damage is not None:
                    break
                return item
            damage = None
        if damage is None:
            return None
        raise CorruptRecordError(f"damaged batch ({damage.reason})", self._segment.log_path, damage.position)

    def _survey(
        self, start: int, stop_offset: int, entries: IndexedPositions
    ) -> tuple[list[BatchHeader | Damage], bool]:
        """The intact batches and damaged stretches of the .log from ``start`` (a batch boundary), in
        file order, to the first index entry after the batch holding ``stop_offset`` and one more item
        (or a few batches further when there is none). Every batch is CRC-checked, then checked against
        its neighbours' offsets: a batch is trusted when an index entry names its last offset, when it
        is the first batch and starts at the segment's base offset, or when its offsets continue a
        trusted neighbour's; an untrusted batch that overlaps a neighbour or contradicts an index
        entry is damage (a changed baseOffset passes the CRC). Also returns whether the index
        contradicts trusted batches (then it is the index that is wrong)."""
        end = self._segment.size
        items: list[BatchHeader | Damage] = []
        position, past = start, -1
        while position < end and past <= 16:
            header, reason = self.intact_batch_at(position, end)
            if header is None:
                resumed = self._resync(position + 1, end)
                items.append(Damage(position, resumed, reason))
                position = resumed
            else:
                items.append(header)
                position = header.end_position
                if past < 0 and header.last_offset >= stop_offset:
                    past = 0
            if past >= 0:
                past += 1
                if past >= 2 and header is not None and entries.at(header.position) is not None:
                    break  # a batch an index entry vouches for: the neighbours' trust is settled
        return self._label(items, entries)

    def _label(
        self, items: list[BatchHeader | Damage], entries: IndexedPositions
    ) -> tuple[list[BatchHeader | Damage], bool]:
        """Turn batches whose offsets cannot be trusted and contradict their neighbours into Damage;
        also say whether an index entry contradicts a trusted batch."""
        n = len(items)
        batch = [item if isinstance(item, BatchHeader) else None for item in items]
        trusted = self._trusted(items, batch, entries)
        index_disagrees = False
        for h, ok in zip(batch, trusted, strict=True):
            if h is not None and ok:
                witness = entries.at(h.position)
                if (witness is not None and witness < h.last_offset) or entries.inside(
                    h.position + 1, h.end_position
                ):
                    index_disagrees = True
        # Untrusted batches weigh each other by whether they continue a neighbour's offsets: of two
        # that overlap, the one in a contiguous run is believed.
        support = [
            2
            if trusted[i]
            else int(follows(batch[i - 1] if i else None, h) or (i + 1 < n and follows(h, batch[i + 1])))
            for i, h in enumerate(batch)
        ]
        labelled: list[BatchHeader | Damage] = []
        for i, h in enumerate(batch):
            if h is None or trusted[i]:
                labelled.append(items[i])
                continue
            j = next((k for k in range(i - 1, -1, -1) if batch[k] is not None), None)
            previous = batch[j] if j is not None and support[j] >= support[i] else None
            following = batch[i + 1] if i + 1 < n and support[i + 1] >= support[i] else None
            reason = self._offsets_contradicted(h, previous, following, entries.at(h.position))
            beside_damage = (i > 0 and batch[i - 1] is None) or (i + 1 < n and batch[i + 1] is None)
            if not reason and support[i] == 0 and beside_damage:
                # Next to damage, continuing neither neighbour: its baseOffset may be damaged too.
                reason = f"offsets {h.base_offset}..{h.last_offset} continue no neighbour's, beside damage"
            labelled.append(Damage(h.position, h.end_position, reason) if reason else h)
        return labelled, index_disagrees

    def _trusted(
        self, items: list[BatchHeader | Damage], batch: list[BatchHeader | None], entries: IndexedPositions
    ) -> list[bool]:
        """Which of the surveyed ``items`` (``batch``: their headers, None for damage) have offsets a
        witness vouches for: an index entry, the segment's base or next segment's base offset, a
        trusted neighbour they continue, or a damaged batch whose header bridges them to one."""
        n = len(items)
        trusted = [
            h is not None
            and h.magic >= 2
            and (
                entries.at(h.position) == h.last_offset
                or (h.position == 0 and h.base_offset == self._segment.base_offset)
                or (h.end_position == self._segment.size and h.last_offset + 1 == self._segment.offset_limit)
            )
            for h in batch
        ]
        # A batch beyond a damaged one whose header links it to the batch before (``_bridges``).
        bridged = [
            i >= 2
            and h is not None
            and batch[i - 1] is None
            and batch[i - 2] is not None
            and self._bridges(batch[i - 2], items[i - 1].position, h)
            for i, h in enumerate(batch)
        ]
        for i in range(1, n):
            trusted[i] = trusted[i] or (trusted[i - 1] and follows(batch[i - 1], batch[i]))
            trusted[i] = trusted[i] or (bridged[i] and trusted[i - 2])
        for i in range(n - 2, -1, -1):
            trusted[i] = trusted[i] or (trusted[i + 1] and follows(batch[i], batch[i + 1]))
            trusted[i] = trusted[i] or (i + 2 < n and bridged[i + 2] and trusted[i + 2])
        return trusted

    def _offsets_contradicted(
        self, h: BatchHeader, prev: BatchHeader | None, nxt: BatchHeader | None, witness: int | None
    ) -> str:
        """Why an untrusted batch's offsets cannot be right ("" when nothing contradicts them)."""
        first = h.base_offset if h.magic >= 2 else h.last_offset
        base, limit = self._segment.base_offset, self._segment.offset_limit
        if first < base:
            return f"baseOffset {first} is below the segment's base offset {base}"
        if h.last_offset - base > 2**31 - 1:
            return f"offset {h.last_offset} is too far from the segment's base offset {base}"
        if limit is not None and h.last_offset >= limit:
            return f"offset {h.last_offset} is in the next segment (from {limit})"
        if prev is not None and first <= prev.last_offset:
            return f"offsets {first}..{h.last_offset} overlap the previous batch's (up to {prev.last_offset})"
        if nxt is not None and nxt.magic >= 2 and h.last_offset >= nxt.base_offset:
            return f"offsets {first}..{h.last_offset} overlap the next batch's (from {nxt.base_offset})"
        if witness is not None and (
            h.last_offset > witness or (nxt is not None and nxt.magic >= 2 and nxt.base_offset > witness)
        ):
            return f"offsets {first}..{h.last_offset} contradict the index entry for offset {witness}"
        return ""

    def accepted_batches(
        self, position: int = 0, previous: BatchHeader | None = None
    ) -> Iterator[BatchHeader]:
        """Every intact batch of the .log whose offsets fit its neighbours', in order (damage skipped),
        from ``position`` (a batch boundary; ``previous``: the accepted batch before it, if any)."""
        end = self._segment.size
        pending: BatchHeader | None = None
        damage_before = damage_after = False  # damage right before / right after ``pending``
        damage_at: int | None = None  # where the damage right after the last batch read begins
        pending_damage_at: int | None = None  # ... right before ``pending``
        while True:
            header: BatchHeader | None = None
            if position < end:
                header, _ = self.intact_batch_at(position, end)
                if header is None:
                    damage_at = position if damage_at is None else damage_at
                    position = self._resync(position + 1, end)
                    damage_after = True
                    continue
                position = header.end_position
            if pending is not None:
                trusted = (
                    (pending.position == 0 and pending.base_offset == self._segment.base_offset)
                    or (
                        previous is not None
                        and previous.end_position == pending.position
                        and follows(previous, pending)
                    )
                    or (pending_damage_at is not None and self._bridges(previous, pending_damage_at, pending))
                )
                isolated = (damage_before or damage_after) and not (
                    follows(previous, pending) or follows(pending, header)
                )
                if trusted or not (isolated or self._offsets_contradicted(pending, previous, header, None)):
                    yield pending
                    previous = pending
            if header is None:
                return
            pending, damage_before, damage_after = header, damage_after, False
            pending_damage_at, damage_at = damage_at, None

    def _bridges(self, before: BatchHeader | None, damage_at: int, after: BatchHeader) -> bool:
        """Whether the damaged batch at ``damage_at`` (its CRC failed) links ``before`` and ``after``
        through its header's fields: its baseOffset continues ``before`` (at position 0: the
        segment's base offset) and its lastOffsetDelta or its record count leads to ``after``'s base
        offset. Two fields agreeing vouch for ``after``'s offsets, which nothing else can (its
        baseOffset is outside its CRC) when it is the last batch of the active segment; one damaged
        field (a length, a count, a delta, a record) still leaves two."""
        if (before.end_position if before is not None else 0) != damage_at or after.magic < 2:
            return False
        raw = self._segment.read(damage_at, V2_HEADER_SIZE)
        if len(raw) < V2_HEADER_SIZE:
            return False
        claimed = unchecked_v2_header(raw)
        first = before.last_offset + 1 if before is not None else self._segment.base_offset
        return claimed.base_offset == first and after.base_offset in (
            claimed.last_offset + 1,
            claimed.base_offset + claimed.records_count,
        )

    def intact_batch_at(self, position: int, end: int) -> tuple[BatchHeader | None, str]:
        """(header, "") for a whole, CRC-valid batch at ``position``; else (None, what is wrong)."""
        try:
            header = self._segment.read_header(position, end)
        except CorruptRecordError as exc:
            return None, str(exc).split(" in ", 1)[0]
        if header is None:
            return None, "a batch runs past the end of the segment"
        try:
            data = self._segment.read_raw(position, header.size)
            if len(data) < header.size:
                return None, f"the file ends at position {position + len(data)} (cut while open)"
            validate_batch(data, header.at(0), path=self._segment.log_path)
        except CorruptRecordError as exc:
            return None, str(exc).split(" in ", 1)[0]
        return header, ""

    def _resync(self, position: int, end: int) -> int:
        """The position of the next intact v2 batch at or after ``position`` (``end`` when none):
        a header that parses, a CRC that matches, and a successor that is intact too."""
        while position < end:
            wanted = min(_READ_CHUNK, end - position)
            chunk = self._segment.read_raw(position, wanted)
            magic = np.frombuffer(chunk, dtype=np.uint8)[MAGIC_OFFSET:]
            for candidate in np.flatnonzero(magic == 2).tolist():
                if self._plausible_batch_at(position + candidate, end):
                    return position + candidate
            if len(chunk) < wanted:
                return end  # the file was cut short under us: nothing intact lies beyond
            position += max(len(chunk) - MAGIC_OFFSET, 1)
        return end

    def _plausible_batch_at(self, position: int, end: int) -> bool:
        header, _ = self.intact_batch_at(position, end)
        if header is None or header.magic < 2 or header.base_offset < self._segment.base_offset:
            return False
        if header.end_position >= end:
            return True
        successor, _ = self.intact_batch_at(header.end_position, end)
        return successor is not None

    def batches_past_damage(
        self,
        fd: int,
        start_position: int,
        end: int,
        previous: BatchHeader | None,
        on_damage: Callable[[Damage], None],
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        """The rest of :meth:`~seglogfs.segment.LogSegment.iter_batches` once its quick walk met damage
        or a break in the offsets after ``previous`` (the last batch that carried on, if any): the
        careful survey's intact batches up to ``end``, read through ``fd``, each damaged stretch to
        ``on_damage``."""
        # Survey from the last batch that carried on (a witness for the offsets after it).
        survey_from = suspect = start_position
        if previous is not None:
            survey_from, suspect = previous.position, previous.end_position
        items, _ = self._survey(survey_from, 2**62, IndexedPositions.none())
        for item in items:
            if item.position < suspect:
                continue
            if isinstance(item, Damage):
                if item.position >= end:
                    return
                on_damage(item)
                continue
            if item.end_position > end:
                return
            yield item, os.pread(fd, item.size, item.position)

    def iter_intact_headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Batch headers from ``position`` on (headers only while offsets run on), past damage: where
        the walk meets an unreadable header or a break in the offsets and the batch before fails its
        CRC (its length may be what is damaged), it resynchronises on the next intact batch."""
        end = self._segment.size
        previous: BatchHeader | None = None
        while position < end:
            header = self._segment.header_or_none(position, end)
            if header is None or (previous is not None and not follows(previous, header)):
                if previous is not None and self.intact_batch_at(previous.position, end)[0] is None:
                    position, previous = self._resync(previous.position + 1, end), None
                    continue
                if header is None:
                    position, previous = self._resync(position + 1, end), None
                    continue
            yield header
            previous, position = header, header.end_position

    def intact_run(
        self, walk: Iterator[tuple[BatchHeader, bytes]]
    ) -> Generator[tuple[BatchHeader, bytes], None, tuple[BatchHeader | None, bool]]:
        """The batches of ``walk`` while each is intact and carries on from the one before
        (:meth:`_continues`), each yielded once the next one (or the end of the walk) agrees with its
        offsets: past a gap, a batch's baseOffset (outside its CRC) has only the next batch to
        contradict it. Returns (the last batch yielded, whether the walk ended without a break)."""
        previous: BatchHeader | None = None
        pending: tuple[BatchHeader, bytes] | None = None
        try:
            for header, data in walk:
                if not self._continues(pending[0] if pending else previous, header, data):
                    return previous, False
                if pending is not None:
                    yield pending
                    previous = pending[0]
                pending = header, data
        except CorruptRecordError:
            return previous, False
        if pending is not None:
            yield pending
            previous = pending[0]
        return previous, True

    def _continues(self, previous: BatchHeader | None, header: BatchHeader, data: bytes) -> bool:
        """Whether ``header``'s batch is intact (its CRC) and its offsets carry on from ``previous``
        (or start the segment) and stay below the next segment's: strictly increasing, with or
        without a gap (a compacted log's). Anything else is for the careful survey to judge."""
        try:
            validate_batch(data, header.at(0))
        except CorruptRecordError:
            return False
        if not self._segment.offsets_fit(header):
            return False
        if previous is None:
            return header.position != 0 or header.magic < 2 or header.base_offset >= self._segment.base_offset
        if header.magic < 2:
            return header.last_offset > previous.last_offset
        return header.base_offset > previous.last_offset

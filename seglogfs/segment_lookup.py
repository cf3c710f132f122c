"""Finding the batch that holds an offset in a segment's .log (Kafka's translateOffset), quickly.

The quick way reads batch headers from an offset-index entry on and trusts a batch's offsets only
when a witness vouches for them: the index entry naming its last offset, the segment's base offset,
or the batch before it (contiguous offsets). A compacted log has offset gaps between batches, which
Kafka's format allows (offsets only strictly increase): a gap is crossed when the batches on both
sides pass their CRCs (which cover their lastOffsetDeltas), and a batch found past a gap must end
before the next batch starts, since its baseOffset lies outside the CRC and, moved, overlaps a
neighbour. Anything else goes to the CRC-checked survey
(:meth:`~seglogfs.segment_survey.SegmentSurvey.find_batch_careful`).
:class:`SegmentLookup` holds these; each :class:`~seglogfs.segment.LogSegment` has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .errors import CorruptRecordError
from .records import BatchHeader, validate_batch

if TYPE_CHECKING:
    from .index import OffsetIndex
    from .segment_survey import SegmentSurvey

__all__ = ["LookupSegment", "SegmentLookup"]


class _Suspect(Exception):
    """Internal: the header walk met something only a CRC-checked survey can judge."""


class LookupSegment(Protocol):
    """What a lookup reads of its segment (a :class:`~seglogfs.segment.LogSegment`)."""

    base_offset: int
    size: int
    offset_limit: int | None

    @property
    def offset_index(self) -> OffsetIndex: ...
    def read(self, position: int, size: int) -> bytes: ...
    def header_or_none(self, position: int, end: int) -> BatchHeader | None: ...
    def offsets_fit(self, h: BatchHeader) -> bool: ...


class SegmentLookup:
    """``find_batch`` of ``segment``, falling back on its ``survey``."""

    __slots__ = ("_segment", "_survey")

    def __init__(self, segment: LookupSegment, survey: SegmentSurvey) -> None:
        self._segment = segment
        self._survey = survey

    def find_batch(self, offset: int, *, surveyed: bool = False) -> BatchHeader | None:
        """The first intact batch whose last offset is >= ``offset`` (Kafka's translateOffset), or None.

        Raises CorruptRecordError, naming the file and the position of the damage, when ``offset``
        lies in a damaged stretch of the .log. Damage costs only itself: a batch whose header cannot be
        read, whose CRC fails or whose offsets contradict its neighbours' (its baseOffset is outside the
        CRC) is skipped, and the batches after it are found by resynchronising on the next intact one.
        ``surveyed`` skips the header walk for the CRC-checked survey (after a batch failed its CRC).
        """
        if not surveyed:
            try:
                return self._find_batch_quick(offset)
            except _Suspect:
                pass
        return self._survey.find_batch_careful(offset)

    def _find_batch_quick(self, offset: int) -> BatchHeader | None:
        """Headers only, each trusted as the module docstring says; _Suspect for anything else."""
        segment = self._segment
        end = segment.size
        base_offset = segment.base_offset
        header_or_none = segment.header_or_none
        (witness, position), upper = segment.offset_index.lookup_bounds(offset)
        if upper is not None:
            # One read when the next indexed batch already holds the offset (always so when batches
            # are larger than index.interval.bytes): the entry vouches for its offsets.
            header = header_or_none(upper.position, end)
            if (
                header is not None
                and header.magic >= 2
                and header.last_offset == upper.offset
                and header.base_offset <= offset
            ):
                return header
        prev: BatchHeader | None = None
        checked = -1  # the position of the last batch whose CRC held
        anchored = True  # no gap since the witness: the offsets follow from it
        while position < end:
            header = header_or_none(position, end)
            if header is None or header.magic < 2:
                raise _Suspect
            if prev is None and position != 0:
                if header.last_offset != witness:
                    raise _Suspect
            elif header.base_offset > (base_offset if prev is None else prev.last_offset + 1):
                self._cross_gap(prev, header, checked)
                checked, anchored = position, False
            elif header.base_offset != (base_offset if prev is None else prev.last_offset + 1):
                raise _Suspect
            if not segment.offsets_fit(header):
                raise _Suspect  # runs into the next segment, or too far from the base offset
            if header.last_offset >= offset:
                if not anchored:
                    self._check_next_starts_after(header, end)
                return header
            prev = header
            position += header.size
        # A sealed segment holds the offset, unless its last batch ends before it (a compacted
        # segment's trailing gap: that batch's CRC vouches for where it ends).
        limit = segment.offset_limit
        sealed_holds = limit is not None and offset < limit
        if sealed_holds and (prev is None or (checked != prev.position and not self._crc_holds(prev))):
            raise _Suspect
        return None

    def _cross_gap(self, prev: BatchHeader | None, header: BatchHeader, checked: int) -> None:
        """_Suspect unless both batches around a gap pass their CRCs (``prev`` None: the gap is from
        the segment's base offset; ``checked``: the position of a batch already checked)."""
        if prev is not None and checked != prev.position and not self._crc_holds(prev):
            raise _Suspect
        if not self._crc_holds(header):
            raise _Suspect

    def _check_next_starts_after(self, header: BatchHeader, end: int) -> None:
        """_Suspect when the batch after ``header`` (if any) starts at or before its last offset: a
        baseOffset moved into a gap shows only there."""
        if header.end_position < end:
            following = self._segment.header_or_none(header.end_position, end)
            if following is None or following.magic < 2 or following.base_offset <= header.last_offset:
                raise _Suspect

    def _crc_holds(self, header: BatchHeader) -> bool:
        """Whether the batch of ``header`` (read from this .log) passes its CRC."""
        try:
            validate_batch(self._segment.read(header.position, header.size), header.at(0))
        except CorruptRecordError:
            return False
        return True

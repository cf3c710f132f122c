"""Reads of a compacted log whose batches have offset gaps between them (whole batches cleaned away)
take the quick path: a gap is trusted when the batches on both sides pass their CRCs and the next
batch starts past the gap batch's last offset (Kafka's format allows gaps between batches). A
baseOffset changed on disk (outside the CRC) so that it overlaps a neighbour's offsets is still
damage, and never serves another offset."""

from __future__ import annotations

import itertools
import random
import struct
from pathlib import Path

import pytest
from support.cleaner_helpers import compact_config, open_manager
from support.engine_helpers import ManualClock

from seglogfs.errors import CorruptRecordError, OffsetOutOfRangeError
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord, iter_batch_headers
from seglogfs.segment import LogSegment
from seglogfs.segment_survey import SegmentSurvey
from seglogfs.views.value_stream import ValueStream

# Several sealed segments, several index entries each, batches of one record.
CFG = compact_config(segment_bytes=3000, index_interval_bytes=300)
APPENDS = 400


def _compacted_with_gaps(data_dir: Path) -> dict[int, bytes]:
    """One-record batches over 40 keys in random order, cleaned: the survivors (offset -> value,
    every value naming its offset) lie scattered, with offset gaps between their batches."""
    rng = random.Random(5)
    with open_manager(data_dir, CFG, ManualClock()) as manager:
        lg = manager.create_log("t-0")
        for i in range(APPENDS):
            lg.append([ProducerRecord(key=b"k%d" % rng.randrange(40), value=b"%d" % i)])
        lg.roll()
        assert manager.clean_once() is not None
        return {r.offset: r.value for r in lg.iter_records()}


def _spy(monkeypatch, name: str) -> list:
    """The calls of the segments' surveys' method ``name``."""
    calls: list = []
    real = getattr(SegmentSurvey, name)

    def spy(self, *args, **kwargs):
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SegmentSurvey, name, spy)
    return calls


def _gaps(data_dir: Path) -> int:
    """How many gaps lie between consecutive batches of the sealed segments."""
    gaps = 0
    for path in sorted((data_dir / "t-0").glob("*.log")):
        headers = list(iter_batch_headers(path.read_bytes()))
        gaps += sum(b.base_offset > a.last_offset + 1 for a, b in itertools.pairwise(headers))
    return gaps


def test_reads_between_gaps_take_the_quick_path(tmp_path: Path, monkeypatch) -> None:
    survivors = _compacted_with_gaps(tmp_path)
    assert _gaps(tmp_path) >= 10 and len(survivors) >= 20
    assert all(value == b"%d" % offset for offset, value in survivors.items())
    careful = _spy(monkeypatch, "find_batch_careful")
    with LogManager(tmp_path, CFG) as manager:
        lg = manager.get("t-0")
        for offset in range(APPENDS):
            if offset in survivors:
                assert lg.read(offset).value == survivors[offset]
            else:
                with pytest.raises(OffsetOutOfRangeError):
                    lg.read(offset)
    assert careful == []


def test_streams_over_gaps_take_the_quick_path(tmp_path: Path, monkeypatch) -> None:
    """The records stream (and from/<n>) walk the gaps in large reads, never the careful survey."""
    survivors = _compacted_with_gaps(tmp_path)
    surveys = _spy(monkeypatch, "_survey")
    with LogManager(tmp_path, CFG) as manager:
        lg = manager.get("t-0")
        middle = sorted(survivors)[len(survivors) // 2]
        offsets = sorted(survivors)
        for first, expected in ((None, offsets), (middle, [o for o in offsets if o >= middle])):
            stream = ValueStream(lg, first_offset=first)
            assert stream.read(0, stream.size() + 1) == b"".join(survivors[o] + b"\n" for o in expected)
    assert surveys == []


def _moved(data_dir: Path, toward: str) -> tuple[Path, int, int]:
    """Move the baseOffset of a batch in the middle of a sealed segment (between gaps) onto its
    neighbour's offset: (file, batch position, its own offset)."""
    for path in sorted((data_dir / "t-0").glob("*.log"))[:-1]:
        headers = list(iter_batch_headers(path.read_bytes()))
        for before, batch, after in zip(headers, headers[1:], headers[2:], strict=False):
            gaps = batch.base_offset > before.last_offset + 1 and after.base_offset > batch.last_offset + 1
            if gaps and batch.records_count == 1 and before.records_count == after.records_count == 1:
                claimed = after.base_offset if toward == "next" else before.last_offset
                data = bytearray(path.read_bytes())
                struct.pack_into(">q", data, batch.position, claimed)
                path.write_bytes(bytes(data))
                return path, batch.position, batch.base_offset
    raise AssertionError("no batch between two gaps")


@pytest.mark.parametrize("toward", ["next", "previous"])
def test_a_base_offset_moved_onto_a_neighbour_is_damage(tmp_path: Path, toward: str) -> None:
    survivors = _compacted_with_gaps(tmp_path)
    path, position, moved = _moved(tmp_path, toward)
    with LogManager(tmp_path, CFG) as manager:
        lg = manager.get("t-0")
        with pytest.raises(CorruptRecordError) as raised:
            lg.read(moved)  # its record is EIO, never served as the neighbour's offset (checked below)
        assert raised.value.path == str(path)
        for offset in range(APPENDS):
            try:
                record = lg.read(offset)
            except (CorruptRecordError, OffsetOutOfRangeError):
                continue
            assert (record.offset, record.value) == (offset, survivors[offset])
        # The stream skips the damage (it names the file and position) and never repeats a record.
        damaged = []
        segment = next(s for s in lg.segments if s.log_path == path)
        seen = [h.last_offset for h, _ in segment.iter_batches(on_damage=damaged.append)]
        assert seen == sorted(set(seen)) and moved not in seen
        assert any(d.position <= position < d.end for d in damaged)


def test_a_last_batch_moved_past_the_relative_range_is_not_a_gap(tmp_path: Path) -> None:
    """The active segment's last batch, its baseOffset moved up by 2**39 (a gap, CRCs holding): its
    offsets cannot be in the segment (the indexes store them relative to its base as int32), so an
    index rebuild skips it (it once failed with an int32 overflow: the log went offline) and the
    log opens with its other records."""
    with LogManager(tmp_path, CFG) as manager:
        lg = manager.create_log("t-0")
        for i in range(8):
            lg.append([ProducerRecord(key=b"k%d" % i, value=b"%d" % i, timestamp=1000 + i)])
        path = lg.active_segment.log_path
    last = list(iter_batch_headers(path.read_bytes()))[-1]
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, last.position, last.base_offset + 2**39)
    path.write_bytes(bytes(data))
    segment = LogSegment(path.parent, 0)
    segment.rebuild_indexes()
    assert segment.time_index.last_entry == (1006, 6)
    segment.close()
    with LogManager(tmp_path, CFG) as manager:
        lg = manager.get("t-0")
        assert [r.value for r in lg.iter_records()] == [b"%d" % i for i in range(7)]

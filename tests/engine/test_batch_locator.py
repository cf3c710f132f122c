"""A by-offset read: the batch a lookup found is remembered (BatchLocator) and the record is found and
read inside it in one C call (``_scan.record_in_batch``). Remembered batches are never served after
segments left the log (compaction, retention), and the C read gives exactly what decoding the whole
batch gives: keys, null values, headers, gaps, a file cut under the reader."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cleaner_helpers import compact_config, open_manager
from support.engine_helpers import ManualClock, config, open_log

from seglogfs.batch_locator import BatchLocator
from seglogfs.errors import CorruptRecordError, OffsetOutOfRangeError
from seglogfs.records import ProducerRecord


def _records(i: int) -> list[ProducerRecord]:
    """A batch of five: keys, a null value, a header, an empty value."""
    return [
        ProducerRecord(key=b"k%d" % i, value=b"v%d" % i),
        ProducerRecord(value=None, key=b"null"),
        ProducerRecord(value=b"h", headers=[("a", b"1"), ("b", None)]),
        ProducerRecord(value=b""),
        ProducerRecord(value=b"x" * 5000),  # read into the heap, not the stack
    ]


def test_each_record_reads_as_the_whole_batch_decodes(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "r-0", config(segment_bytes=4000))
    for i in range(6):
        lg.append(_records(i))
    expected = {r.offset: r for r in lg.iter_records()}
    assert len(expected) == 30 and len(lg.segments) > 1
    for _ in range(2):  # the second time through remembered batches
        for offset, record in expected.items():
            assert lg.read(offset) == record
    locator = lg._batch_cache.locator
    assert len(locator) == 6
    assert all(locator.find(offset, lg.removals).bounds is not None for offset in expected)
    lg.close()


def test_bounds_beyond_the_budget_are_left_to_the_batch_cache(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "r-0", config())
    for i in range(4):
        lg.append_values([b"%d-%d" % (i, j) for j in range(100)])  # 400 bytes of bounds a batch
    lg._batch_cache.locator.max_bounds_bytes = 1000
    offsets = range(0, 400, 7)
    for _ in range(2):
        assert [lg.read(o).value for o in offsets] == [b"%d-%d" % divmod(o, 100) for o in offsets]
    kept = [lg._batch_cache.locator.find(o, lg.removals).bounds for o in (0, 100, 200, 300)]
    assert sum(b is not None for b in kept) == 2
    lg.close()


def test_a_record_cut_under_the_reader_is_corrupt_and_never_another_offset(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "r-0", config())
    lg.append_values([b"%03d" % i for i in range(100)])
    lg.roll()  # sealed: a cut active segment would take the log offline
    lg.append_values([b"tail"])
    assert lg.read(10).value == b"010"  # the batch located and its bounds taken
    os.truncate(lg.segments[0].log_path, 61 + 500)  # within the first batch's records
    assert lg.read(5).value == b"005"  # still within the file
    with pytest.raises(CorruptRecordError):
        lg.read(90)
    lg.close()


def test_compaction_after_a_read_makes_the_cleaned_offsets_out_of_range(tmp_path: Path) -> None:
    with open_manager(tmp_path, compact_config(segment_bytes=300), ManualClock()) as manager:
        lg = manager.create_log("c-0")
        for i in range(40):
            lg.append([ProducerRecord(key=b"k%d" % (i % 4), value=b"%d" % i) for _ in range(3)])
        lg.roll()
        before = {offset: lg.read(offset).value for offset in range(lg.end_offset)}  # all remembered
        assert manager.clean_once() is not None
        survivors = {r.offset for r in lg.iter_records()}
        assert survivors and len(survivors) < len(before)
        for offset in range(lg.end_offset):
            if offset in survivors:
                assert lg.read(offset).value == before[offset]
            else:
                with pytest.raises(OffsetOutOfRangeError):
                    lg.read(offset)


def test_a_batch_is_served_only_under_the_removals_it_was_found_with(tmp_path: Path) -> None:
    """A lookup that read the segment list before a removal may remember its batch after the log
    cleared the locator: the count it was found under keeps it from being served."""
    lg = open_log(tmp_path / "r-0", config())
    lg.append_values([b"a", b"b", b"c"])
    segment, header = lg.lookup(1)
    locator = BatchLocator()
    locator.remember(segment, header, removals=3)
    found = locator.find(2, removals=3)
    assert found is not None and (found.segment, found.header) == (segment, header)
    assert locator.find(2, removals=4) is None
    assert locator.find(3, removals=3) is None  # past the batch
    lg.close()


def test_the_locator_is_bounded(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "r-0", config())
    for i in range(5):
        lg.append_values([b"%d" % i])
    locator = BatchLocator(max_batches=3)
    for offset in range(5):
        locator.remember(*lg.lookup(offset), removals=0)
        assert len(locator) <= 3
    assert locator.find(4, removals=0) is not None
    lg.close()


def test_a_record_out_of_the_page_cache_is_read_from_disk(tmp_path: Path) -> None:
    """The C read first takes what the page cache holds without blocking; pages dropped from it are
    read with a blocking pread."""
    lg = open_log(tmp_path / "r-0", config())
    lg.append_values([b"%04d" % i for i in range(1000)])
    lg.flush()
    assert lg.read(3).value == b"0003"
    fd = os.open(lg.segments[0].log_path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    assert [lg.read(o).value for o in (999, 500, 1)] == [b"0999", b"0500", b"0001"]
    lg.close()

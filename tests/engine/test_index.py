"""seglogfs.index: the indexes' public names in one import, and EmptyIndex (a reader's stand-in for a
missing or corrupt index)."""

from __future__ import annotations

import seglogfs.abstract_index
import seglogfs.offset_index
import seglogfs.time_index
from seglogfs import index
from seglogfs.index import EmptyIndex, OffsetPosition, TimestampOffset


def test_names_the_indexes_and_their_entries():
    assert index.OffsetIndex is seglogfs.offset_index.OffsetIndex
    assert index.TimeIndex is seglogfs.time_index.TimeIndex
    assert index.AbstractIndex is seglogfs.abstract_index.AbstractIndex
    assert (index.OFFSET_INDEX_ENTRY_SIZE, index.TIME_INDEX_ENTRY_SIZE) == (8, 12)
    assert set(index.__all__) <= set(dir(index))


def test_empty_offset_index_sends_every_lookup_to_the_start():
    empty = EmptyIndex(True, 40)
    assert empty.entries == 0 and not empty.is_full()
    assert empty.lookup(10**9) == OffsetPosition(40, 0)
    assert isinstance(empty.lookup(50), OffsetPosition)
    assert empty.lookup_bounds(45) == (OffsetPosition(40, 0), None)
    offsets, positions = empty.to_arrays()
    assert offsets.size == positions.size == 0
    empty.sanity_check()
    empty.flush()
    empty.close()


def test_empty_time_index_knows_no_timestamp():
    empty = EmptyIndex(False, 40)
    assert empty.lookup(10**12) == TimestampOffset(-1, 40)
    assert empty.last_entry == TimestampOffset(-1, 40) and empty.last_entry.timestamp == -1

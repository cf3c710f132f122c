"""TimeIndex against Kafka's rules (docs/kafka-format.md sections 2-3): appends, sanity check, results."""

from __future__ import annotations

import struct

import pytest

from seglogfs.abstract_index import InvalidIndexAppendError
from seglogfs.errors import CorruptIndexError
from seglogfs.time_index import TIME_INDEX_ENTRY_SIZE, TimeIndex, TimestampOffset


def test_time_index_is_full_reserves_one_slot(tmp_path):
    ti = TimeIndex(tmp_path / "0.timeindex", 0, 36)  # 3 entries
    assert ti.max_entries == 3
    ti.maybe_append(10, 1)
    assert not ti.is_full()
    ti.maybe_append(20, 2)
    assert ti.is_full()  # entries >= max_entries - 1
    with pytest.raises(InvalidIndexAppendError):
        ti.maybe_append(30, 3)
    ti.maybe_append(30, 3, skip_full_check=True)  # the roll/close entry
    assert ti.entries == 3
    with pytest.raises(InvalidIndexAppendError):
        ti.maybe_append(40, 4, skip_full_check=True)  # no room at all

def test_time_index_maybe_append_rules(tmp_path):
    ti = TimeIndex(tmp_path / "50.timeindex", 50, 120)
    assert ti.last_entry == (-1, 50)
    ti.maybe_append(-1, 50)  # not larger than the empty index's -1
    assert ti.entries == 0
    ti.maybe_append(1000, 52)
    ti.maybe_append(1000, 53)  # same timestamp: skipped
    assert ti.entries == 1
    ti.maybe_append(1000, 52)  # same entry offered again (roll/close): fine, nothing added
    ti.maybe_append(1500, 52)  # equal offset, larger timestamp: appended
    assert ti.entries == 2 and ti.last_entry == (1500, 52)
    with pytest.raises(InvalidIndexAppendError):
        ti.maybe_append(2000, 51)  # smaller offset
    with pytest.raises(InvalidIndexAppendError):
        ti.maybe_append(1400, 60)  # smaller timestamp
    assert [ti.entry(i) for i in range(ti.entries)] == [(1000, 52), (1500, 52)]

def test_time_index_sanity_check_failures(tmp_path):
    path = tmp_path / "00000000000000000100.timeindex"
    path.write_bytes(struct.pack(">qi", 500, 1) + struct.pack(">qi", 400, 2))
    with pytest.raises(
        CorruptIndexError, match="last timestamp is 400 which is less than the first timestamp 500"
    ):
        TimeIndex(path, 100, writable=False).sanity_check()
    path.write_bytes(struct.pack(">qi", 500, 1) + struct.pack(">qi", 600, -2))
    with pytest.raises(CorruptIndexError, match="last offset is 98") as err:
        TimeIndex(path, 100, writable=False).sanity_check()
    assert str(path) in str(err.value)
    path.write_bytes(struct.pack(">qi", 500, 1) + b"\x01")
    with pytest.raises(CorruptIndexError, match="13 bytes"):
        TimeIndex(path, 100, writable=False).sanity_check()
    path.write_bytes(struct.pack(">qi", 500, 1) + struct.pack(">qi", 600, 3))
    TimeIndex(path, 100, writable=False).sanity_check()  # sound


def test_results_are_timestamp_offsets(tmp_path):
    ti = TimeIndex(tmp_path / "10.timeindex", 10, 1200)
    assert ti.lookup(5) == TimestampOffset(timestamp=-1, offset=10)
    assert isinstance(ti.last_entry, TimestampOffset) and ti.last_entry.offset == 10
    for ts, off in [(100, 12), (250, 20), (900, 31)]:
        ti.maybe_append(ts, off)
    found = ti.lookup(899)
    assert isinstance(found, TimestampOffset) and (found.timestamp, found.offset) == (250, 20)
    timestamp, offset = found  # still a tuple: unpacking keeps working
    assert (timestamp, offset) == (250, 20)
    assert ti.entry(2) == TimestampOffset(900, 31) and ti.last_entry.timestamp == 900
    ti.truncate_to(20)
    assert ti.last_entry == TimestampOffset(100, 12)


def test_entry_size_is_defined_once():
    assert TimeIndex.ENTRY_SIZE == TIME_INDEX_ENTRY_SIZE == TimeIndex.DTYPE.itemsize == 12

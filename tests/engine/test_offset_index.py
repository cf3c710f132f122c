"""OffsetIndex against Kafka's rules (docs/kafka-format.md sections 2-3): appends, sanity check, results."""

from __future__ import annotations

import struct

import pytest

from seglogfs.abstract_index import InvalidIndexAppendError
from seglogfs.errors import CorruptIndexError
from seglogfs.offset_index import OFFSET_INDEX_ENTRY_SIZE, OffsetIndex, OffsetPosition


def test_offset_index_is_full_and_append_rules(tmp_path):
    oi = OffsetIndex(tmp_path / "100.index", 100, 24)
    assert not oi.is_full()
    oi.append(100, 0)
    with pytest.raises(InvalidIndexAppendError):
        oi.append(100, 10)  # must be strictly larger than the last offset
    with pytest.raises(InvalidIndexAppendError):
        oi.append(99, 10)
    oi.append(105, 4100)
    oi.append(110, 8200)
    assert oi.is_full() and oi.entries == 3
    with pytest.raises(InvalidIndexAppendError):
        oi.append(120, 12300)
    assert oi.last_offset == 110 and oi.last_entry == (110, 8200)
    assert [oi.entry(i) for i in range(3)] == [(100, 0), (105, 4100), (110, 8200)]
    with pytest.raises(IndexError):
        oi.entry(3)

def test_offset_index_sanity_check_failures(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + struct.pack(">ii", -3, 50))  # last offset 97 < base
    oi = OffsetIndex(path, 100, writable=False)
    with pytest.raises(CorruptIndexError) as err:
        oi.sanity_check()
    assert str(path) in str(err.value) and "97" in str(err.value)

    path.write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x00\x00\x05\x00")  # 13 bytes
    oi = OffsetIndex(path, 100, writable=False)
    assert oi.entries == 1
    with pytest.raises(CorruptIndexError, match=r"found 13 bytes .* multiple of 8") as err:
        oi.sanity_check()
    assert str(path) in str(err.value)


def test_results_are_offset_positions(tmp_path):
    oi = OffsetIndex(tmp_path / "10.index", 10, 800)
    empty = oi.lookup(11)
    assert isinstance(empty, OffsetPosition) and empty == OffsetPosition(offset=10, position=0)
    assert oi.last_entry == (10, 0) and isinstance(oi.last_entry, OffsetPosition)
    for off, pos in [(12, 0), (20, 4200), (31, 9000)]:
        oi.append(off, pos)
    found = oi.lookup(25)
    assert (found.offset, found.position) == (20, 4200)
    offset, position = found  # still a tuple: unpacking keeps working
    assert (offset, position) == (20, 4200)
    lower, upper = oi.lookup_bounds(25)
    assert lower == OffsetPosition(20, 4200) and upper == OffsetPosition(31, 9000)
    assert all(isinstance(e, OffsetPosition) for e in (lower, upper))
    lower, upper = oi.lookup_bounds(20)
    assert lower is upper and lower.position == 4200
    assert oi.lookup_bounds(40) == (OffsetPosition(31, 9000), None)
    assert oi.entry(1) == OffsetPosition(20, 4200) and oi.entry(1).offset == 20
    assert oi.last_entry.position == 9000
    assert oi.fetch_upper_bound_offset(0, 100).offset == 20


def test_entry_size_is_defined_once():
    assert OffsetIndex.ENTRY_SIZE == OFFSET_INDEX_ENTRY_SIZE == OffsetIndex.DTYPE.itemsize == 8

"""The cleaner meets a damaged sealed segment: it stops with an error naming the file and the batch's
position in it, and the log stays as it was (the window's fast paths word no error of their own)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from support.cleaner_helpers import compact_config, open_manager
from support.engine_helpers import ManualClock

from seglogfs.cleaner import Cleaner, cleanable_range
from seglogfs.errors import CorruptRecordError
from seglogfs.log import Log
from seglogfs.records import ProducerRecord, iter_batch_headers


def _log_with_single_record_batches(tmp_path: Path, clock: ManualClock):
    manager = open_manager(tmp_path, compact_config(segment_bytes=1 << 20), clock)
    lg = manager.create_log("t-0")
    for i in range(40):
        lg.append([ProducerRecord(key=b"k%d" % (i % 5), value=b"value-%d" % i)])
    lg.roll()
    return manager, lg


def _clean(lg, clock: ManualClock) -> None:
    span = cleanable_range(lg, None, clock.ms)
    Cleaner(1 << 20).clean(lg, span, clock.ms)


def _clean_refused(lg: Log, clock: ManualClock, path: Path, data: bytearray) -> CorruptRecordError:
    """The clean's CorruptRecordError, once checked to name ``path`` and to leave the log as it was
    (``path`` still holds ``data``, no ``.cleaned`` or ``.swap`` file)."""
    with pytest.raises(CorruptRecordError) as caught:
        _clean(lg, clock)
    assert caught.value.path == str(path)
    assert path.read_bytes() == data
    assert not list(lg.dir.glob("*.cleaned")) and not list(lg.dir.glob("*.swap"))
    return caught.value


@pytest.mark.parametrize("fix_crc", [False, True], ids=["bad-crc", "malformed-record"])
def test_a_damaged_batch_stops_the_clean_naming_file_and_position(tmp_path: Path, fix_crc: bool) -> None:
    clock = ManualClock()
    manager, lg = _log_with_single_record_batches(tmp_path, clock)
    with manager:
        path = lg.segments[0].log_path
        data = bytearray(path.read_bytes())
        victim = list(iter_batch_headers(data))[17]
        # The record's key length varint (after length, attributes, timestamp and offset deltas)
        # claims 60 bytes: more than the record holds.
        data[victim.position + 61 + 4] = 120
        if fix_crc:
            crc = crc32c(bytes(data[victim.position + 21 : victim.end_position]))
            struct.pack_into(">I", data, victim.position + 17, crc)
        path.write_bytes(data)
        caught = _clean_refused(lg, clock, path, data)
        assert caught.position == victim.position
        assert ("malformed record" if fix_crc else "CRC") in str(caught)


@pytest.mark.parametrize("shift", [-1, 1])
def test_a_moved_base_offset_stops_the_clean(tmp_path: Path, shift: int) -> None:
    """A baseOffset (outside the CRC) moved by one: the cleaner mapped the batch's key at the wrong
    offset and copied it as it was; now the overlap with a neighbour stops the clean, naming the file,
    and the log stays as it was."""
    clock = ManualClock()
    manager, lg = _log_with_single_record_batches(tmp_path, clock)
    with manager:
        path = lg.segments[0].log_path
        data = bytearray(path.read_bytes())
        victim = list(iter_batch_headers(data))[17]
        struct.pack_into(">q", data, victim.position, victim.base_offset + shift)
        path.write_bytes(data)
        assert "overlap" in str(_clean_refused(lg, clock, path, data))

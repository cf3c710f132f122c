"""by-time against a damaged time index: a middle entry rewritten so that it stays in order and names
a real batch with that batch's max timestamp (the one damage a check of the entry against its batch
cannot see) never makes ``offset_for_timestamp`` answer past the first record with timestamp >= ts."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from support.engine_helpers import config
from support.mount_fixture import make_seglogd

from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.records import iter_batch_headers

# Timestamps that go back now and then (producers' CreateTime may), entries every few batches: a
# batch between two entries may hold a timestamp above the first entry's without an entry of its own.
CFG = config(index_interval_bytes=500, segment_bytes=1 << 20)
START = 1_700_000_000_000


def stamp_of(i: int) -> int:
    return START + 10 * i - (12 if i % 4 == 3 else 0) + (25 if i % 5 == 1 else 0)


def build(log_dir: Path, lg: Log | None = None) -> list[tuple[int, int]]:
    """A closed log of 40 batches (or 40 batches appended to ``lg``); (offset, timestamp) of every
    record."""
    if lg is None:
        with Log.open(log_dir, CFG, create=True) as opened:
            return build(log_dir, opened)
    records = []
    for i in range(40):
        values = [b"%06d|" % (lg.end_offset + j) + b"v" * 40 for j in range(2)]
        info = lg.append_values(values, stamp_of(i))
        records += [(info.first_offset + j, stamp_of(i)) for j in range(2)]
    return records


def test_an_ordered_wrong_middle_entry_naming_a_real_batch_never_answers_late(tmp_path: Path) -> None:
    log_dir = tmp_path / "t-0"
    records = build(log_dir)
    log_path = next(log_dir.glob("*.log"))
    batches = list(iter_batch_headers(log_path.read_bytes(), path=log_path))
    index_path = log_path.with_suffix(".timeindex")
    original = index_path.read_bytes()
    entries = [struct.unpack_from(">qi", original, at) for at in range(0, len(original), 12)]
    assert len(entries) >= 5
    targets = sorted({ts for _, ts in records} | {ts + 1 for _, ts in records})
    expected = {t: next((o for o, ts in records if ts >= t), None) for t in targets}
    rewrites = 0
    for slot in range(1, len(entries) - 1):
        (lo_ts, lo_rel), (hi_ts, hi_rel) = entries[slot - 1], entries[slot + 1]
        for batch in batches:
            entry = (batch.max_timestamp, batch.last_offset)
            if entry == entries[slot] or not (lo_ts < entry[0] < hi_ts and lo_rel <= entry[1] <= hi_rel):
                continue
            forged = bytearray(original)
            struct.pack_into(">qi", forged, slot * 12, *entry)
            index_path.write_bytes(bytes(forged))
            with Log.open(log_dir, CFG, clean_shutdown=True) as lg:
                for target in targets:
                    if expected[target] is not None:
                        assert lg.offset_for_timestamp(target) == expected[target], (slot, entry, target)
            rewrites += 1
    assert rewrites >= 3


@pytest.mark.fuse
@pytest.mark.usefixtures("fuse_available")
def test_through_the_mount_by_time_ignores_an_ordered_wrong_middle_entry(tmp_path: Path) -> None:
    """``readlink by-time/<ts>`` with the middle entry of a sealed segment's .timeindex rewritten to
    name a later batch with its (lower) max timestamp: the link is still the first record >= ts."""
    data_dir = tmp_path / "data"
    with LogManager(data_dir, CFG) as manager:
        lg = manager.create_log("t-0")
        records = build(data_dir / "t-0", lg)
        lg.roll()
    log_path = next((data_dir / "t-0").glob("*.log"))
    index_path = log_path.with_suffix(".timeindex")
    forged = bytearray(index_path.read_bytes())
    first_stamp, _ = struct.unpack_from(">qi", forged, 0)
    stamp, rel = struct.unpack_from(">qi", forged, 12)
    _, next_rel = struct.unpack_from(">qi", forged, 24)
    batches = list(iter_batch_headers(log_path.read_bytes(), path=log_path))
    lower = next(  # in order, and a batch with a higher timestamp lies before it
        h for h in batches if rel < h.last_offset <= next_rel and first_stamp < h.max_timestamp < stamp
    )
    struct.pack_into(">qi", forged, 12, lower.max_timestamp, lower.last_offset)
    index_path.write_bytes(bytes(forged))
    target = lower.max_timestamp + 1
    expected = next(o for o, ts in records if ts >= target)
    daemon = make_seglogd(tmp_path, data_dir=data_dir, logs={}, defaults={"index.interval.bytes": 500})
    try:
        daemon.start()
        assert os.readlink(daemon / "t-0" / "by-time" / str(target)) == f"../by-offset/{expected}"
    finally:
        daemon.cleanup()

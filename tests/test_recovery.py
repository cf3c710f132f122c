"""Opening after clean and unclean shutdowns: Kafka's load and recovery rules."""

from __future__ import annotations

import os
import shutil

import pytest
from engine_helpers import config, open_log, segment_files

from seglogfs.checkpoint import CLEAN_SHUTDOWN_FILE
from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord
from seglogfs.segment import LogSegment

CFG = config(segment_bytes=2000, index_interval_bytes=100)


def fill(log: Log, batches: int, per_batch: int = 5) -> list[bytes]:
    values = []
    for i in range(batches):
        chunk = [b"b%03d-r%d" % (i, j) * 4 for j in range(per_batch)]
        log.append_values(chunk)
        values += chunk
    return values


def values_of(log: Log) -> list[bytes | None]:
    return [r.value for r in log.iter_records()]


def crash_copy(log: Log, target):
    """The directory as a crash would leave it: copied while the log is still open (no clean close)."""
    shutil.copytree(log.dir, target, ignore=shutil.ignore_patterns(".seglogfs.lock"))
    return target


def test_clean_reopen_trusts_indexes_and_scans_nothing(tmp_path, monkeypatch):
    manager = LogManager(tmp_path / "data", CFG)
    log = manager.create_log("events-0")
    values = fill(log, 60)
    manager.close()
    assert (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()

    def no_recovery(self):
        raise AssertionError(f"recover() called on {self.log_path} after a clean shutdown")

    monkeypatch.setattr(LogSegment, "recover", no_recovery)
    manager = LogManager(tmp_path / "data", CFG)
    assert not (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()  # removed as loading starts
    log = manager.get("events-0")
    assert log.end_offset == len(values)
    assert values_of(log) == values
    manager.close()


def test_unclean_open_recovers_after_the_recovery_point(tmp_path):
    log = open_log(tmp_path / "t", CFG)
    values = fill(log, 40)
    copy = crash_copy(log, tmp_path / "t-copy")
    log.close()
    recovered = Log.open(copy, CFG, recovery_point=0)
    assert values_of(recovered) == values
    assert recovered.end_offset == len(values)
    # recovery trims and rebuilds indexes exactly like a clean close would have left them
    for segment in recovered.segments[:-1]:
        original = log.dir / segment.index_path.name
        assert segment.index_path.read_bytes() == original.read_bytes()
    recovered.close()


def test_torn_tail_is_cut_and_later_appends_continue(tmp_path):
    log = open_log(tmp_path / "t", CFG)
    values = fill(log, 10)
    active = log.active_segment.log_path
    copy = crash_copy(log, tmp_path / "c")
    log.close()
    torn = copy / active.name
    good_size = torn.stat().st_size
    with open(torn, "ab") as f:
        f.write(b"\x00" * 8 + (300).to_bytes(4, "big") + b"\x01" * 50)  # half a batch
    recovered = Log.open(copy, CFG)
    assert torn.stat().st_size == good_size
    assert values_of(recovered) == values
    recovered.append_values([b"next"])
    assert recovered.read(len(values)).value == b"next"
    recovered.close()


def test_corrupt_batch_cuts_there_and_deletes_later_segments(tmp_path):
    log = open_log(tmp_path / "t", CFG)
    fill(log, 60)
    segments = [(s.base_offset, s.log_path.name) for s in log.segments]
    assert len(segments) >= 4
    copy = crash_copy(log, tmp_path / "c")
    log.close()
    victim_base, victim_name = segments[1]
    data = bytearray((copy / victim_name).read_bytes())
    data[300] ^= 0xFF  # inside the CRC-covered bytes of some batch of the second segment
    (copy / victim_name).write_bytes(bytes(data))
    recovered = Log.open(copy, CFG)
    assert len(recovered.segments) == 2
    assert recovered.end_offset > victim_base
    # every record left is intact and nothing after the corruption survives
    records = list(recovered.iter_records())
    assert [r.offset for r in records] == list(range(recovered.end_offset))
    assert segment_files(copy) == [name for _, name in segments[:2]]
    recovered.close()


def test_flushed_segments_below_the_recovery_point_are_not_rescanned(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t", CFG)
    fill(log, 60)
    log.flush()
    point = log.recovery_point
    holding_point = max(s.base_offset for s in log.segments if s.base_offset <= point)
    copy = crash_copy(log, tmp_path / "c")
    log.close()
    scanned = []
    original = LogSegment.recover

    def spy(self):
        scanned.append(self.base_offset)
        return original(self)

    monkeypatch.setattr(LogSegment, "recover", spy)
    Log.open(copy, CFG, recovery_point=point).close()
    assert scanned == [holding_point]  # only the segment holding the recovery point


@pytest.mark.parametrize("damage", ["missing", "ones", "zeroes", "bad-length"])
def test_missing_or_corrupt_index_is_rebuilt(tmp_path, damage):
    manager = LogManager(tmp_path / "d", CFG)
    log = manager.create_log("e-0")
    values = fill(log, 60)
    victim = log.segments[1]
    index_path, original = victim.index_path, victim.index_path.read_bytes()
    time_path, original_time = victim.time_index_path, victim.time_index_path.read_bytes()
    manager.close()
    if damage == "missing":
        index_path.unlink()
    elif damage == "ones":
        # entries that point below the base offset: Kafka's sanity check fails on them
        index_path.write_bytes(b"\xff" * len(original))
    elif damage == "zeroes":
        # what a lost write-back leaves: Kafka's sanity check passes these
        index_path.write_bytes(b"\0" * len(original))
        time_path.write_bytes(b"\0" * len(original_time))
    else:
        index_path.write_bytes(original + b"\x01\x02\x03")
    manager = LogManager(tmp_path / "d", CFG)
    log = manager.get("e-0")
    assert values_of(log) == values
    assert all(log.read(i).value == v for i, v in enumerate(values))
    stamps = [r.timestamp for r in log.iter_records()]
    assert log.offset_for_timestamp(stamps[-1]) == stamps.index(stamps[-1])
    manager.close()
    assert index_path.read_bytes() == original
    assert time_path.read_bytes() == original_time


def test_leftovers_deleted_cleaned_and_swap(tmp_path):
    log = open_log(tmp_path / "t", CFG)
    values = fill(log, 30)
    seg0 = log.segments[0]
    seg0_bytes = seg0.log_path.read_bytes()
    log.close()
    d = tmp_path / "t"
    (d / "00000000000000000000.log.deleted").write_bytes(b"old")
    (d / "00000000000000000099.index.cleaned").write_bytes(b"partial")
    # a complete swap of the first segment (same content): it must replace the original
    os.rename(d / seg0.log_path.name, d / (seg0.log_path.name + ".swap"))
    (d / (seg0.log_path.name + ".swap")).write_bytes(seg0_bytes)
    reopened = Log.open(d, CFG)
    names = sorted(p.name for p in d.iterdir())
    assert not any(n.endswith((".deleted", ".cleaned", ".swap")) for n in names)
    assert values_of(reopened) == values
    reopened.close()


def test_orphan_index_files_are_removed(tmp_path):
    log = open_log(tmp_path / "t", CFG)
    fill(log, 3)
    log.close()
    (tmp_path / "t" / "00000000000000000777.index").write_bytes(b"\0" * 8)
    Log.open(tmp_path / "t", CFG).close()
    assert not (tmp_path / "t" / "00000000000000000777.index").exists()


def test_zero_filled_log_tail_after_power_loss(tmp_path):
    log = open_log(tmp_path / "t", CFG)
    values = fill(log, 10)
    copy = crash_copy(log, tmp_path / "c")
    log.close()
    active = sorted(copy.glob("*.log"))[-1]
    with open(active, "ab") as f:
        f.write(b"\0" * 4096)  # a file system that extended the file but lost the data
    recovered = Log.open(copy, CFG)
    assert values_of(recovered) == values
    recovered.close()


def test_corrupt_checkpoint_counts_as_empty_and_recovers_everything(tmp_path, caplog):
    manager = LogManager(tmp_path / "d", CFG)
    values = fill(manager.create_log("e-0"), 30)
    manager.get("e-0").flush()
    manager.checkpoint()
    copy = tmp_path / "crash"
    shutil.copytree(tmp_path / "d", copy, ignore=shutil.ignore_patterns(".seglogfs.lock"))
    manager.close()
    (copy / "recovery-point-offset-checkpoint").write_text("0\n5\ne 0 12\n")  # count says 5, one line
    reopened = LogManager(copy, CFG)
    assert "recovery-point-offset-checkpoint" in caplog.text  # the warning names the file
    assert values_of(reopened.get("e-0")) == values
    reopened.close()


def test_swap_replaces_exactly_the_segments_it_covers(tmp_path):
    log = open_log(tmp_path / "t", CFG)
    fill(log, 40)
    first, second, third = log.segments[:3]
    log.close()
    d = tmp_path / "t"
    # A compaction of the first two segments into one (.cleaned -> .swap, as Kafka's cleaner leaves
    # it after a crash between steps 3 and 5): the swap holds the records of both, rewritten.
    rewritten = open_log(tmp_path / "scratch", config(segment_bytes=10**6))
    for record in Log.open(d, CFG, read_only=True).iter_records(0, third.base_offset):
        rewritten.append([ProducerRecord(record.value.upper(), timestamp=record.timestamp)])
    rewritten.close()
    swap = (tmp_path / "scratch" / first.log_path.name).read_bytes()
    (d / (first.log_path.name + ".swap")).write_bytes(swap)
    reopened = Log.open(d, CFG)
    assert [s.base_offset for s in reopened.segments][:2] == [0, third.base_offset]
    values = values_of(reopened)
    assert all(v == v.upper() for v in values[: third.base_offset])
    assert all(v != v.upper() for v in values[third.base_offset :])
    assert not (d / second.log_path.name).exists()
    reopened.close()


def test_clean_open_of_many_segments_holds_few_file_descriptors(tmp_path):
    cfg = config(segment_bytes=300)
    manager = LogManager(tmp_path / "d", cfg)
    log = manager.create_log("many-0")
    while len(log.segments) < 300:
        log.append_values([b"x" * 200])
    manager.close()
    before = len(os.listdir("/proc/self/fd"))
    manager = LogManager(tmp_path / "d", cfg)
    assert len(os.listdir("/proc/self/fd")) - before < 10  # not 3 a segment: sealed files open lazily
    assert manager.get("many-0").read(123).value == b"x" * 200
    manager.close()

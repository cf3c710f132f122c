"""LogLoader: opening after clean and unclean shutdowns, Kafka's load and recovery rules."""

from __future__ import annotations

import os
import shutil
import struct

import pytest
from support.cleaner_helpers import compact_config, engine_records, open_manager
from support.engine_helpers import ManualClock, config, open_log, segment_files

from seglogfs import segment_swap
from seglogfs.errors import CorruptRecordError
from seglogfs.log import Log
from seglogfs.log_files import CLEAN_SHUTDOWN_FILE
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord, iter_batch_headers
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


def test_corrupt_batch_in_a_recovered_segment_costs_only_itself_and_later_segments_stay(tmp_path):
    """Kafka cuts at the first bad batch and deletes every later segment; seglogfs keeps the intact
    batches after the damage and the later segments (they may hold the only copy of their records)."""
    log = open_log(tmp_path / "t", CFG)
    values = fill(log, 60)
    segments = [(s.base_offset, s.log_path.name) for s in log.segments]
    assert len(segments) >= 4
    copy = crash_copy(log, tmp_path / "c")
    log.close()
    victim = copy / segments[1][1]
    damaged = _batches(victim)[2]
    _flip(victim, damaged.position + damaged.size - 3)  # inside its CRC-covered records
    recovered = Log.open(copy, CFG, recovery_point=0)
    assert segment_files(copy) == [name for _, name in segments]
    _assert_only_damaged_unreadable(recovered, values, damaged)
    recovered.close()


def _batches(path) -> list:
    return list(iter_batch_headers(path.read_bytes(), path=path))


def _flip(path, position: int, mask: int = 0x40) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def _assert_only_damaged_unreadable(log: Log, values: list[bytes], damaged) -> None:
    """Every offset of ``values`` reads exactly, except the damaged batch's (CorruptRecordError)."""
    assert log.end_offset == len(values)
    for offset, value in enumerate(values):
        if damaged.base_offset <= offset <= damaged.last_offset:
            with pytest.raises(CorruptRecordError):
                log.read(offset)
        else:
            assert log.read(offset).value == value, offset


def _active_copy(tmp_path, batches: int = 8):
    """A log of one segment (the active one) of ``batches`` batches, copied as a crash leaves it."""
    log = open_log(tmp_path / "t", config(index_interval_bytes=100))
    values = fill(log, batches)
    copy = crash_copy(log, tmp_path / "c")
    log.close()
    return copy, copy / log.active_segment.log_path.name, values


@pytest.mark.parametrize("clean_shutdown", [True, False])
@pytest.mark.parametrize("damage", ["last-offset-delta", "base-offset-up", "base-offset-down", "record"])
def test_a_damaged_last_batch_of_the_active_segment_is_a_torn_tail(tmp_path, damage, clean_shutdown):
    """The end offset comes from the last intact batch (CRC-valid, offsets continuing its predecessor),
    never from a damaged last header: a lastOffsetDelta or a baseOffset changed (the latter outside the
    CRC) once moved the end offset from 162 to 418. The damaged last batch is cut (read-write) or not
    read (read-only), and appends continue after the last intact batch."""
    copy, active, values = _active_copy(tmp_path)
    last = _batches(active)[-1]
    if damage == "last-offset-delta":
        patch = (last.position + 23, struct.pack(">i", 256 + 4))
    else:
        shift = {"base-offset-up": 256, "base-offset-down": -2, "record": 0}[damage]
        patch = (last.position, struct.pack(">q", last.base_offset + shift))
    data = bytearray(active.read_bytes())
    data[patch[0] : patch[0] + len(patch[1])] = patch[1]
    if damage == "record":
        data[-2] ^= 0x40
    active.write_bytes(bytes(data))
    kept = values[: last.base_offset]

    reader = Log.open(copy, CFG, read_only=True, clean_shutdown=clean_shutdown)
    assert reader.end_offset == last.base_offset
    assert values_of(reader) == kept
    reader.close()
    assert active.read_bytes() == bytes(data)  # a reader never changes a file

    recovered = Log.open(copy, CFG, clean_shutdown=clean_shutdown, recovery_point=len(values))
    assert recovered.end_offset == last.base_offset
    assert active.stat().st_size == last.position
    assert values_of(recovered) == kept
    recovered.append_values([b"next"])
    assert recovered.read(last.base_offset).value == b"next"
    recovered.close()
    reopened = Log.open(copy, CFG, clean_shutdown=True)
    assert values_of(reopened) == [*kept, b"next"]
    reopened.close()


@pytest.mark.parametrize("clean_shutdown", [True, False])
@pytest.mark.parametrize("damage", ["record", "length", "base-offset", "record-before-last", "first-magic"])
def test_damage_in_the_middle_of_the_active_segment_keeps_the_batches_after_it(
    tmp_path, damage, clean_shutdown
):
    """Only a torn tail (damage with no intact batch after it) is cut: a damaged batch followed by
    intact ones stays in place as damage (its records unreadable, every other one exact), the indexes
    are rebuilt from the intact batches and appends go after the last intact batch. A lone last batch
    after damage is kept too when the damaged batch's header links it to the batch before."""
    copy, active, values = _active_copy(tmp_path)
    damaged = _batches(active)[{"record-before-last": -2, "first-magic": 0}.get(damage, -3)]
    size = active.stat().st_size
    if damage.startswith("record"):
        _flip(active, damaged.end_position - 2)
    elif damage == "first-magic":
        _flip(active, damaged.position + 16)  # an append then judges rolling by the first intact batch
    elif damage == "length":
        _flip(active, damaged.position + 10, 0x10)  # the batch claims 4 kB more than it holds
    else:
        data = bytearray(active.read_bytes())
        struct.pack_into(">q", data, damaged.position, damaged.base_offset + 1)  # outside the CRC
        active.write_bytes(bytes(data))

    reader = Log.open(copy, CFG, read_only=True, clean_shutdown=clean_shutdown)
    _assert_only_damaged_unreadable(reader, values, damaged)
    reader.close()

    recovered = Log.open(copy, CFG, clean_shutdown=clean_shutdown, recovery_point=0)
    assert active.stat().st_size == size
    _assert_only_damaged_unreadable(recovered, values, damaged)
    recovered.append_values([b"next"])
    assert recovered.read(len(values)).value == b"next"
    recovered.close()
    for marker in (True, False):
        reopened = Log.open(copy, CFG, clean_shutdown=marker, recovery_point=0)
        _assert_only_damaged_unreadable(reopened, [*values, b"next"], damaged)
        reopened.close()


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

    def spy(self, **kwargs):
        scanned.append(self.base_offset)
        return original(self, **kwargs)

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


def test_a_read_only_load_reads_a_complete_swap_in_place_of_the_segments_it_covers(tmp_path, monkeypatch):
    """A clean killed after renaming the replaced segments .deleted, before installing its .swap (or a
    reader listing the directory just then): a writable load finishes the swap, but a read-only load
    (read-only mount, Spark, verify) ignored .swap files and lost those offsets. Before the last
    .cleaned file became .swap, both see the log as it was before the clean."""
    first = "00000000000000000000"
    early, swapping = tmp_path / "early", tmp_path / "swapping"
    snapshots = {f"renamed {first}.log.swap": early, f"renamed {first}.log.deleted": swapping}

    def hook(step: str) -> None:
        target = snapshots.get(step)
        if target is not None and not target.exists():  # .index still .cleaned / old files .deleted
            shutil.copytree(tmp_path / "d" / "t-0", target, ignore=shutil.ignore_patterns(".seglogfs.lock"))

    clock = ManualClock()
    cfg = compact_config()
    with open_manager(tmp_path / "d", cfg, clock) as manager:
        lg = manager.create_log("t-0")
        lg.append([ProducerRecord(key=b"a", value=b"1"), ProducerRecord(key=b"b", value=b"1")])
        lg.append([ProducerRecord(key=b"a", value=b"2")])
        lg.roll()
        lg.append([ProducerRecord(key=b"c", value=b"1")])
        lg.roll()
        before = engine_records(lg)
        monkeypatch.setattr(segment_swap, "crash_hook", hook)
        manager.clean_once()
        after = engine_records(lg)
    assert before != after and after == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1")]
    for directory, expected in ((swapping, after), (early, before)):
        names = sorted(os.listdir(directory))
        assert any(n.endswith(".swap") for n in names)
        reader = Log.open(directory, cfg, read_only=True)
        assert engine_records(reader) == expected
        assert reader.start_offset == 0 and reader.end_offset == 4
        reader.close()
        assert sorted(os.listdir(directory)) == names  # a reader changes no file
        writer = Log.open(directory, cfg)
        assert engine_records(writer) == expected
        writer.close()

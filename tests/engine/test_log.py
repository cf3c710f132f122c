"""Log behaviour: append, roll, lookups, flushing, limits and the owner lock (retention: test_retention.py,
loading and recovery: test_log_loader.py)."""

from __future__ import annotations

import os
import struct

import pytest
from kafka.record import MemoryRecords
from support.engine_helpers import ManualClock, config, open_log, segment_files

from seglogfs.errors import (
    LogLockedError,
    OffsetOutOfRangeError,
    ReadOnlyLogError,
    RecordTooLargeError,
    TimestampNotFoundError,
)
from seglogfs.log import Log
from seglogfs.records import ProducerRecord, TimestampType, iter_batch_headers


def test_append_assigns_consecutive_offsets_one_batch_per_call(tmp_path):
    log = open_log(tmp_path / "events-0")
    first = log.append_values([b"a", b"b", b"c"])
    second = log.append([ProducerRecord(b"d", key=b"k"), ProducerRecord(None)])
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert (log.start_offset, log.end_offset) == (0, 5)
    data = log.active_segment.log_path.read_bytes()
    headers = list(iter_batch_headers(data))
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4)]
    assert [r.value for r in log.iter_records()] == [b"a", b"b", b"c", b"d", None]
    assert log.read(3).key == b"k"
    log.close()


def test_records_keep_key_headers_and_timestamp(tmp_path):
    log = open_log(tmp_path / "t")
    log.append([ProducerRecord(b"v", key=b"k", headers=[("h1", b"x"), ("h2", None)], timestamp=42)])
    record = log.read(0)
    assert (record.key, record.value, record.timestamp) == (b"k", b"v", 42)
    assert record.headers == (("h1", b"x"), ("h2", None))
    assert record.timestamp_type == TimestampType.CREATE_TIME
    log.close()


def test_log_append_time_stamps_every_record_with_the_clock(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path / "t", config(message_timestamp_type="LogAppendTime"), clock=clock)
    log.append([ProducerRecord(b"v", timestamp=5)])
    log.append_values([b"w"], timestamp_ms=7)
    assert [r.timestamp for r in log.iter_records()] == [clock.ms, clock.ms]
    assert log.read(0).timestamp_type == TimestampType.LOG_APPEND_TIME
    log.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_type_compresses_batches_kafka_python_reads_them(tmp_path, codec):
    log = open_log(tmp_path / "t", config(compression_type=codec))
    values = [b"value-%05d" % i * 3 for i in range(500)]
    log.append_values(values)
    batch = MemoryRecords(log.active_segment.log_path.read_bytes()).next_batch()
    assert batch.validate_crc()
    assert batch.compression_type == {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    assert [r.value for r in batch] == values
    assert [r.value for r in log.iter_records()] == values
    log.close()


def test_rolls_on_segment_bytes_with_twenty_digit_names(tmp_path):
    log = open_log(tmp_path / "t", config(segment_bytes=1000))
    for _ in range(30):
        log.append_values([b"x" * 100, b"y" * 100])
    names = segment_files(log.dir)
    assert len(names) > 5
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    bases = [int(n[:20]) for n in names]
    assert bases == sorted(bases) and bases[0] == 0
    for segment in log.segments[:-1]:
        assert 0 < segment.size <= 1000
        # an inactive segment's indexes are trimmed to their entries
        assert os.path.getsize(segment.index_path) == segment.offset_index.entries * 8
        assert os.path.getsize(segment.time_index_path) == segment.time_index.entries * 12
    # the active segment's indexes are preallocated to segment.index.bytes, rounded to whole entries
    assert os.path.getsize(log.active_segment.index_path) == 10485760
    assert os.path.getsize(log.active_segment.time_index_path) == 10485756
    assert [r.offset for r in log.iter_records()] == list(range(60))
    log.close()


def test_segment_index_bytes_rounded_down_to_whole_entries(tmp_path):
    log = open_log(tmp_path / "t", config(segment_index_bytes=67))
    assert os.path.getsize(log.active_segment.index_path) == 64
    assert os.path.getsize(log.active_segment.time_index_path) == 60
    log.close()


def test_rolls_when_an_index_fills(tmp_path):
    # 3 offset entries / 2 time entries, an entry after every batch: the time index (one slot kept
    # for the roll entry) fills after two entries.
    log = open_log(tmp_path / "t", config(segment_index_bytes=24, index_interval_bytes=0))
    for i in range(12):
        log.append_values([b"%d" % i])
    assert len(log.segments) > 3
    for segment in log.segments[:-1]:
        assert segment.time_index.entries <= 2
    assert [r.value for r in log.iter_records()] == [b"%d" % i for i in range(12)]
    log.close()


def test_rolls_on_segment_ms_by_record_timestamps(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path / "t", config(segment_ms=1000), clock=clock)
    log.append([ProducerRecord(b"a", timestamp=clock.ms)])
    log.append([ProducerRecord(b"b", timestamp=clock.ms + 500)])
    assert len(log.segments) == 1
    log.append([ProducerRecord(b"c", timestamp=clock.ms + 1001)])
    assert len(log.segments) == 2
    assert log.active_segment.base_offset == 2
    log.close()


def test_offset_index_follows_kafkas_interval_rule(tmp_path):
    log = open_log(tmp_path / "t", config(index_interval_bytes=200))
    sizes = []
    for i in range(20):
        before = log.active_segment.size
        log.append_values([b"z" * (20 + i * 7)])
        sizes.append((before, log.active_segment.size - before))
    # Recompute the expected entries: test before counting the current append, strictly greater.
    expected, since = [], 0
    for offset, (position, size) in enumerate(sizes):
        if since > 200:
            expected.append((offset, position))
            since = 0
        since += size
    index = log.active_segment.offset_index
    assert [index.entry(i) for i in range(index.entries)] == expected
    log.close()


def test_read_and_lookups_outside_the_log(tmp_path):
    log = open_log(tmp_path / "t")
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)
    log.append_values([b"a", b"b"])
    for bad in (-1, 2, 10**12):
        with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 2\)"):
            log.read(bad)
    log.close()


def test_offset_for_timestamp_is_first_record_at_or_after(tmp_path):
    log = open_log(tmp_path / "t", config(segment_bytes=400, index_interval_bytes=50))
    stamps = [100, 100, 250, 300, 300, 900, 1000, 1000, 5000]
    for i, ts in enumerate(stamps):
        log.append([ProducerRecord(b"v%d" % i * 10, timestamp=ts)])
    assert len(log.segments) > 2
    for target in [0, 100, 101, 250, 299, 300, 301, 900, 999, 1000, 4999, 5000]:
        expected = next(i for i, ts in enumerate(stamps) if ts >= target)
        assert log.offset_for_timestamp(target) == expected, target
    with pytest.raises(TimestampNotFoundError):
        log.offset_for_timestamp(5001)
    log.close()


def test_oversize_batch_is_refused_and_nothing_appended(tmp_path):
    log = open_log(tmp_path / "t", config(max_message_bytes=1000))
    log.append_values([b"ok"])
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        log.append_values([b"x" * 2000])
    with pytest.raises(RecordTooLargeError):
        log.append_values([b"y" * 100] * 20)
    assert log.end_offset == 1
    log.append_values([b"after"])
    assert [r.value for r in log.iter_records()] == [b"ok", b"after"]
    log.close()


def test_second_writer_is_refused_reader_is_not(tmp_path):
    log = open_log(tmp_path / "t")
    log.append_values([b"a"])
    with pytest.raises(LogLockedError, match=str(os.getpid())):
        Log.open(tmp_path / "t")
    reader = Log.open(tmp_path / "t", read_only=True)
    assert [r.value for r in reader.iter_records()] == [b"a"]
    with pytest.raises(ReadOnlyLogError):
        reader.append_values([b"no"])
    reader.close()
    log.close()
    Log.open(tmp_path / "t").close()  # the lock is released on close


def test_reader_sees_only_complete_batches_of_a_live_writer(tmp_path):
    log = open_log(tmp_path / "t", config(segment_bytes=3000))
    for i in range(40):
        log.append_values([b"%03d" % i] * 10)
    # A torn half batch at the end, as if the writer were in the middle of a write().
    torn = b"\x00" * 8 + struct.pack(">i", 500) + b"\x00" * 30
    with open(log.active_segment.log_path, "ab") as f:
        f.write(torn)
    reader = Log.open(tmp_path / "t", read_only=True)
    assert reader.end_offset == 400
    assert sum(1 for _ in reader.iter_records()) == 400
    reader.close()
    os.truncate(log.active_segment.log_path, log.active_segment.size)
    log.close()


def test_flush_messages_and_flush_ms_move_the_recovery_point(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path / "t", config(flush_messages=5, flush_ms=1000), clock=clock)
    log.append_values([b"a"] * 3)
    assert log.recovery_point == 0
    log.append_values([b"b"] * 2)
    assert log.recovery_point == 5
    log.append_values([b"c"])
    log.maybe_flush()
    assert log.recovery_point == 5
    clock.advance(1000)
    log.maybe_flush()
    assert log.recovery_point == 6
    log.close()


def test_update_config_applies_live(tmp_path):
    log = open_log(tmp_path / "t")
    log.append_values([b"x" * 10])
    log.update_config(config(max_message_bytes=100))
    with pytest.raises(RecordTooLargeError):
        log.append_values([b"x" * 200])
    log.close()


def test_info_reports_offsets_segments_and_config(tmp_path):
    log = open_log(tmp_path / "audit-0", config(retention_ms="30d"))
    log.append([ProducerRecord(b"a", timestamp=10), ProducerRecord(b"b", timestamp=20)])
    info = log.info()
    assert info["topic"] == "audit" and info["partition"] == 0
    assert (info["start_offset"], info["end_offset"], info["segments"]) == (0, 2, 1)
    assert (info["first_timestamp"], info["last_timestamp"]) == (10, 20)
    assert info["config"]["retention.ms"] == 30 * 86_400_000
    assert info["bytes"] == log.active_segment.size
    log.close()


def test_info_survives_retention_purging_the_segment_it_is_reading(tmp_path):
    """CI saw `info` fail with EBADF: retention (file.delete.delay.ms 0) closed the first segment's
    descriptor while info read its first batch. info now looks again once segments left the log."""
    log = open_log(tmp_path / "t-0", config(retention_bytes=1, file_delete_delay_ms=0, retention_ms=-1))
    for i in range(3):
        log.append([ProducerRecord(b"v%d" % i, timestamp=10 + i)])
        log.roll()
    first = log.segments[0]
    read_batches = first.iter_batches

    def purged_while_reading(*args, **kwargs):
        log.delete_old_segments()  # retention deletes and purges this very segment now
        assert first.log_path.name.endswith(".deleted") and not first.log_path.exists()
        return read_batches(*args, **kwargs)

    first.iter_batches = purged_while_reading
    info = log.info()
    assert info["start_offset"] == log.start_offset > 0
    assert info["first_timestamp"] == 10 + log.start_offset
    log.close()


READER_SURVIVES_TRIM = r"""
import sys
from seglogfs.config import LogConfig
from seglogfs.index import OffsetIndex
from seglogfs.log import Log

cfg = LogConfig.from_mapping({"segment.bytes": 5000, "index.interval.bytes": 10})
writer = Log.open(sys.argv[1], cfg, create=True)
for i in range(20):
    writer.append_values([b"%04d" % i * 20])
active = writer.active_segment
# A reader (dump, verify, Spark) opens the active segment's preallocated 10 MiB index...
reader_index = OffsetIndex(active.index_path, active.base_offset, writable=False)
reader = Log.open(sys.argv[1], read_only=True)
# ...then the writer rolls, trimming that file to a few bytes, while the reader still uses it.
for i in range(200):
    writer.append_values([b"%04d" % i * 20])
assert len(writer.segments) > 2 and active.index_path.stat().st_size < 4096
print(reader_index.entries_before_zero_tail(), reader_index.lookup(10**6))
print(sum(1 for _ in reader.iter_records()))
"""


def test_reader_survives_the_writer_trimming_indexes_it_has_open(tmp_path):
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", READER_SURVIVES_TRIM, str(tmp_path / "t")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr  # -7 (SIGBUS) when the reader maps the index
    assert run.stdout.splitlines()[-1] == "20"


def test_reads_batches_with_offset_gaps_left_by_compaction(tmp_path):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    # A compacted batch keeps its base and last offset but only some records (deltas 0, 3, 4).
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**20,
    )
    for delta, value in [(0, b"zero"), (3, b"three"), (4, b"four")]:
        builder.append(delta, timestamp=1000 + delta, key=None, value=value, headers=[])
    batch = bytes(builder.build())
    directory = tmp_path / "compacted-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(batch)
    log = Log.open(directory, read_only=True)
    assert log.end_offset == 5
    assert [(r.offset, r.value) for r in log.iter_records()] == [(0, b"zero"), (3, b"three"), (4, b"four")]
    assert (log.read(3).value, log.read(4).timestamp) == (b"three", 1004)
    for missing in (1, 2):
        with pytest.raises(OffsetOutOfRangeError, match="holds no user record"):
            log.read(missing)
    log.close()


def test_reader_of_a_log_dir_without_segments_sees_an_empty_log(tmp_path):
    directory = tmp_path / "fresh-0"
    directory.mkdir()
    with Log.open(directory, read_only=True, log_start_offset=7) as reader:
        assert (reader.start_offset, reader.end_offset) == (7, 7)
        assert list(reader.iter_records()) == []
        assert reader.active_segment.offset_index.to_arrays()[0].size == 0
    assert list(directory.iterdir()) == []  # nothing was created


def test_reader_leaves_out_a_segment_retention_removes_while_it_opens(tmp_path, monkeypatch):
    import seglogfs.log_segments as log_module  # where logs and their loader make segments

    writer = open_log(tmp_path / "t", config(segment_bytes=300))
    for i in range(30):
        writer.append_values([b"v%02d" % i * 10])
    first, second = writer.segments[0], writer.segments[1]
    real = log_module.LogSegment

    def removed_after_listing(directory, base_offset, **kwargs):
        if base_offset == first.base_offset:
            first.log_path.unlink()  # retention ran between the directory listing and the stat
        return real(directory, base_offset, **kwargs)

    monkeypatch.setattr(log_module, "LogSegment", removed_after_listing)
    with Log.open(tmp_path / "t", read_only=True) as reader:
        assert reader.segments[0].base_offset == second.base_offset == reader.start_offset
        assert reader.end_offset == 30
        assert [r.offset for r in reader.iter_records()] == list(range(second.base_offset, 30))
    writer.close()


def test_reader_ignores_index_entries_past_the_size_it_saw(tmp_path):
    from seglogfs.segment import LogSegment

    writer = open_log(tmp_path / "t", config(index_interval_bytes=10))
    for i in range(5):
        writer.append_values([b"%02d" % i * 20])
    active = writer.active_segment
    # A reader stats the segment, then the writer appends (and indexes) before the reader loads the
    # index: the new entries point past the bytes the reader knows about.
    reader = LogSegment(writer.dir, active.base_offset, writable=False)
    for i in range(5, 10):
        writer.append_values([b"%02d" % i * 20])
    _, positions = reader.offset_index.to_arrays()
    assert positions.size and int(positions.max()) < reader.size
    assert reader.read_next_offset() == 5
    assert reader.find_batch(4).last_offset == 4 and reader.find_batch(5) is None
    reader.close()
    writer.close()


def test_segment_jitter_shortens_the_roll_age_per_segment(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path / "t", config(segment_ms=10_000, segment_jitter_ms=4_000), clock=clock)
    jitter = log.active_segment.roll_jitter_ms
    assert 0 <= jitter < 4_000  # Kafka: a random value below min(jitter, segment.ms), fixed per segment
    log.append([ProducerRecord(b"a", timestamp=clock.ms)])
    log.append([ProducerRecord(b"b", timestamp=clock.ms + 10_000 - jitter)])
    assert len(log.segments) == 1
    log.append([ProducerRecord(b"c", timestamp=clock.ms + 10_000 - jitter + 1)])
    assert len(log.segments) == 2
    log.close()


def test_a_flush_after_a_new_segment_fsyncs_the_log_dir(tmp_path, monkeypatch) -> None:
    """As Kafka's LocalLog.flush: a segment created since the last flush (a roll, or the first one of a
    new log) has its name made durable by an fsync of the log dir; a new log dir's name by one of the
    data dir. A flush with no new file fsyncs no directory."""
    import seglogfs.log as log_module

    synced: list[str] = []
    monkeypatch.setattr(log_module, "fsync_dir", lambda path: synced.append(os.path.basename(path)))
    lg = open_log(tmp_path / "t-0")
    assert synced == [tmp_path.name]  # the data dir, for the new log's name
    lg.append([ProducerRecord(value=b"a")])
    lg.flush()
    assert synced == [tmp_path.name, "t-0"]
    lg.append([ProducerRecord(value=b"b")])
    lg.flush()
    assert synced == [tmp_path.name, "t-0"]
    lg.roll()
    lg.append([ProducerRecord(value=b"c")])
    lg.flush()
    assert synced.count("t-0") == 2
    lg.close()

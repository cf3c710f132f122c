"""Retention: each policy's choice of segments (seglogfs.retention) and Log.delete_old_segments doing
the deleting (``.deleted``, then removed after file.delete.delay.ms)."""

from __future__ import annotations

import pytest
from support.engine_helpers import ManualClock, config, open_log

from seglogfs.errors import OffsetOutOfRangeError
from seglogfs.records import ProducerRecord
from seglogfs.retention import (
    deletable_segment_count,
    log_start_offset_breached,
    retention_ms_breached,
    retention_size_breached,
)


def test_retention_by_time_renames_deleted_then_removes_after_delay(tmp_path):
    clock = ManualClock()
    cfg = config(segment_bytes=500, retention_ms=10_000, file_delete_delay_ms=1000)
    log = open_log(tmp_path / "t", cfg, clock=clock)
    for i in range(10):
        log.append([ProducerRecord(b"old%d" % i * 20, timestamp=clock.ms)])
    clock.advance(20_000)
    for i in range(3):
        log.append([ProducerRecord(b"new%d" % i * 20, timestamp=clock.ms)])
    before = len(log.segments)
    deleted = log.delete_old_segments()
    assert deleted > 0 and len(log.segments) == before - deleted
    assert any(p.name.endswith(".log.deleted") for p in log.dir.iterdir())
    assert log.start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)
    assert [r.value[:4] for r in log.iter_records()][-3:] == [b"new0", b"new1", b"new2"]
    clock.advance(1001)
    log.delete_old_segments()
    assert not any(p.name.endswith(".deleted") for p in log.dir.iterdir())
    log.close()


def test_retention_by_size_keeps_the_newest_segments(tmp_path):
    log = open_log(tmp_path / "t", config(segment_bytes=300, retention_bytes=700, retention_ms=-1))
    for i in range(30):
        log.append_values([b"v%02d" % i * 10])
    log.delete_old_segments()
    assert log.size_bytes - log.segments[0].size < 700
    assert log.end_offset == 30
    values = [r.value for r in log.iter_records()]
    assert values[-1] == b"v29" * 10 and len(values) == 30 - log.start_offset
    log.close()


def test_retention_that_would_remove_everything_rolls_first(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path / "t", config(retention_ms=1000), clock=clock)
    log.append([ProducerRecord(b"a", timestamp=clock.ms)])
    clock.advance(5000)
    assert log.delete_old_segments() == 1
    assert (log.start_offset, log.end_offset) == (1, 1)
    assert len(log.segments) == 1 and log.active_segment.size == 0
    log.append_values([b"b"])
    assert log.read(1).value == b"b"
    log.close()


def _three_segments(tmp_path, clock):
    log = open_log(tmp_path / "p", config(segment_bytes=200), clock=clock)
    for i in range(3):
        log.append([ProducerRecord(b"x" * 150, timestamp=clock.ms + i * 1000)])
    assert len(log.segments) == 3  # each append of ~220 bytes rolls
    return log


def test_each_policy_counts_the_oldest_segments_it_would_delete(tmp_path):
    clock = ManualClock()
    log = _three_segments(tmp_path, clock)
    segments = log.segments
    now = clock.ms + 2500
    assert retention_ms_breached(segments, now, 1000, log.name) == 2  # stamps 0 and 1000 are > 1 s old
    assert retention_ms_breached(segments, now, -1, log.name) == 0  # -1: unlimited
    sizes = [s.size for s in segments]
    # Kafka deletes while what is left stays at or above retention.bytes.
    assert retention_size_breached(segments, sum(sizes) - sizes[0]) == 1
    assert retention_size_breached(segments, sum(sizes) - sizes[0] + 1) == 0
    assert retention_size_breached(segments, 1) == 2
    assert retention_size_breached(segments, -1) == 0
    assert log_start_offset_breached(segments, segments[1].base_offset) == 1
    assert log_start_offset_breached(segments, segments[2].base_offset + 1) == 2
    assert log_start_offset_breached(segments, 0) == 0
    log.close()


def test_deletable_count_is_the_most_any_policy_allows(tmp_path):
    clock = ManualClock()
    log = _three_segments(tmp_path, clock)
    now = clock.ms + 2500
    by_time = config(segment_bytes=200, retention_ms=1000)
    assert deletable_segment_count(log.segments, by_time, 0, now, log.name) == 2
    assert deletable_segment_count(log.segments, by_time, log.segments[2].base_offset, now, log.name) == 2
    compact = config(segment_bytes=200, retention_ms=1000, cleanup_policy="compact")
    assert deletable_segment_count(log.segments, compact, 0, now, log.name) == 0  # no deletes...
    assert deletable_segment_count(log.segments, compact, log.segments[1].base_offset, now, log.name) == 1
    log.close()


def test_segments_retention_deletes_leave_no_saved_view_totals(tmp_path):
    # each sealed segment's view totals are saved beside it (.<base>.totals): a log under retention
    # must keep those of its live segments only, not one file per segment it ever had
    clock = ManualClock()
    with open_log(tmp_path / "t", config(segment_bytes=400, file_delete_delay_ms=0), clock=clock) as lg:
        for n in range(60):
            lg.append([ProducerRecord(value=b"v%05d" % n + b"x" * 100)])
        lg.flush()
        assert len(list(lg.dir.glob(".*.totals"))) > 10
        lg.update_config(config(segment_bytes=400, file_delete_delay_ms=0, retention_bytes=800))
        assert lg.delete_old_segments() > 10
        live = {f".{s.base_offset:020d}.totals" for s in lg.segments}
        assert {p.name for p in lg.dir.glob(".*.totals")} <= live


def test_readers_never_see_a_start_offset_below_the_first_segment_while_retention_renames(
    tmp_path, monkeypatch
):
    # readers take the start offset and the segment list without the log's lock: while retention
    # renames the deleted files, by-offset and info must not name records no longer in the list
    from seglogfs.segment import LogSegment

    with open_log(tmp_path / "t", config(segment_bytes=400, file_delete_delay_ms=0)) as lg:
        for n in range(40):
            lg.append([ProducerRecord(value=b"v%05d" % n + b"x" * 100)])
        seen: list[tuple[int, int]] = []
        rename = LogSegment.rename_suffix

        def watched(segment: LogSegment, suffix: str) -> list:
            seen.append((lg.start_offset, lg.segments[0].base_offset))
            return rename(segment, suffix)

        monkeypatch.setattr(LogSegment, "rename_suffix", watched)
        lg.update_config(config(segment_bytes=400, file_delete_delay_ms=0, retention_bytes=800))
        assert lg.delete_old_segments() > 3
        assert seen and all(start >= first for start, first in seen), seen

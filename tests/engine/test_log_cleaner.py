"""The log cleaner's rules, one at a time: passes when the map is too small, the dirty ratio and the
compaction lags, tombstones and their delete horizon, grouping, the checkpoint, keyless appends,
transactional batches, readers during a swap, the threads, the throttle."""

from __future__ import annotations

import logging
import os
import re
import struct
import time
from pathlib import Path

import pytest
from crc32c import crc32c
from kafka.record import MemoryRecords
from support.cleaner_helpers import (
    assert_verifies,
    compact_config,
    engine_records,
    kafka_python_records,
    latest_per_key,
    open_manager,
)
from support.engine_helpers import ManualClock
from support.producer_batches import control_batch
from support.record_batches import raw_legacy
from support.transactions import Scenario

from seglogfs import segment_swap
from seglogfs.cleaner import CleanAborted, Cleaner, cleanable_range, group_segments_by_size
from seglogfs.cleaner_config import CleanerConfig
from seglogfs.errors import InvalidRecordError
from seglogfs.log_cleaner import Throttler
from seglogfs.log_files import CLEANER_OFFSET_CHECKPOINT
from seglogfs.log_manager import LogManager
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED
from seglogfs.records import ProducerRecord, encode_batch, iter_batch_headers, read_batch_header


def fill(lg, rounds: int, keys: int = 10, per_round: int = 20, tombstone_every: int = 0) -> dict:
    """Keyed appends, a roll after each round; returns the model (key -> (offset, value))."""
    model = {}
    n = 0
    for r in range(rounds):
        for i in range(per_round):
            key = b"k%d" % ((r * per_round + i) % keys)
            n += 1
            value = None if tombstone_every and n % tombstone_every == 0 else b"r%d-%d" % (r, i)
            info = lg.append([ProducerRecord(key=key, value=value)])
            model[key] = (info.first_offset, value)
        lg.roll()
    return model


def clean_all(manager, now_ms=None, limit: int = 100) -> list:
    results = []
    while (result := manager.clean_once(now_ms)) is not None and len(results) < limit:
        results.append(result)
    return results


def test_a_dirty_section_larger_than_the_map_is_cleaned_in_passes(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(), clock, dedupe_buffer_size=24 * 7) as manager:  # 6 keys
        lg = manager.create_log("t-0")
        model = fill(lg, rounds=4, keys=10)
        first = manager.clean_once()
        assert first.map_full and first.first_dirty_offset == 0
        # Kafka's rule: the map takes records while it holds fewer than 6 keys: k0..k5 at offsets 0..5.
        assert first.end_offset == 6
        results = [first, *clean_all(manager)]
        ends = [r.end_offset for r in results]
        assert ends == sorted(ends) and ends[-1] == lg.segments[-1].base_offset
        assert all(r.map_full for r in results[:-1])
        assert latest_per_key(engine_records(lg)) == model
        assert len(engine_records(lg)) == 10
        assert manager.cleaner_state("t-0")["passes"] == len(results)


def test_the_dirtiest_log_is_cleaned_first_and_only_over_its_ratio(tmp_path: Path) -> None:
    clock = ManualClock()
    cfg = compact_config(min_cleanable_dirty_ratio=0.5)
    with open_manager(tmp_path, cfg, clock) as manager:
        a, b = manager.create_log("a-0"), manager.create_log("b-0")
        fill(a, rounds=2, keys=5)
        fill(b, rounds=4, keys=5)
        assert manager.clean_once().log in ("a-0", "b-0")  # both fully dirty: ratio 1
        fill(a, rounds=3, keys=5)
        fill(b, rounds=1, keys=5)
        ratio = {name: manager.cleaner_state(name)["dirty_ratio"] for name in ("a-0", "b-0")}
        dirtiest = max(ratio, key=ratio.get)
        assert manager.clean_once().log == dirtiest
        other = manager.cleaner_state("b-0" if dirtiest == "a-0" else "a-0")
        assert (manager.clean_once() is not None) == (other["dirty_ratio"] > 0.5)
        # Live: raise the bar, nothing is clean-worthy any more.
        strict = compact_config(min_cleanable_dirty_ratio=1.0)
        manager.update_configs(strict, {})
        fill(a, rounds=1, keys=5)
        assert manager.clean_once() is None
        assert not manager.cleaner_state("a-0")["cleanable"]


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(min_compaction_lag_ms=60_000), clock) as manager:
        lg = manager.create_log("t-0")
        fill(lg, rounds=2, keys=3)
        clock.advance(61_000)
        young = lg.segments[-1].base_offset
        fill(lg, rounds=2, keys=3)
        span = cleanable_range(lg, None, clock.ms)
        assert span.first_uncleanable_offset == young
        result = manager.clean_once()
        assert result.end_offset == young
        offsets = [o for o, _, _ in engine_records(lg)]
        assert [o for o in offsets if o >= young] == list(range(young, lg.end_offset))  # untouched


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path: Path) -> None:
    clock = ManualClock()
    cfg = compact_config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=60_000)
    with open_manager(tmp_path, cfg, clock) as manager:
        lg = manager.create_log("t-0")
        fill(lg, rounds=2, keys=3)
        assert manager.clean_once() is None  # ratio 1.0 is never exceeded
        clock.advance(60_001)
        assert manager.cleaner_state("t-0")["cleanable"]
        assert manager.clean_once() is not None


def headers_of(lg) -> list:
    out = []
    for segment in lg.segments:
        data = segment.log_path.read_bytes()
        position = 0
        while (header := read_batch_header(data, position)) is not None:
            out.append(header)
            position += header.size
    return out


def test_tombstones_get_a_delete_horizon_then_go(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(delete_retention_ms=10_000), clock) as manager:
        lg = manager.create_log("t-0")
        lg.append([ProducerRecord(key=b"a", value=b"1"), ProducerRecord(key=b"b", value=b"2")])
        lg.append([ProducerRecord(key=b"a", value=None), ProducerRecord(key=b"c", value=b"3")])
        lg.roll()
        manager.clean_once(clock.ms)
        tomb = next(h for h in headers_of(lg) if h.base_offset == 2)
        assert tomb.has_delete_horizon and tomb.base_timestamp == clock.ms + 10_000
        assert tomb.last_offset == 3 and tomb.records_count == 2
        assert engine_records(lg) == [(1, b"b", b"2"), (2, b"a", None), (3, b"c", b"3")]
        # kafka-python reads the horizon batch: record timestamps are kept (deltas from the horizon).
        batch = MemoryRecords(lg.segments[0].log_path.read_bytes())
        stamps = []
        while batch.has_next():
            stamps += [r.timestamp for r in batch.next_batch()]
        assert stamps == [r.timestamp for r in lg.iter_records()]
        lg.append([ProducerRecord(key=b"d", value=b"4")])
        lg.roll()
        manager.clean_once(clock.ms + 9_999)  # inside the horizon: kept
        assert (2, b"a", None) in engine_records(lg)
        lg.append([ProducerRecord(key=b"e", value=b"5")])
        lg.roll()
        manager.clean_once(clock.ms + 10_000)
        assert [k for _, k, _ in engine_records(lg)] == [b"b", b"c", b"d", b"e"]
        assert lg.end_offset == 6 and lg.start_offset == 0


def test_a_segment_whose_only_change_is_a_delete_horizon_is_rewritten(tmp_path: Path) -> None:
    """The cleaner kept a one-segment group as it was when the cleaned copy had the same size and every
    record survived: here the gzip batch with its new delete horizon compresses to exactly its old
    size (found by the compaction model), so its tombstones got their horizon a clean late."""
    clock = ManualClock()
    cfg = compact_config(delete_retention_ms=10_000, compression_type="gzip")
    with open_manager(tmp_path, cfg, clock) as manager:
        lg = manager.create_log("t-0")
        keys_values = [(b"k3", None), (b"k4", None), (b"k7", None), (b"k2", b"\x0b\x19"), (b"k10", None)]
        lg.append([ProducerRecord(key=k, value=v) for k, v in keys_values])
        lg.roll()
        before = lg.segments[0].log_path.read_bytes()
        manager.clean_once(clock.ms)
        (header,) = headers_of(lg)
        assert header.has_delete_horizon and header.base_timestamp == clock.ms + 10_000
        assert len(lg.segments[0].log_path.read_bytes()) == len(before)  # the same size, other bytes
        lg.append([ProducerRecord(key=b"s", value=b"s")])
        lg.roll()
        manager.clean_once(clock.ms + 10_000)
        assert engine_records(lg) == [(3, b"k2", b"\x0b\x19"), (5, b"s", b"s")]


def test_a_batch_keeps_its_offsets_and_an_emptied_segment_end_stays(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(), clock) as manager:
        lg = manager.create_log("t-0")
        lg.append([ProducerRecord(key=b"a", value=b"1"), ProducerRecord(key=b"b", value=b"2")])
        lg.append([ProducerRecord(key=b"a", value=b"3"), ProducerRecord(key=b"b", value=b"4")])
        lg.roll()
        lg.append([ProducerRecord(key=b"a", value=b"5"), ProducerRecord(key=b"b", value=b"6")])
        lg.roll()
        clean_all(manager)
        headers = headers_of(lg)
        # The first batch is gone; the second is the first segment's last: kept as an empty header.
        assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [(2, 3, 0), (4, 5, 2)]
        assert engine_records(lg) == [(4, b"a", b"5"), (5, b"b", b"6")]
    assert_verifies(tmp_path / "t-0")


def test_segments_are_grouped_as_kafka_groups_them(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(segment_bytes=100_000), clock) as manager:
        lg = manager.create_log("t-0")
        for _ in range(5):
            lg.append([ProducerRecord(key=b"k", value=b"x" * 100)])
            lg.roll()
        sealed = lg.segments[:-1]
        size = sealed[0].size
        groups = group_segments_by_size(sealed, 2 * size, 10_000, lg.end_offset)
        assert [len(g) for g in groups] == [2, 2, 1]
        assert [len(g) for g in group_segments_by_size(sealed, 10 * size, 10_000, lg.end_offset)] == [5]
        # The offset range of a group stays within Int.MAX of its base.
        assert [len(g) for g in group_segments_by_size(sealed, 10 * size, 10_000, 2**31 + 10)] == [4, 1]
        result = manager.clean_once()
        assert (result.segments_in, result.segments_out) == (5, 1)
        assert len(lg.segments) == 2 and lg.segments[0].base_offset == 0
        assert engine_records(lg) == [(4, b"k", b"x" * 100)]


def test_the_checkpoint_survives_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(), clock) as manager:
        lg = manager.create_log("t-0")
        fill(lg, rounds=2)
        end = manager.clean_once().end_offset
    lines = (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines()
    assert lines == ["0", "1", f"t 0 {end}"]
    with open_manager(tmp_path, compact_config(), clock) as manager:
        state = manager.cleaner_state("t-0")
        assert state["first_dirty_offset"] == end and state["dirty_ratio"] == 0
        assert manager.clean_once() is None


def test_keyless_records_are_refused_on_a_compacted_log(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(), clock) as manager:
        lg = manager.create_log("t-0")
        for append in (
            lambda: lg.append([ProducerRecord(key=b"a", value=b"1"), ProducerRecord(value=b"2")]),
            lambda: lg.append_values([b"v"]),
            lambda: lg.append_split([b"v"]),
            lambda: lg.append_split([ProducerRecord(value=b"v")]),
        ):
            with pytest.raises(InvalidRecordError, match="log t-0 is compacted"):
                append()
        assert lg.end_offset == 0
        lg.append_split([ProducerRecord(key=b"a", value=b"v")])
        assert lg.end_offset == 1


def _headers(path: Path) -> list:
    return list(iter_batch_headers(path.read_bytes(), path=path))


def with_attributes(batch: bytes, extra: int, producer_id: int) -> bytes:
    """``batch`` with attribute bits added and a producer id, its CRC recomputed."""
    data = bytearray(batch)
    attributes = struct.unpack_from(">h", data, 21)[0] | extra
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">q", data, 43, producer_id)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def test_a_committed_transactional_record_is_deduplicated_and_its_batch_kept_for_its_producer(
    tmp_path: Path,
) -> None:
    """Copied from a broker: a committed transactional record superseded by a later one of its key goes
    like any other; its batch, its producer's last, stays as an empty header with its producer fields
    (Kafka's RETAIN_EMPTY), and its COMMIT marker stays while that batch is left."""
    log_dir = tmp_path / "t-0"
    log_dir.mkdir()
    now = 1_700_000_000_000
    plain = encode_batch([ProducerRecord(key=b"a", value=b"1")], 0, now_ms=now)
    txn = with_attributes(encode_batch([ProducerRecord(key=b"a", value=b"2")], 1, now_ms=now), 0x10, 42)
    commit = control_batch(2, 42, epoch=read_batch_header(txn, 0).producer_epoch, ts=now)
    newer = encode_batch([ProducerRecord(key=b"b", value=b"3")], 3, now_ms=now)
    superseding = encode_batch([ProducerRecord(key=b"a", value=b"4")], 4, now_ms=now)
    (log_dir / "00000000000000000000.log").write_bytes(plain + txn + commit + newer)
    (log_dir / "00000000000000000004.log").write_bytes(superseding)
    (log_dir / "00000000000000000005.log").write_bytes(b"")
    clock = ManualClock(now)
    with open_manager(tmp_path, compact_config(), clock) as manager:
        lg = manager.get("t-0")
        assert manager.clean_once() is not None
        assert engine_records(lg) == [(3, b"b", b"3"), (4, b"a", b"4")]
    headers = _headers(log_dir / "00000000000000000000.log")
    emptied = next(h for h in headers if h.base_offset == 1)
    assert (emptied.records_count, emptied.producer_id, emptied.is_transactional) == (0, 42, True)
    assert any(h.is_control and h.base_offset == 2 for h in headers)
    assert_verifies(log_dir)


def test_aborted_records_go_and_markers_go_past_their_horizon_once_their_transaction_is_empty(
    tmp_path: Path,
) -> None:
    """A broker's log: an aborted transaction's records go at the first clean (its batch, its
    producer's last, stays empty, with its ABORT marker and .txnindex entry); a committed transaction
    whose record was superseded keeps its COMMIT marker while its batch is left, then the marker gets
    a delete horizon, then goes; the marker of an empty transaction that is its producer's last batch
    stays (as an empty header)."""
    log_dir = tmp_path / "t-0"
    model = (
        Scenario()
        .send(7, [b"1"], keys=[b"a"])
        .commit(7)
        .send_plain([b"2"], keys=[b"a"])
        .send(8, [b"1"], keys=[b"b"])
        .abort(8)
        .commit(9)
        .send(7, [b"1"], keys=[b"c"])
        .commit(7)
        .roll()
        .send_plain([b"s"], keys=[b"sentinel"])
        .write(log_dir)
    )
    assert model.aborted == [(8, 3, 4, 5)]
    clock = ManualClock(1_700_000_000_000)
    expected = [(2, b"a", b"2"), (6, b"c", b"1"), (8, b"sentinel", b"s")]
    markers, horizons = [], []
    with open_manager(tmp_path, compact_config(delete_retention_ms=10_000), clock) as manager:
        lg = manager.get("t-0")
        for n in range(3):
            clean_all(manager)
            headers = [h for path in sorted(log_dir.glob("*.log")) for h in _headers(path)]
            markers.append({h.base_offset: h.records_count for h in headers if h.is_control})
            horizons.append({h.base_offset for h in headers if h.is_control and h.has_delete_horizon})
            for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
                records = [(r.offset, r.key, r.value) for r in lg.iter_records(isolation=isolation)]
                assert records[: len(expected)] == expected
            clock.advance(10_001)
            lg.append([ProducerRecord(key=b"sentinel", value=b"s%d" % n)])
            lg.roll()
            expected[-1] = (lg.end_offset - 1, b"sentinel", b"s%d" % n)
        assert lg.aborted_transactions(0, lg.end_offset)[0].producer_id == 8
        assert lg.last_stable_offset == lg.end_offset
        assert kafka_python_records(log_dir)[:2] == expected[:2]
    # The COMMIT at 1 saw its batch in the first clean; then it gets a horizon; past it, it goes. The
    # empty transaction's COMMIT at 5 gets one at once; past it, it stays emptied (pid 9's last batch).
    assert markers[0] == {1: 1, 4: 1, 5: 1, 7: 1}
    assert markers[1] == {1: 1, 4: 1, 5: 0, 7: 1}
    assert markers[2] == {4: 1, 5: 0, 7: 1}
    assert horizons[:2] == [{5}, {1}]
    emptied = next(h for h in _headers(log_dir / "00000000000000000000.log") if h.base_offset == 3)
    assert (emptied.records_count, emptied.producer_id) == (0, 8)
    assert_verifies(log_dir)


def test_a_tombstone_after_an_untouched_legacy_record_of_its_key_stays_past_its_horizon(
    tmp_path: Path,
) -> None:
    """A legacy (v1) record, which the cleaner copies untouched (its key is never mapped), followed by
    a tombstone of its key: once the horizon passed, dropping the tombstone would bring the deleted
    key back with its old value."""
    log_dir = tmp_path / "t-0"
    log_dir.mkdir()
    now = 1_700_000_000_000
    legacy = raw_legacy(1, b"a", b"old", offset=0, timestamp=now)
    tombstone = encode_batch([ProducerRecord(key=b"a", value=None)], 1, now_ms=now)
    (log_dir / "00000000000000000000.log").write_bytes(legacy + tombstone)
    (log_dir / "00000000000000000002.log").write_bytes(b"")
    clock = ManualClock(now)
    with open_manager(tmp_path, compact_config(delete_retention_ms=10_000), clock) as manager:
        lg = manager.get("t-0")
        assert manager.clean_once(now) is not None  # sets the tombstone's horizon
        lg.append([ProducerRecord(key=b"b", value=b"1")])
        lg.roll()
        assert manager.clean_once(now + 10_000) is not None  # past the horizon
        for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
            latest = latest_per_key(
                [(r.offset, r.key, r.value) for r in lg.iter_records(isolation=isolation)]
            )
            assert latest[b"a"] == (1, None)
        assert legacy in lg.segments[0].log_path.read_bytes()  # still untouched
    assert_verifies(log_dir)


def test_a_delete_retention_of_long_max_keeps_tombstones(tmp_path: Path) -> None:
    """delete.retention.ms up to Long.MAX_VALUE is accepted ("keep tombstones"): now + retention
    overflowed int64 and every clean of the log failed with OverflowError. The horizon saturates."""
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(delete_retention_ms=2**63 - 1), clock) as manager:
        lg = manager.create_log("t-0")
        lg.append([ProducerRecord(key=b"a", value=b"1")])
        lg.append([ProducerRecord(key=b"a", value=None), ProducerRecord(key=b"b", value=b"2")])
        lg.roll()
        assert manager.clean_once(clock.ms) is not None
        tomb = next(h for h in headers_of(lg) if h.base_offset == 1)
        assert tomb.has_delete_horizon and tomb.base_timestamp == 2**63 - 1
        assert engine_records(lg) == [(1, b"a", None), (2, b"b", b"2")]
        assert kafka_python_records(lg.dir) == engine_records(lg)
        assert [r.timestamp for r in lg.iter_records()] == [clock.ms, clock.ms]
        lg.append([ProducerRecord(key=b"c", value=b"3")])
        lg.roll()
        assert manager.clean_once(clock.ms + 10**12) is not None
        assert (1, b"a", None) in engine_records(lg)


def test_a_reader_of_a_replaced_segment_finishes_it(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(file_delete_delay_ms=60_000), clock) as manager:
        lg = manager.create_log("t-0")
        fill(lg, rounds=3)
        old = lg.segments[0]
        fd = old.open_reader_fd()
        manager.clean_once()
        assert old not in lg.segments and old in lg.deleted_segments
        assert old.log_path.name.endswith(".deleted")
        assert list(old.iter_batches(0, fd=fd))  # the whole old segment still reads
        lg.delete_old_segments(clock.ms + 60_000)  # purge due: the files go
        assert not old.log_path.exists()
        os.close(fd)


def test_threads_clean_in_the_background_and_log_each_clean(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="seglogfs.cleaner")
    manager = open_manager(tmp_path, compact_config(), time.time, backoff_ms=10, threads=2)
    try:
        lg = manager.create_log("t-0")
        model = fill(lg, rounds=3)
        manager.start_cleaner()
        deadline = time.monotonic() + 20
        while manager.cleaner_state("t-0")["passes"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert latest_per_key(engine_records(lg)) == model
        assert len(engine_records(lg)) == 10
    finally:
        manager.close()
    messages = [r.getMessage() for r in caplog.records if r.name == "seglogfs.cleaner"]
    assert any(
        re.match(
            r"cleaned log t-0: offsets \[0, 60\), \d+ segments -> \d+, \d+ -> \d+ bytes, 50 of 60 "
            r"records removed, [\d.]+ s$",
            m,
        )
        for m in messages
    ), messages


def test_a_log_whose_clean_fails_unexpectedly_does_not_starve_the_others(tmp_path: Path, monkeypatch) -> None:
    """A clean that raised an unexpected error (a bug) left its log the dirtiest: every round picked
    it again and failed, and no other log was ever cleaned. Kafka marks it uncleanable."""
    clock = ManualClock()
    real_clean = Cleaner.clean

    def failing(self, lg, span, now_ms):
        if lg.name == "a-0":
            raise RuntimeError("a bug")
        return real_clean(self, lg, span, now_ms)

    monkeypatch.setattr(Cleaner, "clean", failing)
    with open_manager(tmp_path, compact_config(), clock) as manager:
        fill(manager.create_log("a-0"), rounds=3, keys=2)  # the dirtiest
        fill(manager.create_log("b-0"), rounds=3, keys=8)
        with pytest.raises(RuntimeError, match="a bug"):
            manager.clean_once()
        result = manager.clean_once()  # raised "a bug" again: a-0 was still the dirtiest
        assert result is not None and result.log == "b-0"
        assert manager.cleaner_state("a-0")["uncleanable"] == "RuntimeError: a bug"


def test_disabled_or_read_only_cleaner_starts_no_thread(tmp_path: Path) -> None:
    with LogManager(tmp_path, compact_config(), cleaner_config=CleanerConfig(enable=False)) as manager:
        manager.start_cleaner()
        assert manager.cleaner._threads == []


def test_a_stopped_clean_leaves_nothing_behind(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(), clock) as manager:
        lg = manager.create_log("t-0")
        model = fill(lg, rounds=3)
        calls = []
        sealed = len(lg.segments) - 1  # a window each in the map pass: stop in the recopy
        cleaner = Cleaner(1 << 20, should_stop=lambda: len(calls) > sealed + 1 or calls.append(1))
        with pytest.raises(CleanAborted):
            cleaner.clean(lg, cleanable_range(lg, None, clock.ms), clock.ms)
        assert latest_per_key(engine_records(lg)) == model  # the groups swapped in before the stop
        assert len(calls) == sealed + 2
        assert not [p for p in lg.dir.iterdir() if ".cleaned" in p.name or ".swap" in p.name]


def test_the_throttle_limits_bytes_per_second() -> None:
    now = [0.0]
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttle = Throttler(1000, sleep=sleep, clock=lambda: now[0])
    for _ in range(5):
        throttle(1000)
    assert sum(slept) == pytest.approx(4.0)  # one second's worth up front, then 1000 B/s
    unlimited = Throttler(float("inf"), sleep=sleep, clock=lambda: now[0])
    unlimited(10**9)
    assert sum(slept) == pytest.approx(4.0)


def test_the_cleaner_reads_and_writes_through_the_throttle(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(), clock) as manager:
        lg = manager.create_log("t-0")
        fill(lg, rounds=3)
        size = sum(s.size for s in lg.segments[:-1])
        seen = []
        result = Cleaner(1 << 20, throttle=seen.append).clean(
            lg, cleanable_range(lg, None, clock.ms), clock.ms
        )
        # the map pass and the recopy read every byte; the recopy writes what is kept
        assert sum(seen) == 2 * size + result.bytes_out


def test_compact_and_delete_both_apply(tmp_path: Path) -> None:
    clock = ManualClock()
    cfg = compact_config(cleanup_policy="compact,delete", retention_ms=1000)
    with open_manager(tmp_path, cfg, clock) as manager:
        lg = manager.create_log("t-0")
        fill(lg, rounds=3)
        manager.clean_once()
        clock.advance(2000)
        assert lg.delete_old_segments(clock.ms) > 0
    with open_manager(tmp_path / "only", compact_config(retention_ms=1000), clock) as manager:
        lg = manager.create_log("t-0")
        fill(lg, rounds=3)
        clock.advance(2000)
        assert lg.delete_old_segments(clock.ms) == 0  # compact alone: no time retention


def test_a_group_retention_takes_meanwhile_stops_the_clean_and_keeps_the_checkpoint(
    tmp_path: Path, monkeypatch
) -> None:
    """compact,delete: retention deleted the first segment of a group while it was being cleaned, so
    the group's swap was void, yet the checkpoint moved past the rest of the group. Its records were
    never mapped again: the value below the key's tombstone stayed, and once the tombstone's horizon
    passed the deleted key came back."""
    clock = ManualClock()
    cfg = compact_config(cleanup_policy="compact,delete", retention_ms=5_000, delete_retention_ms=10_000)
    with open_manager(tmp_path, cfg, clock) as manager:
        lg = manager.create_log("t-0")
        lg.append([ProducerRecord(key=b"x", value=b"old", timestamp=clock.ms - 10_000)])  # retention's
        lg.roll()
        lg.append([ProducerRecord(key=b"k", value=b"v")])
        lg.append([ProducerRecord(key=b"k", value=None)])
        lg.roll()

        deleted = []

        def retention_meanwhile(step: str) -> None:
            if step == "appended to 00000000000000000000.log.cleaned" and not deleted:
                deleted.append(lg.delete_old_segments(clock.ms))

        monkeypatch.setattr(segment_swap, "crash_hook", retention_meanwhile)
        result = manager.clean_once(clock.ms)
        monkeypatch.setattr(segment_swap, "crash_hook", None)
        assert deleted == [1] and lg.start_offset == 1
        checkpoint = manager.cleaner.first_dirty_offset(lg)
        for key, now in ((b"z", clock.ms), (b"y", clock.ms + 10_000)):  # the horizon set, then passed
            lg.append([ProducerRecord(key=key, value=b"1")])
            lg.roll()
            assert manager.clean_once(now) is not None
        assert b"k" not in latest_per_key(engine_records(lg))  # was (1, b"v")
        assert result is not None and result.end_offset == 0 and result.segments_out == 0
        assert checkpoint == 0


def test_the_engine_and_kafka_python_agree_after_cleaning(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(compression_type="zstd"), clock) as manager:
        lg = manager.create_log("t-0")
        fill(lg, rounds=4, tombstone_every=7)
        clean_all(manager)
        assert kafka_python_records(lg.dir) == engine_records(lg)


def test_a_compacted_log_rolls_by_max_compaction_lag(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(
        tmp_path, compact_config(segment_bytes=10**6, max_compaction_lag_ms=1000), clock
    ) as manager:
        lg = manager.create_log("t-0")
        lg.append([ProducerRecord(key=b"a", value=b"1")])
        clock.advance(1001)
        lg.append([ProducerRecord(key=b"a", value=b"2")])
        assert len(lg.segments) == 2  # segment.ms (7 days) alone would not roll


def test_a_log_stays_in_progress_until_its_checkpoint_moved(tmp_path: Path, monkeypatch) -> None:
    """Review: the log was free for the other cleaner threads before its checkpoint moved, so one of
    them could pick it up at the old checkpoint and clean the same range again."""
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(), clock) as manager:
        lg = manager.create_log("t-0")
        for i in range(4):
            lg.append([ProducerRecord(key=b"k%d" % (j % 5), value=b"v%d" % i) for j in range(20)])
            lg.roll()
        cleaner = manager.cleaner
        record = cleaner._record
        meanwhile: list[object] = []

        def another_thread_then_record(*args: object) -> None:
            if not meanwhile:
                meanwhile.append("asking")
                meanwhile[0] = manager.clean_once(clock.ms)  # what a second cleaner thread may do now
            record(*args)

        monkeypatch.setattr(cleaner, "_record", another_thread_then_record)
        assert manager.clean_once(clock.ms) is not None
        assert meanwhile == [None]


def test_a_clean_leaves_no_saved_view_totals_of_the_segments_it_replaced(tmp_path: Path) -> None:
    with open_manager(tmp_path, compact_config(segment_bytes=400), ManualClock()) as manager:
        lg = manager.create_log("t-0")
        for n in range(80):
            lg.append([ProducerRecord(key=b"k%d" % (n % 4), value=b"v%05d" % n)])
        lg.roll()
        before = len(list(lg.dir.glob(".*.totals")))
        lg.update_config(compact_config(segment_bytes=100_000))  # the clean groups them into one
        while manager.clean_once() is not None:
            pass
        lg.delete_old_segments()  # file.delete.delay.ms 0: the replaced files go
        live = {f".{s.base_offset:020d}.totals" for s in lg.segments}
        left = {p.name for p in lg.dir.glob(".*.totals")}
        assert before > len(lg.segments) and left <= live

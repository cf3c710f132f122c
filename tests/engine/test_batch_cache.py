"""BatchCache: record bounds and decoded columns of CRC-checked batches in a byte-bounded LRU."""

from __future__ import annotations

import pytest
from support.engine_helpers import config, open_log

from seglogfs.batch_cache import BatchCache
from seglogfs.errors import CorruptRecordError
from seglogfs.read_cache_budget import ReadCacheBudget
from seglogfs.records import RecordBounds, RecordColumns


def _log_of_batches(tmp_path, batches: int = 4):
    log = open_log(tmp_path / "c", config())
    for i in range(batches):
        log.append_values([b"b%d-%d" % (i, j) for j in range(10)])
    return log


def test_bounds_and_columns_are_typed_and_cached(tmp_path):
    log = _log_of_batches(tmp_path)
    segment, header = log.lookup(12)
    cache = BatchCache()
    bounds = cache.bounds(segment, header)
    columns = cache.columns(segment, header)
    assert isinstance(bounds, RecordBounds) and isinstance(columns, RecordColumns)
    assert cache.bounds(segment, header) is bounds and cache.columns(segment, header) is columns
    assert len(cache) == 2 and cache.size_bytes == bounds.nbytes + columns.data.nbytes
    assert columns.record(2).value == b"b1-2"
    cache.clear()
    assert len(cache) == 0 and cache.size_bytes == 0
    assert cache.bounds(segment, header) is not bounds
    log.close()


def test_least_recently_used_entries_go_first_beyond_max_bytes(tmp_path):
    log = _log_of_batches(tmp_path)
    located = [log.lookup(offset) for offset in (0, 10, 20, 30)]
    one = BatchCache().bounds(*located[0]).nbytes
    cache = BatchCache(max_bytes=2 * one)
    first = cache.bounds(*located[0])
    cache.bounds(*located[1])
    assert cache.bounds(*located[0]) is first  # now the most recently used
    cache.bounds(*located[2])  # evicts batch 1, not batch 0
    assert len(cache) == 2 and cache.size_bytes <= 2 * one
    assert cache.bounds(*located[0]) is first
    log.close()


def test_a_corrupt_batch_names_its_file_and_position(tmp_path):
    log = _log_of_batches(tmp_path)
    segment, header = log.lookup(20)
    with open(segment.log_path, "r+b") as f:
        f.seek(header.position + header.size - 1)
        f.write(b"\xff")
    with pytest.raises(CorruptRecordError) as caught:
        BatchCache().columns(segment, header)
    assert caught.value.position == header.position and str(segment.log_path) in str(caught.value)
    log.close()


def test_a_segment_replaced_at_the_same_base_offset_gets_its_own_entries(tmp_path):
    # Compaction swaps in a segment with the old one's base offset; a reader still on the old segment
    # list may fill the cache after the log cleared it. The new segment's batch at the same position
    # must never be answered from the old segment's entry.
    old_log, new_log = open_log(tmp_path / "a-0", config()), open_log(tmp_path / "b-0", config())
    old_log.append_values([b"old-%d" % i for i in range(10)])
    new_log.append_values([b"new-%d" % i for i in range(10)])
    (old_segment, old_header), (new_segment, new_header) = old_log.lookup(3), new_log.lookup(3)
    assert old_segment.base_offset == new_segment.base_offset and old_header.position == new_header.position
    cache = BatchCache()
    assert cache.columns(old_segment, old_header).record(3).value == b"old-3"
    assert cache.columns(new_segment, new_header).record(3).value == b"new-3"
    assert cache.bounds(old_segment, old_header) is not cache.bounds(new_segment, new_header)
    assert len(cache) == 4
    old_log.close()
    new_log.close()


def test_every_logs_caches_together_stay_within_one_budget(tmp_path, monkeypatch):
    """Each log's cache is bounded (32 MiB); thousands of logs read by offset (`tar` of a broker's
    copy) would add those bounds up. Together they stay within the process-wide budget: the caches
    that grew least recently are emptied, and their logs read on, exactly."""
    import seglogfs.batch_cache

    budget = ReadCacheBudget(max_bytes=200_000)
    monkeypatch.setattr(seglogfs.batch_cache, "READ_CACHE_BUDGET", budget)
    logs = []
    for n in range(12):
        log = open_log(tmp_path / f"many-{n}", config())
        for b in range(20):
            log.append_values([b"%d-%d-%d" % (n, b, i) for i in range(500)])
        logs.append(log)
    for _ in range(2):
        for n, log in enumerate(logs):
            for offset in range(0, 10_000, 97):
                assert log.read(offset).value == b"%d-%d-%d" % (n, offset // 500, offset % 500)
            held = sum(lg._batch_cache.size_bytes + lg._batch_cache.locator.size_bytes for lg in logs)
            assert held == budget.held_bytes  # what each cache reported is what it holds
            one = log._batch_cache.size_bytes + log._batch_cache.locator.size_bytes
            assert budget.held_bytes <= budget.max_bytes + one  # the newest cache is never emptied
    assert budget.held_bytes < 12 * one  # unbounded, every log would keep its own
    for log in logs:
        log.close()
    assert budget.held_bytes == 0

"""The cleaner's memory stays within ``log.cleaner.dedupe.buffer.size``: the offset map AND the
windows' working memory (numpy columns, batch objects, decompressed records), whatever the shape of
the batches: single-record batches, many tiny records, compressed batches that decompress to much
more than their size. Measured with tracemalloc (numpy's buffers included)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from support.cleaner_helpers import compact_config, engine_records, latest_per_key, open_manager
from support.engine_helpers import ManualClock

from seglogfs.cleaner import WINDOW_MEMORY_FACTOR, Cleaner
from seglogfs.records import ProducerRecord
from seglogfs.records.encode import KeyedValues

BUDGET = 16 << 20


def _fill(lg, shape: str) -> None:
    if shape == "single-record batches":
        for i in range(20_000):
            lg.append([ProducerRecord(key=b"k%d" % (i % 500), value=b"v")])
        return
    per, value = (5000, b"") if shape.startswith("tiny") else (1000, b"v" * 100)
    for start in range(0, 300_000 if shape.startswith("tiny") else 60_000, per):
        keys = [b"%d" % (i % 500) for i in range(start, start + per)]
        lg.append_split(KeyedValues.from_pairs(keys, [value] * per))


@pytest.mark.parametrize(
    ("shape", "codec"),
    [
        ("single-record batches", "none"),
        ("tiny records", "none"),
        ("tiny records", "zstd"),  # 5,000 records of a few bytes in a batch of a few KiB
        ("100-byte records", "gzip"),
    ],
)
def test_peak_memory_of_a_clean_is_within_the_dedupe_buffer(tmp_path: Path, shape: str, codec: str) -> None:
    cfg = compact_config(segment_bytes="64MiB", segment_index_bytes="10MiB", compression_type=codec)
    clock = ManualClock()
    with open_manager(tmp_path, cfg, clock, dedupe_buffer_size=BUDGET) as manager:
        lg = manager.create_log("t-0")
        _fill(lg, shape)
        lg.roll()
        before = latest_per_key(engine_records(lg))
        tracemalloc.start()
        try:
            result = manager.clean_once()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result is not None and not result.map_full and result.records_removed > 0
        assert latest_per_key(engine_records(lg)) == before
        assert peak <= BUDGET, f"{peak / 2**20:.1f} MiB traced over a {BUDGET >> 20} MiB budget"
        assert manager.cleaner.peak_map_bytes <= BUDGET - WINDOW_MEMORY_FACTOR * (512 << 10)


def test_the_map_gets_the_budget_less_the_windows_working_memory() -> None:
    cleaner = Cleaner(128 << 20)
    assert cleaner.window_bytes == 4 << 20  # log.cleaner.io.buffer.size, at least 4 MiB
    assert cleaner.map_memory + cleaner.window_memory == 128 << 20
    small = Cleaner(16 << 20)
    assert small.window_bytes == 512 << 10 and small.map_memory == (16 << 20) - 8 * (512 << 10)
    tiny = Cleaner(24 * 7)  # too small to hold a window beside the map: the map takes it all
    assert tiny.map_memory == 24 * 7


def test_a_compressed_dirty_section_the_budget_holds_is_cleaned_in_one_pass(tmp_path: Path) -> None:
    """The map's table was sized by the dirty bytes at 6 bytes a record, but zstd records here take
    2.5 bytes: a table for 15,000 keys in a 16 MiB budget (600,000 keys), and three passes where
    Kafka needs one. It is sized by the dirty offsets (one record an offset at most)."""
    cfg = compact_config(segment_bytes="64MiB", segment_index_bytes="10MiB", compression_type="zstd")
    with open_manager(tmp_path, cfg, ManualClock(), dedupe_buffer_size=BUDGET) as manager:
        lg = manager.create_log("t-0")
        for _ in range(2):
            for start in range(0, 20_000, 1000):
                keys = [b"user-%06d" % i for i in range(start, start + 1000)]
                lg.append_split(KeyedValues.from_pairs(keys, [b'{"name":"x","v":1}'] * 1000))
        lg.roll()
        assert lg.size_bytes < 6 * lg.end_offset
        result = manager.clean_once()
        assert result is not None and not result.map_full and result.end_offset == 40_000
        assert [r.offset for r in lg.iter_records()] == list(range(20_000, 40_000))
        assert manager.clean_once() is None

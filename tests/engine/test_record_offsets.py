"""seglogfs.record_offsets and seglogfs.views.offset_listing: the offsets of a log that hold a user
record, checked against kafka-python reading the same files (gaps inside batches, an emptied batch,
gaps between batches)."""

from __future__ import annotations

from pathlib import Path

from support.cleaner_helpers import compact_config, kafka_python_records, open_manager
from support.compacted_segments import SURVIVORS, write_compacted_log
from support.engine_helpers import ManualClock, config

from seglogfs.log import Log
from seglogfs.record_offsets import existing_offsets, record_count
from seglogfs.records import ProducerRecord
from seglogfs.views.offset_listing import newest_offsets


def flat(runs: list[range]) -> list[int]:
    return [offset for run in runs for offset in run]


def test_gaps_inside_and_between_batches_as_kafka_python_reads_them(tmp_path: Path) -> None:
    write_compacted_log(tmp_path / "c-0")
    with Log.open(tmp_path / "c-0", compact_config()) as lg:
        expected = [offset for offset, _, _ in kafka_python_records(lg.dir)]
        assert expected == [offset for offset, _, _ in SURVIVORS]
        assert flat(existing_offsets(lg)) == expected
        assert flat(existing_offsets(lg, 4, 14)) == [4, 9, 13]
        assert flat(existing_offsets(lg, 5, 9)) == []
        assert newest_offsets(lg, 2) == [range(13, 14), range(24, 25)]
        assert flat(newest_offsets(lg, 100)) == expected
        assert record_count(lg) == lg.info()["records"] == len(expected)  # not end - start (25)


def test_a_cleaned_log_lists_exactly_the_surviving_offsets(tmp_path: Path) -> None:
    clock = ManualClock()
    with open_manager(tmp_path, compact_config(), clock) as manager:
        lg = manager.create_log("t-0")
        for n in range(300):
            lg.append([ProducerRecord(key=b"k%d" % (n % 7), value=b"v%d" % n)])
            if n % 40 == 39:
                lg.roll()
        while manager.clean_once() is not None:
            pass
        survivors = [offset for offset, _, _ in kafka_python_records(lg.dir)]
        assert len(survivors) < 300 - 200, "the cleaner removed too little for a test of gaps"
        assert flat(existing_offsets(lg)) == survivors == [r.offset for r in lg.iter_records()]
        for limit in (1, 5, 8, len(survivors), 10_000):
            assert flat(newest_offsets(lg, limit)) == survivors[-limit:], limit
        assert lg.info()["records"] == len(survivors) == record_count(lg)  # sealed counts cached: again


def test_a_log_that_is_not_compacted_is_one_range(tmp_path: Path) -> None:
    with Log.open(tmp_path / "d-0", config(segment_bytes=300), create=True) as lg:
        for n in range(50):
            lg.append_values([b"v%d" % n])
        assert newest_offsets(lg, 10) == [range(40, 50)]
        assert existing_offsets(lg, 3, 47) == [range(3, 47)]
        assert newest_offsets(lg, 0) == []
        assert lg.info()["records"] == 50

"""A clean on a full disk (a small tmpfs, as tests/engine/test_disk_full.py uses): ENOSPC while the
``.cleaned`` segment is written fails the clean cleanly. The log keeps exactly its records and
files (no ``.cleaned`` left), the log is NOT marked uncleanable (a full disk is not the log's
fault), and once there is room again the next round cleans it."""

from __future__ import annotations

import logging
from pathlib import Path

from support.cleaner_helpers import (
    assert_verifies,
    compact_config,
    engine_records,
    latest_per_key,
    open_manager,
)
from support.engine_helpers import ManualClock
from test_disk_full import Filler, small_tmpfs

from seglogfs.records import ProducerRecord


def test_enospc_during_the_clean_leaves_the_log_intact_and_is_retried(tmp_path: Path, caplog) -> None:
    with small_tmpfs(tmp_path / "disk", "4M") as disk:
        clock = ManualClock()
        cfg = compact_config(segment_bytes="256KiB", segment_index_bytes="64KiB")
        data = disk / "data"
        with open_manager(data, cfg, clock) as manager:
            lg = manager.create_log("t-0")
            for i in range(60):
                lg.append([ProducerRecord(key=b"k%d" % (j % 50), value=b"v%d-" % i * 40) for j in range(50)])
            lg.roll()
            lg.flush()
            before = engine_records(lg)
            files = sorted(p.name for p in lg.dir.iterdir())
            filler = Filler(disk / "filler")
            filler.fill()
            with caplog.at_level(logging.WARNING, logger="seglogfs.cleaner"):
                assert manager.clean_once() is None
            assert "No space left on device" in caplog.text and "will retry" in caplog.text
            assert engine_records(lg) == before
            assert sorted(p.name for p in lg.dir.iterdir()) == files
            state = manager.cleaner_state("t-0")
            assert state["uncleanable"] is None and state["cleanable"]
            filler.close()
            result = manager.clean_once()
            assert result is not None and result.records_removed > 0
            assert latest_per_key(engine_records(lg)) == latest_per_key(before)
        assert_verifies(data / "t-0")


def test_a_checkpoint_that_cannot_be_written_is_a_warning_and_the_next_clean_writes_it(
    tmp_path: Path, caplog, monkeypatch
) -> None:
    """ENOSPC on ``cleaner-offset-checkpoint`` after a clean that was swapped in: a warning and the
    log's ``last_error``, not a cleaner failure; the log stays cleanable and the next write saves it."""
    import seglogfs.log_cleaner as log_cleaner

    clock = ManualClock()
    cfg = compact_config(segment_bytes="64KiB")
    data = tmp_path / "data"
    real_write = log_cleaner.write_offset_checkpoint

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with open_manager(data, cfg, clock) as manager:
        lg = manager.create_log("t-0")
        for i in range(20):
            lg.append([ProducerRecord(key=b"k%d" % (j % 10), value=b"v%d" % i * 40) for j in range(50)])
        lg.roll()
        monkeypatch.setattr(log_cleaner, "write_offset_checkpoint", full_disk)
        with caplog.at_level(logging.WARNING, logger="seglogfs.cleaner"):
            result = manager.clean_once()
        assert result is not None and result.records_removed > 0
        assert "could not write cleaner-offset-checkpoint" in caplog.text
        state = manager.cleaner_state("t-0")
        assert state["uncleanable"] is None and "No space left" in state["last_error"]
        latest = {key: value for key, (_, value) in latest_per_key(engine_records(lg)).items()}
        assert latest == {b"k%d" % j: b"v19" * 40 for j in range(10)}
        monkeypatch.setattr(log_cleaner, "write_offset_checkpoint", real_write)
        for i in range(20):
            lg.append([ProducerRecord(key=b"k%d" % (j % 10), value=b"w%d" % i) for j in range(50)])
        lg.roll()
        assert manager.clean_once() is not None
        assert (data / "cleaner-offset-checkpoint").read_text() == "0\n1\nt 0 2000\n"
    assert_verifies(data)

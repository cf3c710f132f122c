"""A batch the cleaner rebuilds never exceeds max.message.bytes. Setting a tombstone's delete horizon
makes the horizon the batch's baseTimestamp, so every record's timestampDelta grows from one varint
byte to five or so: a batch of many small records near the limit would grow past it (Kafka only
warns then). seglogfs leaves such a batch without a horizon (its tombstone stays, never a record
lost) and logs it; every batch it writes stays within the limit, and kafka-python reads them."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
from support.cleaner_helpers import compact_config, engine_records, kafka_python_records, open_manager
from support.engine_helpers import ManualClock

from seglogfs.records import ProducerRecord, iter_batch_headers

LIMIT = 4000


def _batches(log_dir: Path) -> list:
    out = []
    for path in sorted(log_dir.glob("*.log")):
        data = path.read_bytes()
        out.extend(iter_batch_headers(data, 0, len(data)))
    return out


@pytest.mark.parametrize("codec", ["none", "lz4"])
@pytest.mark.parametrize("drop", [False, True])
def test_a_rebuilt_batch_stays_within_max_message_bytes(
    tmp_path: Path, codec: str, drop: bool, caplog
) -> None:
    cfg = compact_config(max_message_bytes=LIMIT, segment_bytes="1MiB", compression_type=codec)
    clock = ManualClock()
    with open_manager(tmp_path, cfg, clock) as manager:
        lg = manager.create_log("t-0")
        rnd = random.Random(7)  # values lz4 cannot shrink much
        records = [ProducerRecord(key=b"%03d" % i, value=rnd.randbytes(3) if i else None) for i in range(600)]
        while True:  # as many records as fit one batch: it ends up near the limit
            try:
                lg.append(records)
                break
            except Exception:
                records = records[:-10]
        if drop:  # a later record of key 399 makes the first batch lose one record
            lg.append([ProducerRecord(key=records[-1].key, value=b"later")])
        lg.roll()
        assert _batches(lg.dir)[0].size > LIMIT - 120
        before = engine_records(lg)
        with caplog.at_level(logging.WARNING, logger="seglogfs.cleaner"):
            assert manager.clean_once() is not None
        assert all(h.size <= LIMIT for h in _batches(lg.dir)), [h.size for h in _batches(lg.dir)]
        after = engine_records(lg)
        assert (0, b"000", None) in after  # the tombstone stays: no horizon could be set
        expected = [r for r in before if not (drop and r[1] == records[-1].key and r[2] != b"later")]
        assert after == expected
        assert kafka_python_records(lg.dir) == after
        assert "max.message.bytes" in caplog.text or codec != "none"

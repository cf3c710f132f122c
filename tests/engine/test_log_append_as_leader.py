"""Log.append_as_leader: a Kafka client's batch checked whole, placed at the log end with its records
as sent, idempotent producers' retries, gaps and fencing; DeleteRecords; the on_append hook.
Batches come from kafka-python's builder (tests/support/producer_batches.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.engine_helpers import config, open_log
from support.producer_batches import NOW, data_batch

from seglogfs.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RecordTooLargeError,
)
from seglogfs.log_manager import LogManager
from seglogfs.records import TimestampType, read_batch_header, validate_batch


def test_batches_are_placed_at_the_end_with_their_records_as_sent(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_values([b"from-the-mount"])
    for codec in (0, 1, 2, 3, 4):  # none, gzip, snappy, lz4, zstd
        sent = data_batch(0, count=3, codec=codec)
        info = log.append_as_leader(sent)
        segment, header = log.lookup(info.first_offset)
        stored = segment.read(header.position, header.size)
        assert (info.first_offset, info.last_offset) == (header.base_offset, header.last_offset)
        assert stored[16:] == sent[16:]  # only the base offset and the leader epoch are the log's
        assert header.compression == codec
        assert [r.value for r in log.iter_records(info.first_offset, info.last_offset + 1)] == [
            b"value-%d" % i * 8 for i in range(3)
        ]
    assert log.end_offset == 1 + 5 * 3
    log.close()


def test_log_append_time_is_stamped_with_a_new_crc(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(data_batch(0, count=2, ts=NOW - 10**9))
    segment, header = log.lookup(info.first_offset)
    stored = segment.read(header.position, header.size)
    validate_batch(stored, read_batch_header(stored, 0))
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp > NOW - 10**9
    assert log.read(info.first_offset).timestamp == header.max_timestamp
    log.close()


def test_what_a_leader_refuses_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", config(max_message_bytes=2000))
    good = data_batch(0, count=2)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    not_v2 = bytearray(good)
    not_v2[16] = 1
    refused = {
        bytes(bad_crc): CorruptRecordError,
        good[:-5]: CorruptRecordError,
        good + good: InvalidRecordError,
        data_batch(0, 4242, 0, 0, txn=True): InvalidRecordError,
        data_batch(0, count=40): RecordTooLargeError,
        bytes(not_v2): InvalidRecordError,
    }
    for batch, error in refused.items():
        with pytest.raises(error):
            log.append_as_leader(batch)
    assert log.end_offset == 0 and log.size_bytes == 0
    log.close()


def test_idempotent_producers(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = data_batch(0, 7, 0, 0, count=2)
    assert log.append_as_leader(first).first_offset == 0
    for seq in (2, 4, 6, 8, 10):
        log.append_as_leader(data_batch(0, 7, 0, seq, count=2))
    assert log.end_offset == 12
    retried = log.append_as_leader(data_batch(0, 7, 0, 4, count=2))  # among its last five
    assert (retried.first_offset, retried.last_offset, log.end_offset) == (4, 5, 12)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(data_batch(0, 7, 0, 20))
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(data_batch(0, 7, 1, 5))  # a new epoch starts at 0
    assert log.append_as_leader(data_batch(0, 7, 1, 0)).first_offset == 12
    with pytest.raises(ProducerFencedError):
        log.append_as_leader(data_batch(0, 7, 0, 12))
    assert log.append_as_leader(data_batch(0, 8, 0, 99)).first_offset == 13  # unknown: any sequence
    log.close()
    reopened = open_log(tmp_path / "t-0")  # the state from the close's snapshot
    again = reopened.append_as_leader(data_batch(0, 7, 1, 0))
    assert (again.first_offset, reopened.end_offset) == (12, 14)
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append_as_leader(data_batch(0, 7, 1, 3))
    reopened.close()


def test_delete_records_and_the_append_hook(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []
    with LogManager(tmp_path, config(segment_bytes=200)) as manager:
        manager.on_append = lambda lg: seen.append((lg.name, lg.end_offset))
        log = manager.create_log("t-0")
        for _ in range(10):
            log.append_values([b"x" * 50])
        log.append_as_leader(data_batch(0, count=2))
        assert seen[-1] == ("t-0", 12) and len(seen) == 11
        assert log.delete_records_before(7) == 7
        assert log.start_offset == 7 and log.segments[0].base_offset <= 7
        assert log.delete_records_before(3) == 7  # never down
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_records_before(13)
        assert log.delete_records_before(-1) == 12


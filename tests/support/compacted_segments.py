"""A segment as Kafka's cleaner leaves it, for the verifier and dump tests: offset gaps inside and
between batches, a batch emptied to no record but kept for its offsets, and a tombstone batch carrying
the delete horizon (attribute bit 0x40, baseTimestamp = the horizon, not a record's time). Batches
come from kafka-python's builder and from records written by hand from the spec."""

from __future__ import annotations

import struct
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from support.record_batches import NOW, raw_record, raw_v2_batch
from support.verify_fixtures import SEG, batches_of, build_indexes

DELETE_HORIZON = NOW + 86_400_000  # a tombstone cleaned at NOW + 20 with delete.retention.ms 1 d
#: (offset, key, value) of every record left, in order
SURVIVORS = [(0, b"a", b"1"), (4, b"b", b"2"), (9, b"c", b"3"), (13, b"d", b"4"), (24, b"a", None)]


def kafka_python_batch(base_offset: int, rows: list[tuple[int, bytes, bytes | None]], ts: int) -> bytes:
    """A v2 batch from kafka-python's builder whose records sit at the given offset deltas."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for delta, key, value in rows:
        builder.append(delta, ts + delta, key, value, [])
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)  # baseOffset is outside the CRC
    return bytes(batch)


def compacted_log_bytes() -> bytes:
    """Four batches: 0..9 holding 0, 4, 9 (kafka-python); 12..13 holding 13 (its first record
    dropped); 20..23 holding none; 24 holding a tombstone, with the delete horizon."""
    first = kafka_python_batch(0, [(0, b"a", b"1"), (4, b"b", b"2"), (9, b"c", b"3")], NOW)
    second = raw_v2_batch(raw_record(1, 0, b"d", b"4"), 1, base_offset=12, last_delta=1,
                          base_ts=NOW + 10, max_ts=NOW + 10)
    emptied = raw_v2_batch(b"", 0, base_offset=20, last_delta=3, base_ts=NOW + 11, max_ts=NOW + 11)
    # the record keeps its own time: its delta is taken from the horizon, so it is negative
    tombstone = raw_record(0, NOW + 20 - DELETE_HORIZON, b"a", None)
    horizon = raw_v2_batch(tombstone, 1, base_offset=24, attributes=0x40, base_ts=DELETE_HORIZON,
                           max_ts=NOW + 20)
    return first + second + emptied + horizon


def write_compacted_log(log_dir: Path, data: bytes | None = None) -> Path:
    """``log_dir`` holding one segment of ``data`` (default :func:`compacted_log_bytes`), its indexes
    built by Kafka's per-batch rule with an entry per batch; returns the ``.log`` path."""
    data = compacted_log_bytes() if data is None else data
    log_dir.mkdir(parents=True, exist_ok=True)
    index, timeindex = build_indexes(batches_of(data), 0, interval=0)
    (log_dir / f"{SEG}.log").write_bytes(data)
    (log_dir / f"{SEG}.index").write_bytes(index)
    (log_dir / f"{SEG}.timeindex").write_bytes(timeindex)
    return log_dir / f"{SEG}.log"

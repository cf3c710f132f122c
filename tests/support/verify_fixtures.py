"""Segments for the verifier's tests: copies of the Kafka test data, and logs whose indexes are built
by Kafka's per-batch rule (kafka-python parses the batches)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

from kafka.record import MemoryRecords

from support.testdata import KAFKA_LOG_DIR

TESTDATA = KAFKA_LOG_DIR
SEG = "00000000000000000000"


def writable_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            os.chmod(Path(root) / name, 0o755 if name in dirs else 0o644)
    return dst


def batches_of(data: bytes) -> list[tuple[int, int, int, int]]:
    """(position, size, lastOffset, maxTimestamp) per batch, parsed by kafka-python."""
    out = []
    records = MemoryRecords(data)
    pos = 0
    while records.has_next():
        b = records.next_batch()
        out.append((pos, b.size_in_bytes, b.last_offset, b.max_timestamp))
        pos += b.size_in_bytes
    return out


def build_indexes(batches, base: int, interval: int = 4096, final_entry: bool = True) -> tuple[bytes, bytes]:
    """.index and .timeindex bytes by Kafka's per-batch rule (docs/kafka-format.md section 3)."""
    index, timeindex = bytearray(), bytearray()
    since = 0
    max_ts, max_ts_offset = -1, base
    last_time_ts = -1
    for pos, size, last_offset, ts in batches:
        if ts > max_ts:
            max_ts, max_ts_offset = ts, last_offset
        if since > interval:
            index += struct.pack(">ii", last_offset - base, pos)
            if max_ts > last_time_ts:
                timeindex += struct.pack(">qi", max_ts, max_ts_offset - base)
                last_time_ts = max_ts
            since = 0
        since += size
    if final_entry and max_ts > last_time_ts:  # written on roll / close
        timeindex += struct.pack(">qi", max_ts, max_ts_offset - base)
    return bytes(index), bytes(timeindex)


def build_two_segments(tmp_path: Path) -> Path:
    """The consumer-offsets log split into an inactive and an active segment, indexes by Kafka's rule."""
    src = (TESTDATA / "__consumer_offsets-15" / f"{SEG}.log").read_bytes()
    batches = batches_of(src)
    cut = len(batches) // 2
    part = tmp_path / "events-0"
    part.mkdir()
    first = batches[:cut]
    second_base = first[-1][2] + 1
    split = batches[cut][0]
    second = [(p - split, s, o, t) for p, s, o, t in batches[cut:]]
    for base, chunk, data, final in (
        (0, first, src[:split], True),
        (second_base, second, src[split:], False),
    ):
        name = f"{base:020d}"
        (part / f"{name}.log").write_bytes(data)
        index, timeindex = build_indexes(chunk, base, interval=1024, final_entry=final)
        (part / f"{name}.index").write_bytes(index)
        (part / f"{name}.timeindex").write_bytes(timeindex)
    return part

"""Single v2 batches for producer-state tests: data batches from kafka-python's builder, control batches
(well-formed markers, KRaft types, malformed keys and values) from the same builder with the 0x20
attribute set and the CRC-32C recomputed; kafka-python reads them back (test_producer_state checks)."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatchBuilder

from seglogfs.producer_state import CompletedTxn, ProducerStateManager
from seglogfs.records import V2_HEADER_SIZE, BatchHeader, iter_batch_headers, read_batch_header
from seglogfs.records.batch_header import stamp_v2_crc

ABORT, COMMIT = 0, 1
LEADER_CHANGE = 2
NOW = 1_700_000_000_000


def _finish(buf: bytearray, base_offset: int, control: bool = False) -> bytes:
    """Place a built batch at ``base_offset`` (not covered by the CRC); for a control batch set the
    0x20 attribute bit and recompute the CRC."""
    struct.pack_into(">q", buf, 0, base_offset)
    if control:
        (attributes,) = struct.unpack_from(">h", buf, 21)
        struct.pack_into(">h", buf, 21, attributes | 0x20)
        header = bytearray(buf[:V2_HEADER_SIZE])
        stamp_v2_crc(header, bytes(buf[V2_HEADER_SIZE:]))
        buf[:V2_HEADER_SIZE] = header
    return bytes(buf)


def data_batch(
    base_offset: int,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    *,
    count: int = 1,
    txn: bool = False,
    ts: int = NOW,
    codec: int = 0,
) -> bytes:
    """``count`` records of producer ``pid`` at ``base_offset`` (timestamps ts, ts + 1...)."""
    builder = DefaultRecordBatchBuilder(2, codec, txn, pid, epoch, seq, 1 << 20)
    for i in range(count):
        builder.append(i, ts + i, None, b"value-%d" % (base_offset + i) * 8, [])
    return _finish(builder.build(), base_offset)


def control_batch(
    offset: int,
    pid: int,
    epoch: int = 0,
    control_type: int = COMMIT,
    coordinator_epoch: int = 7,
    *,
    ts: int = NOW,
    key: bytes | None = b"",
    value: bytes | None = b"",
    records: int = 1,
) -> bytes:
    """A control batch as a transaction coordinator writes it; ``key`` / ``value`` override the
    marker's (b"" = the well-formed one)."""
    if key == b"":
        key = struct.pack(">hh", 0, control_type)
    if value == b"":
        value = struct.pack(">hi", 0, coordinator_epoch)
    builder = DefaultRecordBatchBuilder(2, 0, True, pid, epoch, -1, 1 << 20)
    for i in range(records):
        builder.append(i, ts, key, value, [])
    return _finish(builder.build(), offset, control=True)


def headers_of(log: bytes) -> list[tuple[BatchHeader, memoryview]]:
    """Every batch of ``log`` with its bytes, as ``replay`` takes them."""
    view = memoryview(log)
    return [(h, view[h.position : h.end_position]) for h in iter_batch_headers(log)]


def header(batch: bytes) -> BatchHeader:
    """The header of a single batch."""
    found = read_batch_header(batch, 0)
    assert found is not None
    return found


def replay(manager: ProducerStateManager, *batches: bytes) -> list[tuple[CompletedTxn, int]]:
    """``manager.replay`` of the log made of ``batches``."""
    return manager.replay(headers_of(b"".join(batches)))

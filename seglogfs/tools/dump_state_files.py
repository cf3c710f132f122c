"""``seglogfs dump`` of the small state files: producer snapshots (``.snapshot``), transaction indexes
(``.txnindex``), and the text checkpoints of a data dir and a log dir, which kafka-dump-log.sh ignores
(see :mod:`seglogfs.tools.dump`)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TextIO

from crc32c import crc32c

from seglogfs.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from seglogfs.log_files import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)

__all__ = [
    "INT_MAX",
    "OFFSET_CHECKPOINTS",
    "dump_leader_epoch_checkpoint",
    "dump_offset_checkpoint",
    "dump_producer_snapshot",
    "dump_txn_index",
]

INT_MAX = 2**31 - 1  # Java's Integer.MAX_VALUE
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc32c, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes, docs/kafka-format.md section 5.4
_TXN_ENTRY = struct.Struct(">hqqqq")  # 34 bytes, docs/kafka-format.md section 8.6
#: a data dir's text checkpoints of (topic, partition) -> offset, docs/kafka-format.md section 5.1
OFFSET_CHECKPOINTS = (
    CLEANER_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)


def _optional(value: int) -> str:
    return "OptionalLong.empty" if value < 0 else f"OptionalLong[{value}]"


def dump_producer_snapshot(path: Path, out: TextIO, err: TextIO) -> None:
    data = path.read_bytes()
    if len(data) < _SNAPSHOT_HEAD.size:
        err.write(f"Snapshot {path} is truncated: {len(data)} bytes\n")
        return
    version, stored_crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    computed = crc32c(data[6:])
    if stored_crc != computed:
        err.write(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored_crc}. "
            f"Computed crc: {computed}\n"
        )
        return
    if version != 1 or count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        err.write(f"Snapshot {path} has version {version} and {count} entries in {len(data)} bytes\n")
        return
    for i in range(count):
        pid, epoch, last_seq, last_offset, offset_delta, timestamp, coord_epoch, txn_first = (
            _SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size)
        )
        out.write(
            f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coord_epoch} "
            f"currentTxnFirstOffset: {_optional(txn_first)} lastTimestamp: {timestamp} "
        )
        if last_offset >= 0:  # Kafka keeps a last batch (and prints it) only for lastOffset >= 0
            wrapped = INT_MAX - (offset_delta - last_seq) + 1
            first_seq = last_seq - offset_delta if last_seq >= offset_delta else wrapped
            out.write(
                f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_offset} "
                f"offsetDelta: {offset_delta} timestamp: {timestamp}"
            )
        out.write("\n")


def dump_txn_index(path: Path, out: TextIO) -> None:
    data = path.read_bytes()
    for pos in range(0, len(data) - _TXN_ENTRY.size + 1, _TXN_ENTRY.size):
        version, pid, first, last, lso = _TXN_ENTRY.unpack_from(data, pos)
        out.write(
            f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
            f"lastStableOffset: {lso}\n"
        )


def dump_offset_checkpoint(path: Path, out: TextIO) -> None:
    entries = read_offset_checkpoint(path)
    out.write(f"Offset checkpoint {path.name}: {len(entries)} entries\n")
    for (topic, partition), offset in entries.items():
        out.write(f"topic: {topic} partition: {partition} offset: {offset}\n")


def dump_leader_epoch_checkpoint(path: Path, out: TextIO) -> None:
    entries = read_leader_epoch_checkpoint(path)
    out.write(f"Leader epoch checkpoint: {len(entries)} entries\n")
    for epoch, start_offset in entries:
        out.write(f"epoch: {epoch} startOffset: {start_offset}\n")

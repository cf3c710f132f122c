"""Helpers for the log cleaner tests: a data dir with compacted logs, kafka-python's view of a log
directory's files, and the table a model of keyed appends expects."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from kafka.record import MemoryRecords
from kafka.record.default_records import ControlRecord

from seglogfs.cleaner_config import CleanerConfig
from seglogfs.config import LogConfig
from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.verifier import verify_paths
from support.consumer_walk import committed_batches

COMPACT = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0,
    "segment.bytes": 700,
    "index.interval.bytes": 120,
    "segment.index.bytes": 1200,
    "delete.retention.ms": 10_000,
    "file.delete.delay.ms": 0,
}


def compact_config(**overrides: object) -> LogConfig:
    """A compacted log's config: small segments, every dirty byte cleanable; Kafka names with '_'."""
    return LogConfig.from_mapping({**COMPACT, **{k.replace("_", "."): v for k, v in overrides.items()}})


def open_manager(data_dir: Path, cfg: LogConfig, clock, **cleaner: object) -> LogManager:
    cleaner_cfg = CleanerConfig(**cleaner) if cleaner else CleanerConfig()  # type: ignore[arg-type]
    return LogManager(data_dir, cfg, clock=clock, cleaner_config=cleaner_cfg)


def kafka_python_records(log_dir: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every user record kafka-python reads from the directory's .log files,
    every batch CRC-checked."""
    out = []
    for path in sorted(log_dir.glob("*.log")):
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc(), f"kafka-python rejects a batch of {path}"
            out.extend((r.offset, r.key, r.value) for r in batch if not isinstance(r, ControlRecord))
    return out


@dataclass(frozen=True, slots=True)
class KafkaPythonBatch:
    """What the read_committed walk asks of a batch kafka-python read."""

    base_offset: int
    last_offset: int
    producer_id: int
    is_control: bool
    is_transactional: bool


@dataclass(frozen=True, slots=True)
class TxnIndexEntry:
    producer_id: int
    first_offset: int


def kafka_python_committed_records(log_dir: Path, last_stable_offset: int) -> list[tuple]:
    """(offset, key, value) of the user records a read_committed consumer sees, from kafka-python's
    reading of the .log files and the .txnindex entries read by hand (34 bytes: version, producerId,
    firstOffset, lastOffset, lastStableOffset)."""
    aborted = []
    for path in sorted(log_dir.glob("*.txnindex")):
        data = path.read_bytes()
        for at in range(0, len(data) - len(data) % 34, 34):
            _, pid, first, _, _ = struct.unpack_from(">hqqqq", data, at)
            aborted.append(TxnIndexEntry(pid, first))
    batches = []
    for path in sorted(log_dir.glob("*.log")):
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            header = KafkaPythonBatch(
                batch.base_offset,
                batch.base_offset + batch.last_offset_delta,
                batch.producer_id,
                batch.is_control_batch,
                batch.is_transactional,
            )
            batches.append((header, list(batch)))

    def marker_type(header: KafkaPythonBatch, records: list) -> int | None:
        return records[0].type if records else None

    out = []
    for _, records in committed_batches(batches, aborted, last_stable_offset, marker_type):  # type: ignore[arg-type]
        out += [(r.offset, r.key, r.value) for r in records if r.offset < last_stable_offset]
    return out


def engine_records(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in lg.iter_records()]


def latest_per_key(records: list[tuple[int, bytes | None, bytes | None]]) -> dict:
    table: dict = {}
    for offset, key, value in records:
        table[key] = (offset, value)
    return table


def assert_table_holds(lg: Log, model: dict[bytes, tuple[int, bytes | None]]) -> None:
    """Whatever the cleaner did so far, every key reads as its latest append: its latest record, or
    nothing at all once its tombstone is gone."""
    table = latest_per_key(engine_records(lg))
    for key, (offset, value) in model.items():
        if value is None:
            assert table.get(key) in (None, (offset, None)), key
        else:
            assert table.get(key) == (offset, value), key
    assert set(table) <= set(model)


def assert_verifies(path: Path) -> None:
    report = verify_paths([path], decode_records=True)
    assert report.ok, [str(p) for p in report.problems]

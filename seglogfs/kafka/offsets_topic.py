"""Committed offsets as Kafka stores them: records of the compacted ``__consumer_offsets-<n>`` logs,
key ``OffsetCommitKey`` (group, topic, partition), value ``OffsetCommitValue`` (offset, leader epoch,
metadata, commit timestamp) in the versions Kafka 4 writes, a null value deleting it (the codec is
the engine's :mod:`seglogfs.consumer_offsets`); the group's partition is Kafka's
``abs(groupId.hashCode()) % 50``. Read back at start (value versions 0-4)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from seglogfs.config import LogConfig
from seglogfs.consumer_offsets import (
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsDecodeError,
    UnknownRecordTypeError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from seglogfs.errors import SeglogError
from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord

__all__ = ["OFFSETS_TOPIC", "Committed", "OffsetStore", "offsets_partition"]

log = logging.getLogger("seglogfs.kafka")

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions
_OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 104_857_600}  # offsets.topic.segment.bytes


@dataclass(frozen=True, slots=True)
class Committed:
    """One committed offset."""

    offset: int
    leader_epoch: int
    metadata: str
    timestamp: int


def offsets_partition(group: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions`` (Java's String.hashCode over UTF-16)."""
    h = 0
    units = group.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def commit_key(group: str, topic: str, partition: int) -> bytes:
    """``OffsetCommitKey`` v1."""
    return encode_key(OffsetCommitKey(group, topic, partition))


def commit_value(committed: Committed) -> bytes:
    """``OffsetCommitValue`` in the version Kafka 4 writes."""
    return encode_value(OffsetCommitValue(
        committed.offset, committed.metadata, committed.timestamp, committed.leader_epoch))


def parse_commit(key: bytes, value: bytes | None) -> tuple[tuple[str, str, int], Committed | None] | None:
    """(group, topic, partition) and the committed offset (None: deleted) of an offsets record, None
    for other records (group metadata, KIP-848 records); OffsetsDecodeError for a damaged one."""
    try:
        decoded = decode_key(key)
    except UnknownRecordTypeError:
        return None
    if not isinstance(decoded, OffsetCommitKey):
        return None
    where = (decoded.group, decoded.topic, decoded.partition)
    stored = decode_value(decoded, value)
    if stored is None:
        return where, None
    assert isinstance(stored, OffsetCommitValue)
    return where, Committed(stored.offset, stored.leader_epoch, stored.metadata, stored.commit_timestamp)


class OffsetStore:
    """Every group's committed offsets, in memory and in the ``__consumer_offsets`` logs."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.offsets: dict[str, dict[tuple[str, int], Committed]] = {}
        self.apply_configs()
        self._load()

    def _config(self) -> LogConfig:
        return LogConfig.from_mapping(_OFFSETS_CONFIG, self.manager.default_config)

    def apply_configs(self) -> None:
        """Give the offsets logs their compact policy unless the YAML configures them (at start and
        after a reload, which resets every log to the YAML's settings)."""
        for name, log_obj in self.manager.logs.items():
            if log_obj.topic == OFFSETS_TOPIC and name not in self.manager.log_configs:
                config = self._config()
                self.manager.log_configs[name] = config
                log_obj.update_config(config)

    def _load(self) -> None:
        for log_obj in self.manager.logs.values():
            if log_obj.topic != OFFSETS_TOPIC:
                continue
            try:
                for record in log_obj.iter_records():
                    if record.key is None:
                        continue
                    try:
                        parsed = parse_commit(record.key, record.value)
                    except OffsetsDecodeError as exc:
                        log.warning("%s: offset %d: not an offset commit Kafka writes: %s",
                                    log_obj.name, record.offset, exc)
                        continue
                    if parsed is None:
                        continue
                    (group, topic, partition), committed = parsed
                    offsets = self.offsets.setdefault(group, {})
                    if committed is None:
                        offsets.pop((topic, partition), None)
                    else:
                        offsets[(topic, partition)] = committed
            except (SeglogError, OSError) as exc:
                log.error("%s: committed offsets read up to a damaged record: %s", log_obj.name, exc)

    def _log(self, group: str) -> Log:
        name = f"{OFFSETS_TOPIC}-{offsets_partition(group)}"
        try:
            return self.manager.get(name)
        except KeyError:
            return self.manager.create_log(name, self._config())

    def commit(self, group: str, entries: dict[tuple[str, int], Committed]) -> None:
        """Store ``entries`` of ``group`` (one batch in its offsets log, then in memory)."""
        if not entries:
            return
        records = [
            ProducerRecord(commit_value(committed), key=commit_key(group, topic, partition))
            for (topic, partition), committed in entries.items()
        ]
        self._log(group).append(records)
        self.offsets.setdefault(group, {}).update(entries)

    def committed(self, group: str) -> dict[tuple[str, int], Committed]:
        """``group``'s committed offsets by (topic, partition)."""
        return self.offsets.get(group, {})


def now_ms() -> int:
    return int(time.time() * 1000)

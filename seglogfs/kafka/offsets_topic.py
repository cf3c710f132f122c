"""Committed offsets as Kafka stores them: records of the compacted ``__consumer_offsets-<n>`` logs,
key ``OffsetCommitKey`` v1 (group, topic, partition), value ``OffsetCommitValue`` v3 (offset, leader
epoch, metadata, commit timestamp), a null value deleting it; the group's partition is Kafka's
``abs(groupId.hashCode()) % 50``. Read back at start (value versions 0-4: Kafka 4 writes the flexible
v4)."""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass

from seglogfs.config import LogConfig
from seglogfs.errors import SeglogError
from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord

__all__ = ["OFFSETS_TOPIC", "Committed", "OffsetStore", "offsets_partition"]

log = logging.getLogger("seglogfs.kafka")

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions
_OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 104_857_600}  # offsets.topic.segment.bytes
_KEY_VERSION, _VALUE_VERSION = 1, 3


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


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def commit_key(group: str, topic: str, partition: int) -> bytes:
    """``OffsetCommitKey`` v1."""
    return struct.pack(">h", _KEY_VERSION) + _string(group) + _string(topic) + struct.pack(">i", partition)


def commit_value(committed: Committed) -> bytes:
    """``OffsetCommitValue`` v3."""
    return (struct.pack(">hqi", _VALUE_VERSION, committed.offset, committed.leader_epoch)
            + _string(committed.metadata) + struct.pack(">q", committed.timestamp))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_string(self) -> str:
        size = self.uvarint() - 1
        text = self.data[self.at : self.at + max(size, 0)].decode("utf-8", "replace")
        self.at += max(size, 0)
        return text

    def string(self) -> str:
        size = self.take(">h")
        text = self.data[self.at : self.at + max(size, 0)].decode("utf-8", "replace")
        self.at += max(size, 0)
        return text


def parse_commit(key: bytes, value: bytes | None) -> tuple[tuple[str, str, int], Committed | None] | None:
    """(group, topic, partition) and the committed offset (None: deleted) of an offsets record, None
    for other records (group metadata)."""
    reader = _Reader(key)
    if reader.take(">h") not in (0, 1):
        return None
    where = (reader.string(), reader.string(), reader.take(">i"))
    if value is None:
        return where, None
    reader = _Reader(value)
    version = reader.take(">h")
    if not 0 <= version <= 4:
        raise ValueError(f"OffsetCommitValue version {version}")
    offset = reader.take(">q")
    epoch = reader.take(">i") if version >= 3 else -1
    metadata = reader.compact_string() if version >= 4 else reader.string()  # 4: flexible
    timestamp = reader.take(">q")
    return where, Committed(offset, epoch, metadata, timestamp)


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
                    except (ValueError, IndexError, struct.error) as exc:
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

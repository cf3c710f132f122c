"""A data dir written by seglogfs for the Kafka oracle: a rolled log with keys and headers, a log per
codec (gzip, snappy, lz4, zstd), a compacted log cleaned by seglogfs' cleaner, and a transactional
log (commits, aborts) that seglogfs opened, indexed, cleaned and appended to.

``write_oracle_logs`` returns, per log, what seglogfs itself reads from it: the records a Kafka
consumer must see through a broker that loaded the same files.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from seglogfs.cleaner_config import CleanerConfig
from seglogfs.config import LogConfig
from seglogfs.consumer_offsets import OffsetCommitKey, OffsetCommitValue, encode_key, encode_value
from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED
from seglogfs.records import ProducerRecord
from support.kafka_broker import KafkaBroker
from support.transactions import Scenario

#: Kafka topic configs the broker gets for each log (the same the seglogfs log was written with)
_CODECS = ("gzip", "snappy", "lz4", "zstd")
#: index.interval.bytes as the logs were written: a broker that rebuilds their indexes uses it
_BROKER = {"retention.ms": "-1", "index.interval.bytes": "100"}
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    "plain": _BROKER,
    **{codec: {**_BROKER, "compression.type": codec} for codec in _CODECS},
    "compacted": {**_BROKER, "cleanup.policy": "compact"},
    "txn": {**_BROKER, "cleanup.policy": "compact"},
}
_SMALL_SEGMENTS = {"segment.bytes": 600, "index.interval.bytes": 100, "segment.index.bytes": 1200}
_COMPACT = {
    **_SMALL_SEGMENTS,
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0,
    # a tombstone's delete horizon (now + this) must still be ahead when the broker cleans the log
    "delete.retention.ms": 86_400_000,
    "file.delete.delay.ms": 0,
}
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass
class OracleLog:
    """One log's name and seglogfs' own reading of it (offset, timestamp, key, value, headers)."""

    name: str
    records: list[Row]
    committed: list[Row]
    end_offset: int


class _Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def _rows(lg, isolation) -> list[Row]:
    records = lg.iter_records(isolation=isolation)
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records]


def write_oracle_logs(data_dir: Path) -> dict[str, OracleLog]:
    """Writes plain-0, gzip-0, snappy-0, lz4-0, zstd-0 (each compressed with its codec),
    compacted-0 and txn-0 into ``data_dir`` with seglogfs' engine."""
    # Recent timestamps: a broker's default retention must not delete what it loads.
    clock = _Clock(int(time.time() * 1000) - 60_000)
    txn_dir = data_dir / "txn-0"
    # A broker's transactional log (kafka-python's batches, markers by hand); seglogfs then opens it
    # (writing its indexes and producer snapshots), cleans it, and appends to it.
    (
        Scenario()
        .send(7, [b"1", b"2"], keys=[b"a", b"b"])
        .commit(7)
        .send_plain([b"3"], keys=[b"a"])
        .send(8, [b"x", b"y"], keys=[b"c", b"d"])
        .abort(8)
        .send(9, [b"z"], keys=[b"e"])
        .roll()
        .commit(9)
        .send(7, [b"4"], keys=[b"b"])
        .commit(7)
        .roll()
        .send(10, [b"f", b"g"], keys=[b"f", b"g"])
        .abort(10)
        .send_plain([b"s"], keys=[b"sentinel"])
        .write(txn_dir)
    )
    configs = {
        **{f"{c}-0": LogConfig.from_mapping({**_SMALL_SEGMENTS, "compression.type": c}) for c in _CODECS},
        "compacted-0": LogConfig.from_mapping(_COMPACT),
        "txn-0": LogConfig.from_mapping(_COMPACT),
    }
    small = LogConfig.from_mapping(_SMALL_SEGMENTS)
    cleaner = CleanerConfig(enable=False)  # cleaned below, in this thread
    with LogManager(data_dir, small, configs, clock=clock, cleaner_config=cleaner) as manager:
        plain = manager.create_log("plain-0")
        for n in range(40):
            clock.ms += 7
            headers = [("n", b"%d" % n), ("empty", None)] if n % 3 == 0 else []
            plain.append([ProducerRecord(key=b"k%d" % (n % 5), value=b"value %d" % n, headers=headers)])
        plain.append([ProducerRecord(value=b"no key %d" % n) for n in range(5)])
        for codec in _CODECS:
            lg = manager.create_log(f"{codec}-0")
            for n in range(3):
                lg.append([ProducerRecord(key=b"z%d" % i, value=b"%d " % i * 9) for i in range(n * 9 + 1)])
        compacted = manager.create_log("compacted-0")
        for n in range(60):
            clock.ms += 5
            value = None if n % 11 == 10 else b"round %d" % n
            compacted.append([ProducerRecord(key=b"key%d" % (n % 7), value=value)])
        compacted.roll()
        txn = manager.get("txn-0")
        while manager.clean_once(clock.ms) is not None:
            pass
        # the active segment (with an aborted transaction) is left to the broker's reader
        txn.append([ProducerRecord(key=b"a", value=b"5")])
        txn.append([ProducerRecord(key=b"after", value=b"clean")])
        logs = {}
        for name in [f"{topic}-0" for topic in TOPIC_CONFIGS]:
            lg = manager.get(name)
            rows, committed = _rows(lg, READ_UNCOMMITTED), _rows(lg, READ_COMMITTED)
            logs[name] = OracleLog(name, rows, committed, lg.end_offset)
    return logs


#: (group, topic, partition) -> (offset, metadata): committed through the broker's coordinator, and
#: written by seglogfs into the broker's ``__consumer_offsets-0`` while it was stopped
BROKER_COMMITS = {("g-broker", "plain", 0): (7, "by the broker")}
SEGLOGFS_COMMITS = {("g-seglogfs", "plain", 0): (11, "by seglogfs"), ("g-seglogfs", "txn", 0): (3, "")}


@dataclass
class AdoptedLogs:
    """The seglogfs data dir, seglogfs' reading of each log, where the broker's log was when it
    started loading them, and its ``__consumer_offsets-0`` log dir."""

    data_dir: Path
    logs: dict[str, OracleLog]
    log_mark: int
    offsets_dir: Path


_KEEP = ("partition.metadata", "leader-epoch-checkpoint")


def _replace_files(broker: KafkaBroker, source: Path, topics: list[str]) -> None:
    """With the broker stopped: each topic's partition 0 files replaced by the seglogfs log's."""
    for topic in topics:
        target = broker.data_dir / f"{topic}-0"
        for path in target.iterdir():
            if path.name not in _KEEP:
                path.unlink()
        for path in (source / f"{topic}-0").iterdir():
            if path.name[:1].isdigit():  # segments, indexes, .txnindex, .snapshot; not seglogfs' own
                shutil.copy2(path, target / path.name)


def adopt_oracle_logs(broker: KafkaBroker, data_dir: Path) -> AdoptedLogs:
    """Writes the logs into ``data_dir`` with seglogfs, then has the running ``broker`` load them:
    it creates the topics, stops, gets seglogfs' files in place of its empty logs' and starts."""
    logs = write_oracle_logs(data_dir)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(t, 1, 1, topic_configs=c) for t, c in TOPIC_CONFIGS.items()])
    finally:
        admin.close()
    metadata = [broker.data_dir / f"{t}-0" / "partition.metadata" for t in TOPIC_CONFIGS]
    deadline = time.monotonic() + 30
    while not all(p.exists() for p in metadata) and time.monotonic() < deadline:
        time.sleep(0.05)
    for (group, topic, partition), (offset, text) in BROKER_COMMITS.items():
        commit_offset(broker.bootstrap, group, topic, partition, offset, text)
    broker.stop()
    _replace_files(broker, data_dir, list(TOPIC_CONFIGS))
    offsets_dir = broker.data_dir / "__consumer_offsets-0"
    # the group coordinator's records, as seglogd's would write them, after the broker's own
    with Log.open(offsets_dir, LogConfig.from_mapping({"cleanup.policy": "compact"})) as lg:
        now = int(time.time() * 1000)
        for (group, topic, partition), (offset, text) in SEGLOGFS_COMMITS.items():
            key = encode_key(OffsetCommitKey(group, topic, partition))
            lg.append([ProducerRecord(key=key, value=encode_value(OffsetCommitValue(offset, text, now)))])
    mark = len(broker.log_text())
    broker.start()
    return AdoptedLogs(data_dir, logs, mark, offsets_dir)


def commit_offset(bootstrap: str, group: str, topic: str, partition: int, offset: int, text: str) -> None:
    """Commits ``offset`` with ``text`` as its metadata through the broker's group coordinator."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(offset, text, -1)})
    finally:
        consumer.close()


def committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> tuple[int, str] | None:
    """(offset, metadata) the broker's group coordinator answers for the group (OffsetFetch)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        found = consumer.committed(TopicPartition(topic, partition), metadata=True)
        return None if found is None else (found.offset, found.metadata)
    finally:
        consumer.close()


#: what a broker logs when it finds fault with a log's files at load
_COMPLAINTS = ("orrupt", "stray", "runcat", "Error", "ERROR", "invalid", "Invalid", "mismatch")


def broker_complaints(broker: KafkaBroker, adopted: AdoptedLogs, log_name: str) -> list[str]:
    """The broker's log lines since it loaded the adopted logs that find fault with ``log_name``."""
    lines = broker.log_text()[adopted.log_mark :].splitlines()
    return [line for line in lines if log_name in line and any(c in line for c in _COMPLAINTS)]


def restart_unclean(broker: KafkaBroker, topics: list[str]) -> None:
    """Stops the broker and starts it as after a crash that lost every flush of ``topics``: no
    clean-shutdown marker, their recovery points 0 and no producer snapshot (Kafka takes the latest
    snapshot's offset as flushed too). It then recovers each of their segments: checks every batch,
    truncates at the first bad one, rebuilds the indexes, the .txnindex and the producer state."""
    broker.stop()
    (broker.data_dir / ".kafka_cleanshutdown").unlink()
    for topic in topics:
        for snapshot in (broker.data_dir / f"{topic}-0").glob("*.snapshot"):
            snapshot.unlink()
    checkpoint = broker.data_dir / "recovery-point-offset-checkpoint"
    version, _count, *entries = checkpoint.read_text().splitlines()
    kept = [e for e in entries if e.split(" ")[0] not in topics] + [f"{t} 0 0" for t in topics]
    checkpoint.write_text("\n".join([version, str(len(kept)), *kept]) + "\n")
    broker.start()


def consume(bootstrap: str, topics: list[str], isolation: str) -> dict[str, tuple[list[Row], int]]:
    """Every record of each topic's partition 0 from its start to the end the broker reports for the
    isolation level (the high watermark, or the last stable offset for read_committed), and that end."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False, group_id=None
    )
    try:
        tps = [TopicPartition(t, 0) for t in topics]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        rows: dict[TopicPartition, list[Row]] = {tp: [] for tp in tps}
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                rows[tp] += [(m.offset, m.timestamp, m.key, m.value, tuple(m.headers)) for m in messages]
        return {tp.topic: (rows[tp], ends[tp]) for tp in tps}
    finally:
        consumer.close()

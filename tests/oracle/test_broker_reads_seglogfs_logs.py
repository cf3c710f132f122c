"""A real Kafka broker loads the logs seglogfs wrote and a Kafka consumer reads what seglogfs reads.

A KRaft broker keeps a partition's log only when the metadata log names its topic with the topic
id of the log's ``partition.metadata`` and the broker among its replicas (any other log dir is a
stray and deleted), and a data dir only with the cluster's ``meta.properties``. So the broker
creates the topics (with the configs seglogfs wrote them under), stops, and the seglogfs-written
files (segments, indexes, .txnindex, producer snapshots) replace the empty logs' files; its
``partition.metadata`` and checkpoints stay. The broker then loads them after a clean shutdown,
trusting the indexes and snapshots as it trusts its own.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from support.kafka_broker import KafkaBroker
from support.oracle_logs import TOPIC_CONFIGS, Row, write_oracle_logs

pytestmark = pytest.mark.oracle
_KEEP = ("partition.metadata", "leader-epoch-checkpoint")
#: what the broker logs when it finds fault with a log's files at load
_COMPLAINTS = ("orrupt", "stray", "runcat", "Error", "ERROR", "invalid", "Invalid", "mismatch")


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


def adopt(broker: KafkaBroker, source: Path, topics: list[str]) -> None:
    """With the broker stopped: each topic's partition 0 files replaced by the seglogfs log's."""
    for topic in topics:
        target = broker.data_dir / f"{topic}-0"
        for path in target.iterdir():
            if path.name not in _KEEP:
                path.unlink()
        for path in (source / f"{topic}-0").iterdir():
            if path.name[:1].isdigit():  # segments, indexes, .txnindex, .snapshot; not seglogfs' own
                shutil.copy2(path, target / path.name)


def test_a_broker_loads_seglogfs_logs_and_consumers_read_what_seglogfs_reads(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    logs = write_oracle_logs(tmp_path / "seglogfs")
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([NewTopic(t, 1, 1, topic_configs=c) for t, c in TOPIC_CONFIGS.items()])
    finally:
        admin.close()
    metadata = [kafka_broker.data_dir / f"{t}-0" / "partition.metadata" for t in TOPIC_CONFIGS]
    deadline = time.monotonic() + 30
    while not all(p.exists() for p in metadata) and time.monotonic() < deadline:
        time.sleep(0.05)
    kafka_broker.stop()
    adopt(kafka_broker, tmp_path / "seglogfs", list(TOPIC_CONFIGS))
    mark = len(kafka_broker.log_text())
    kafka_broker.start()

    topics = list(TOPIC_CONFIGS)
    uncommitted = consume(kafka_broker.bootstrap, topics, "read_uncommitted")
    committed = consume(kafka_broker.bootstrap, topics, "read_committed")
    for topic in topics:
        log = logs[f"{topic}-0"]
        assert uncommitted[topic] == (log.records, log.end_offset), topic
        assert committed[topic] == (log.committed, log.end_offset), topic
    assert logs["txn-0"].committed != logs["txn-0"].records  # an aborted transaction was hidden
    loaded = kafka_broker.log_text()[mark:]
    for topic in topics:
        lines = [line for line in loaded.splitlines() if f"{topic}-0" in line]
        assert [line for line in lines if any(c in line for c in _COMPLAINTS)] == []

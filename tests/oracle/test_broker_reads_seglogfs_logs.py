"""A real Kafka broker loads the logs seglogfs wrote and a Kafka consumer reads what seglogfs reads.

How the broker comes to hold them: the ``adopted_logs`` fixture (tests/oracle/conftest.py).
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from support.kafka_broker import KafkaBroker
from support.oracle_logs import TOPIC_CONFIGS, AdoptedLogs, Row, broker_complaints, restart_unclean

pytestmark = pytest.mark.oracle


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


def test_a_broker_loads_seglogfs_logs_and_consumers_read_what_seglogfs_reads(
    kafka_broker: KafkaBroker, adopted_logs: AdoptedLogs
) -> None:
    logs = adopted_logs.logs
    topics = list(TOPIC_CONFIGS)
    uncommitted = consume(kafka_broker.bootstrap, topics, "read_uncommitted")
    committed = consume(kafka_broker.bootstrap, topics, "read_committed")
    for topic in topics:
        log = logs[f"{topic}-0"]
        assert uncommitted[topic] == (log.records, log.end_offset), topic
        assert committed[topic] == (log.committed, log.end_offset), topic
    assert logs["txn-0"].committed != logs["txn-0"].records  # an aborted transaction was hidden
    for topic in topics:
        assert broker_complaints(kafka_broker, adopted_logs, f"{topic}-0") == []


def test_kafkas_recovery_of_seglogfs_segments_keeps_every_record_and_rebuilds_the_same_indexes(
    kafka_broker: KafkaBroker, adopted_logs: AdoptedLogs
) -> None:
    """Kafka's recovery checks each batch (CRC, offsets, sizes) and truncates at the first it refuses;
    here it keeps every record, and the .index, .timeindex and .txnindex it rebuilds with its own
    rules are the ones seglogfs wrote, byte for byte (the active segment's indexes are preallocated:
    zeros after them)."""
    topics = list(TOPIC_CONFIGS)
    mark = len(kafka_broker.log_text())
    restart_unclean(kafka_broker, topics)
    recovered = kafka_broker.log_text()[mark:]
    uncommitted = consume(kafka_broker.bootstrap, topics, "read_uncommitted")
    committed = consume(kafka_broker.bootstrap, topics, "read_committed")
    for topic in topics:
        log = adopted_logs.logs[f"{topic}-0"]
        assert uncommitted[topic] == (log.records, log.end_offset), topic
        assert committed[topic] == (log.committed, log.end_offset), topic
        segments = len(list((adopted_logs.data_dir / f"{topic}-0").glob("*.log")))
        assert recovered.count(f"recovered for {topic}-0.") == segments, topic  # every segment
        for ours in sorted((adopted_logs.data_dir / f"{topic}-0").glob("*index")):
            theirs = (kafka_broker.data_dir / f"{topic}-0" / ours.name).read_bytes()
            mine = ours.read_bytes()
            assert theirs[: len(mine)] == mine and not theirs[len(mine) :].strip(b"\0"), ours.name

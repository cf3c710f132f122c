"""A real Kafka broker loads the logs seglogfs wrote and a Kafka consumer reads what seglogfs reads.

How the broker comes to hold them: the ``adopted_logs`` fixture (tests/oracle/conftest.py).
"""

from __future__ import annotations

import pytest
from support.kafka_broker import KafkaBroker
from support.oracle_logs import TOPIC_CONFIGS, AdoptedLogs, broker_complaints, consume, restart_unclean

pytestmark = pytest.mark.oracle


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

"""A real Kafka broker loads the logs seglogfs wrote and a Kafka consumer reads what seglogfs reads.

How the broker comes to hold them: the ``adopted_logs`` fixture (tests/oracle/conftest.py).
"""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition
from support.kafka_broker import KafkaBroker
from support.oracle_logs import TOPIC_CONFIGS, AdoptedLogs, broker_complaints, consume, restart_unclean

from seglogfs.config import LogConfig
from seglogfs.errors import TimestampNotFoundError
from seglogfs.log import Log

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


def test_offsets_for_times_through_the_broker_against_seglogfs_offset_for_timestamp(
    kafka_broker: KafkaBroker, adopted_logs: AdoptedLogs
) -> None:
    """ListOffsets by timestamp (the broker searching seglogfs' time indexes and batches) against
    ``Log.offset_for_timestamp`` on the same files, at every record's timestamp, one below and one
    above it, before the first and after the last. They agree but in two known ways (docs/oracle.md):

    - Kafka's search counts control records, seglogfs' data records only: where the broker answers
      a transaction marker's offset, seglogfs answers the first data record after it;
    - Kafka searches only the first segment whose largest timestamp reaches the target: when that
      segment holds nothing but batches its cleaner emptied, the broker finds nothing, seglogfs the
      first record of a later segment."""
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=None)
    differences = {"marker": 0, "emptied segment": 0}
    try:
        for topic in TOPIC_CONFIGS:
            tp = TopicPartition(topic, 0)
            log = adopted_logs.logs[f"{topic}-0"]
            data = [offset for offset, *_ in log.records]
            stamps = sorted({t + d for _, t, *_ in log.records for d in (-1, 0, 1)} | {0, 2**62})
            with Log.open(adopted_logs.data_dir / f"{topic}-0", LogConfig(), read_only=True) as lg:
                for ts in stamps:
                    found = consumer.offsets_for_times({tp: ts})[tp]
                    try:
                        ours: int | None = lg.offset_for_timestamp(ts)
                    except TimestampNotFoundError:
                        ours = None
                    theirs = None if found is None else found.offset
                    if theirs == ours:
                        continue
                    if theirs is not None and theirs not in data:  # a control record
                        assert ours == min(o for o in data if o > theirs), (topic, ts, theirs, ours)
                        differences["marker"] += 1
                        continue
                    assert theirs is None and ours is not None, (topic, ts, theirs, ours)
                    first = next(seg for seg in lg.segments if seg.max_timestamp >= ts)
                    after = [seg.base_offset for seg in lg.segments if seg.base_offset > first.base_offset]
                    end = after[0] if after else lg.end_offset
                    assert not [o for o in data if first.base_offset <= o < end], (topic, ts)
                    differences["emptied segment"] += 1
    finally:
        consumer.close()
    assert differences["marker"] > 0 and differences["emptied segment"] > 0  # both cases were met


def test_the_largest_timestamps_record_through_the_broker_against_seglogfs(
    kafka_broker: KafkaBroker, adopted_logs: AdoptedLogs
) -> None:
    """ListOffsets' MAX_TIMESTAMP (-3, v7+) asked of the broker with confluent-kafka's admin client, on
    seglogfs' files, against ``Log.max_timestamp_offset``; EARLIEST (-2) against the log start."""
    from confluent_kafka import TopicPartition as Partition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for topic in TOPIC_CONFIGS:
        with Log.open(adopted_logs.data_dir / f"{topic}-0", LogConfig(), read_only=True) as lg:
            ours = lg.max_timestamp_offset()
            start = lg.start_offset
        asks = {"max": OffsetSpec.max_timestamp(), "earliest": OffsetSpec.earliest()}
        answers = {
            what: admin.list_offsets({Partition(topic, 0): spec})[Partition(topic, 0)].result(30)
            for what, spec in asks.items()
        }
        assert (answers["max"].timestamp, answers["max"].offset) == (ours or (-1, -1)), topic
        assert answers["earliest"].offset == start, topic

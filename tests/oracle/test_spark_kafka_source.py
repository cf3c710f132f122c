"""Spark's own ``format("kafka")`` source (spark-sql-kafka-0-10 from the oracle's cache) against a
real Kafka broker: it reads every record as the Kafka client that produced it sees it (that test
takes the ``kafka_bootstrap`` endpoint, so seglogd's listener can join it), and a
query over the logs seglogfs wrote gives the same rows through the broker as ``format("seglog")``
gives on the data dir."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from support.kafka_broker import KafkaBroker, spark_kafka_classpath
from support.oracle_logs import TOPIC_CONFIGS, AdoptedLogs

pytest_plugins = ["support.spark_fixtures"]
pytestmark = [pytest.mark.oracle, pytest.mark.spark]
TOPIC = "spark-source"


@pytest.fixture(autouse=True, scope="module")
def _connector() -> None:
    """Spark's Kafka connector from the cache (scripts/install.sh fills it); the tests fail without it."""
    if spark_kafka_classpath() is None:
        pytest.fail("no spark-sql-kafka-0-10 in the Kafka cache: run scripts/kafka-oracle.sh")


def produce(bootstrap: str) -> list[tuple]:
    """Keyed records with headers and timestamps over two partitions; what a consumer then reads
    as (partition, offset, key, value, timestamp ms, headers)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
    base = int(time.time() * 1000) - 10_000
    for n in range(30):
        headers = [("n", b"%d" % n), ("empty", b"")] if n % 4 == 0 else []
        key = None if n % 5 == 0 else b"k%d" % n
        value = b"value %d" % n
        producer.send(TOPIC, key=key, value=value, headers=headers, partition=n % 2, timestamp_ms=base + n)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(TOPIC, p) for p in (0, 1)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[tuple] = []
        while len(out) < 30:
            for messages in consumer.poll(timeout_ms=1000).values():
                out += [
                    (m.partition, m.offset, m.key, m.value, m.timestamp, tuple(m.headers)) for m in messages
                ]
        return sorted(out, key=lambda r: (r[0], r[1]))
    finally:
        consumer.close()


def test_spark_format_kafka_reads_what_a_kafka_consumer_reads(spark, kafka_bootstrap: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
    finally:
        admin.close()
    expected = produce(kafka_bootstrap)
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .load()
    )
    millis = "CAST(unix_millis(timestamp) AS BIGINT) AS ts"
    rows = df.selectExpr("partition", "offset", "key", "value", millis, "headers", "topic").collect()
    got = sorted(
        (
            r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value), r.ts,
            tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers or ()),
        )
        for r in rows
    )  # fmt: skip
    assert {r.topic for r in rows} == {TOPIC}
    assert got == expected


def _row(r) -> tuple:
    headers = tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers or ())
    key = None if r.key is None else bytes(r.key)
    value = None if r.value is None else bytes(r.value)
    return (r.topic, r.partition, r.offset, key, value, r.timestamp, r.timestampType, headers)


def test_one_word_moves_a_query_between_kafka_and_seglog(
    spark, kafka_broker: KafkaBroker, adopted_logs: AdoptedLogs
) -> None:
    """The same read_committed query over the logs seglogfs wrote: format("kafka") through the broker
    that loaded them, format("seglog") on seglogfs' data dir. Every column of every row is the same."""
    rows = {}
    for fmt in ("kafka", "seglog"):
        reader = (
            spark.read.format(fmt)
            .option("subscribe", ",".join(TOPIC_CONFIGS))
            .option("includeHeaders", "true")
            .option("kafka.isolation.level", "read_committed")
            .option("kafka.bootstrap.servers", kafka_broker.bootstrap)  # the seglog source ignores it
        )
        df = reader.load() if fmt == "kafka" else reader.load(str(adopted_logs.data_dir))
        rows[fmt] = sorted((_row(r) for r in df.collect()), key=lambda r: r[:3])
    assert rows["kafka"] == rows["seglog"]
    expected = sum(len(log.committed) for log in adopted_logs.logs.values())
    assert len(rows["kafka"]) == expected

"""seglogfs reads a transactional log the real broker wrote: kafka-python's transactional producer
commits and aborts through the broker's transaction coordinator (markers, .txnindex, producer
snapshots all the broker's), and seglogfs' engine, on a copy of the broker's log dir, reads what a
Kafka consumer reads through the broker, with either isolation level, and gives the same last stable
offset and aborted transactions; ``seglogfs dump`` prints its files as kafka-dump-log.sh does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from support.dump_compare import assert_same_dumps, segment_files
from support.kafka_broker import KafkaBroker
from support.oracle_logs import consume

from seglogfs.config import LogConfig
from seglogfs.log import Log
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED

pytestmark = pytest.mark.oracle
TOPIC = "broker-txn"


def transactions(bootstrap: str) -> None:
    """Six gzip transactions of three records (the second and fifth aborted), each with a plain
    record of another producer in the middle of it."""
    txn = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="oracle-txn", compression_type="gzip")
    plain = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        txn.init_transactions()
        for n in range(6):
            txn.begin_transaction()
            for i in range(3):
                txn.send(TOPIC, key=b"t%d" % i, value=b"txn %d.%d" % (n, i))
            txn.flush()
            plain.send(TOPIC, key=b"p", value=b"plain %d" % n).get(timeout=30)
            if n % 3 == 1:
                txn.abort_transaction()
            else:
                txn.commit_transaction()
    finally:
        txn.close()
        plain.close()


def test_seglogfs_reads_a_broker_written_transactional_log_as_a_consumer_does(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    finally:
        admin.close()
    transactions(kafka_broker.bootstrap)
    through_broker = {
        isolation: consume(kafka_broker.bootstrap, [TOPIC], isolation)[TOPIC]
        for isolation in (READ_UNCOMMITTED, READ_COMMITTED)
    }
    copy = tmp_path / f"{TOPIC}-0"
    shutil.copytree(kafka_broker.data_dir / f"{TOPIC}-0", copy)
    with Log.open(copy, LogConfig(), read_only=True) as lg:
        for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
            records = lg.iter_records(isolation=isolation)
            rows = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records]
            assert rows == through_broker[isolation][0], isolation
        assert lg.last_stable_offset == through_broker[READ_COMMITTED][1] == lg.end_offset
        aborted = lg.aborted_transactions(0, lg.end_offset)
    assert len(aborted) == 2  # transactions 1 and 4
    assert len(through_broker[READ_COMMITTED][0]) == 4 * 3 + 6
    # the broker's markers and .txnindex as Kafka's own tool prints them
    files = segment_files([copy])
    assert {p.suffix for p in files} >= {".log", ".index", ".timeindex", ".txnindex"}
    assert_same_dumps([(files, []), (files, ["--print-data-log"])])

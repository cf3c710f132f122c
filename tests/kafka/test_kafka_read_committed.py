"""read_committed through the listener over logs with transactions (built as a broker writes them):
a confluent-kafka consumer sees exactly the model's committed records below the last stable offset,
and ListOffsets' latest is that offset; read_uncommitted sees every data record."""

from __future__ import annotations

import time
from pathlib import Path

from support.kafka_fixture import bootstrap, start_kafka_daemon
from support.mount_fixture import fuse_required
from support.transactions import random_scenario

pytestmark = fuse_required


def _consume(server: str, topic: str, isolation: str) -> list[tuple[int, bytes]]:
    """Every record the consumer gets until it reports the end of the partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": server, "group.id": "rc", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                break
            got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def test_read_committed_consumer_sees_the_model(tmp_path: Path) -> None:
    data = tmp_path / "run" / "data"
    models = {f"txn{seed}": random_scenario(seed).write(data / f"txn{seed}-0") for seed in (1, 4)}
    keep = {"retention.ms": -1}  # the scenarios' timestamps are old
    daemon = start_kafka_daemon(tmp_path, data_dir=data, logs={f"{topic}-0": keep for topic in models})
    try:
        from confluent_kafka import Consumer, TopicPartition

        server = bootstrap(daemon)
        for topic, model in models.items():
            assert model.aborted, "the scenario must abort some transaction"
            committed = _consume(server, topic, "read_committed")
            assert [o for o, _ in committed] == model.visible
            assert [v for _, v in committed] == model.values_at(model.visible)
            everything = _consume(server, topic, "read_uncommitted")
            assert [o for o, _ in everything] == [r.offset for r in model.records]
            consumer = Consumer({"bootstrap.servers": server, "group.id": "rc",
                                 "isolation.level": "read_committed"})
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
            consumer.close()
            assert high == model.last_stable_offset  # ListOffsets latest under read_committed, as Kafka
    finally:
        daemon.cleanup()

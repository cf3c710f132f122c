"""ListOffsets asked of seglogd's listener and of Apache Kafka's broker, with confluent-kafka's admin
client, on the same records: every special timestamp a current client sends, and by timestamp."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.kafka_broker import KafkaBroker
from support.kafka_fixture import bootstrap, start_kafka_daemon
from support.mount_fixture import Seglogd, fuse_required

pytestmark = fuse_required

BASE = 1_700_000_000_000
#: two batches; the largest timestamp is held twice, by records in the middle of the first batch
BATCHES = [[BASE + 5, BASE + 9, BASE + 2, BASE + 9, BASE + 1], [BASE + 3, BASE + 4]]


@pytest.fixture(scope="module")
def seglogd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    daemon = start_kafka_daemon(tmp_path_factory.mktemp("list-offsets"), logs={})
    try:
        yield daemon
    finally:
        daemon.cleanup()


def _answers(server: str, topic: str) -> dict[str, tuple[int, int]]:
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    producer = Producer({"bootstrap.servers": server, "linger.ms": 200, "acks": "all"})
    for stamps in BATCHES:
        for i, stamp in enumerate(stamps):
            producer.produce(topic, value=b"v%d" % i, timestamp=stamp, partition=0)
        producer.flush(30)
    specs: dict[str, Any] = {
        "max": OffsetSpec.max_timestamp(), "earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
        **{f"at {t - BASE}": OffsetSpec.for_timestamp(t) for t in (BASE, BASE + 3, BASE + 9, BASE + 10)},
    }
    admin = AdminClient({"bootstrap.servers": server})
    part = TopicPartition(topic, 0)
    found = {}
    for what, spec in specs.items():
        info = admin.list_offsets({part: spec})[part].result(30)
        found[what] = (info.offset, info.timestamp)
    return found


def test_list_offsets_answers_as_the_broker_does(kafka_broker: KafkaBroker, seglogd: Seglogd) -> None:
    theirs = _answers(kafka_broker.bootstrap, "list-offsets")
    ours = _answers(bootstrap(seglogd), "list-offsets")
    assert ours == theirs
    assert ours["max"] == (1, BASE + 9)  # the first record holding it, not its batch's last offset

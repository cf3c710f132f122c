"""Real clients against a listener with SASL/SCRAM or TLS: a round trip that must succeed, and a
connection attempt that must be refused (the error the client reports)."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import yaml

from support.kafka_fixture import KCAT

__all__ = ["confluent_no_metadata", "confluent_refusal", "confluent_roundtrip", "kcat_run", "scram_user"]


def scram_user(name: str, password: str) -> dict[str, Any]:
    """``kafka.users``' entry for ``name``, made by ``seglogfs kafka-user add`` (password on stdin)."""
    command = [sys.executable, "-m", "seglogfs.tools.cli", "kafka-user", "add", name]
    result = subprocess.run(command, input=password + "\n", text=True, capture_output=True, check=True,
                            timeout=60)
    return yaml.safe_load(result.stdout)["users"][name]


def confluent_roundtrip(bootstrap: str, topic: str, count: int, conf: dict[str, Any]) -> list[bytes]:
    """Produce ``count`` values with confluent-kafka (acks=all) and consume them back from offset 0."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    for i in range(count):
        producer.produce(topic, f"{topic} {i}".encode(), key=b"k")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sec", "enable.auto.commit": False,
                         **conf})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(count, 0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def confluent_refusal(bootstrap: str, conf: dict[str, Any], timeout: float = 15) -> str:
    """The first error other than a transport one that confluent-kafka reports when it connects
    with ``conf``."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": lambda err: errors.append(str(err)),
                         "reconnect.backoff.max.ms": 1000, **conf})
    deadline = time.monotonic() + timeout
    while not any("_TRANSPORT" not in e for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    errors = [e for e in errors if "_TRANSPORT" not in e] or errors
    assert errors, "no error reported"
    return errors[0]


def kcat_run(*args: str, timeout: float = 30, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """kcat with ``args`` (not checked: refusals are asserted by the caller)."""
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout, check=False)


def confluent_no_metadata(bootstrap: str, conf: dict[str, Any], timeout: float = 2) -> None:
    """confluent-kafka connecting with ``conf`` gets no metadata within ``timeout`` seconds."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0, **conf})
    try:
        producer.list_topics(timeout=timeout)
    except KafkaException:
        return
    raise AssertionError("the listener served metadata to a client it should refuse")


def kafka_python_values(consumer: Any, count: int, timeout: float = 30) -> list[bytes]:
    """The values a kafka-python consumer (assigned and positioned) reads, up to ``count``; closes it."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            values.extend(message.value for message in batch)
    consumer.close()
    return values

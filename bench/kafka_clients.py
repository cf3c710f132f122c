"""confluent-kafka's producer and consumer rates over a seglogd listener, for bench/kafka.py and
bench/kafka_security.py: 100-byte values, the client's defaults with acks=1, plus ``conf``."""

from __future__ import annotations

import time
from typing import Any

VALUE = b"x" * 100


def confluent_produce(server: str, topic: str, n: int, conf: dict[str, Any] | None = None) -> float:
    """Records/s of ``n`` values produced to partition-less ``topic`` (created first, not timed)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server, "acks": "1", **(conf or {})})
    producer.list_topics(topic, timeout=10)  # creates it: not timed
    start = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for _ in range(n):
        while True:
            try:
                produce(topic, VALUE)
                break
            except BufferError:  # the client's queue is full: let it send
                poll(0.001)
    producer.flush(120)
    return n / (time.perf_counter() - start)


def confluent_consume(server: str, topic: str, n: int, conf: dict[str, Any] | None = None) -> float:
    """Records/s of reading ``n`` records of ``topic`` partition 0 from its start."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": server, "group.id": "bench", "enable.auto.commit": False, **(conf or {})}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, start = 0, time.perf_counter()
    while got < n:
        got += len(consumer.consume(100_000, 5))
    rate = n / (time.perf_counter() - start)
    consumer.close()
    return rate

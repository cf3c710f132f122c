"""Real Kafka clients (confluent-kafka, kafka-python, aiokafka, kcat) against seglogd's listener: what
each produces is what the mount's records.jsonl shows and what each consumer reads back."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import time

import pytest
from support.kafka_fixture import bootstrap, kcat, records_jsonl, restart
from support.mount_fixture import Seglogd, fuse_required

pytestmark = fuse_required

N = 200


def _text(field: dict, name: str) -> bytes | None:
    """A key or value of a records.jsonl line as bytes."""
    if f"{name}_b64" in field:
        return base64.b64decode(field[f"{name}_b64"])
    value = field.get(name)
    return None if value is None else value.encode()


def _headers(line: dict) -> list[tuple[str, bytes | None]]:
    out = []
    for header in line.get("headers") or []:
        if isinstance(header, dict):
            value = base64.b64decode(header["value_b64"]) if "value_b64" in header else header.get("value")
            out.append((header["key"], value.encode() if isinstance(value, str) else value))
        else:
            key, value = header
            out.append((key, value.encode() if isinstance(value, str) else value))
    return out


def _expected(topic: str, n: int = N) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"{topic}-k{i % 7}".encode(), f"{topic} value {i}".encode(), [("h", f"x{i}".encode())])
            for i in range(n)]


def _mount_records(daemon: Seglogd, log: str) -> list[tuple[bytes | None, bytes | None, list]]:
    return [(_text(line, "key"), _text(line, "value"), _headers(line)) for line in records_jsonl(daemon, log)]


def _confluent_consume(daemon: Seglogd, topic: str, count: int, **conf: object) -> list:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap(daemon), "group.id": "t", "enable.auto.commit": False,
                         **conf})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.key(), msg.value(), list(msg.headers() or [])))
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize(
    ("codec", "acks", "idempotent"),
    [("none", "all", True), ("gzip", "1", False), ("snappy", "0", False), ("lz4", "all", True),
     ("zstd", "all", True), ("zstd", "1", False)],
)
def test_confluent_produce_is_what_the_mount_and_consumers_see(
    kafka_daemon: Seglogd, codec: str, acks: str, idempotent: bool
) -> None:
    from confluent_kafka import Producer

    topic = f"cf-{codec}-{acks}"
    producer = Producer({"bootstrap.servers": bootstrap(kafka_daemon), "compression.type": codec,
                         "acks": acks, "enable.idempotence": idempotent, "linger.ms": 5})
    expected = _expected(topic)
    delivered: list[int] = []
    for key, value, headers in expected:
        producer.produce(topic, value=value, key=key, headers=headers,
                         on_delivery=lambda err, msg: delivered.append(0 if err is None else 1))
    assert producer.flush(30) == 0
    assert delivered.count(0) == N
    if acks == "0":  # no answer: "delivered" once sent, appended a moment later
        deadline = time.monotonic() + 30
        while len(_mount_records(kafka_daemon, f"{topic}-0")) < N and time.monotonic() < deadline:
            time.sleep(0.05)
    assert _mount_records(kafka_daemon, f"{topic}-0") == [(k, v, h) for k, v, h in expected]
    consumed = _confluent_consume(kafka_daemon, topic, N)
    assert [(o, k, v, h) for o, k, v, h in consumed] == [
        (i, k, v, h) for i, (k, v, h) in enumerate(expected)
    ]


def test_kafka_python_produce_and_consume(kafka_daemon: Seglogd) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    for codec in ("gzip", "snappy", "lz4", "zstd", None):
        topic = f"kp-{codec}"
        producer = KafkaProducer(bootstrap_servers=bootstrap(kafka_daemon), compression_type=codec,
                                 acks="all", enable_idempotence=codec == "gzip")
        expected = _expected(topic, 50)
        for key, value, headers in expected:
            producer.send(topic, value=value, key=key, headers=headers)
        producer.flush(30)
        producer.close()
        assert _mount_records(kafka_daemon, f"{topic}-0") == expected
        consumer = KafkaConsumer(bootstrap_servers=bootstrap(kafka_daemon), enable_auto_commit=False)
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < len(expected) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [(m.key, m.value, [(k, v) for k, v in m.headers]) for m in records]
        consumer.close()
        assert got == expected


def test_aiokafka_produce_and_consume(kafka_daemon: Seglogd) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = "aio"
    expected = _expected(topic, 100)

    async def run() -> list:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(kafka_daemon), compression_type="gzip",
                                    enable_idempotence=True)
        await producer.start()
        try:
            for key, value, headers in expected:
                await producer.send(topic, value=value, key=key, headers=headers)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(kafka_daemon), enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list = []
            while len(got) < len(expected):
                batch = await consumer.getmany(tp, timeout_ms=5000)
                if not batch:
                    break
                got += [(m.key, m.value, list(m.headers)) for m in batch[tp]]
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert _mount_records(kafka_daemon, f"{topic}-0") == expected
    assert got == expected


def test_kcat_produce_and_consume(kafka_daemon: Seglogd) -> None:
    lines = b"".join(b"k%d:kcat value %d\n" % (i % 3, i) for i in range(N))
    for codec in ("snappy", "zstd"):
        topic = f"kcat-{codec}"
        kcat("-b", bootstrap(kafka_daemon), "-P", "-t", topic, "-K", ":", "-z", codec, "-H", "src=kcat",
             input=lines)
        mount = _mount_records(kafka_daemon, f"{topic}-0")
        assert [(k, v) for k, v, _ in mount] == [tuple(line.split(b":", 1)) for line in lines.splitlines()]
        assert all(h == [("src", b"kcat")] for _, _, h in mount)
        out = kcat("-b", bootstrap(kafka_daemon), "-C", "-t", topic, "-e", "-f", "%o %k %s\n").stdout
        assert out.splitlines() == [b"%d %s" % (i, line.replace(b":", b" ", 1))
                                    for i, line in enumerate(lines.splitlines())]


def test_append_is_seen_by_a_long_polling_consumer(kafka_daemon: Seglogd) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = "tailed"
    os.mkdir(kafka_daemon.mount / f"{topic}-0")
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(kafka_daemon), enable_auto_commit=False,
                             fetch_max_wait_ms=20_000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    consumer.poll(timeout_ms=200)  # the first fetch is now parked in its 20 s long poll
    append = kafka_daemon.mount / f"{topic}-0" / "append"
    writer = subprocess.Popen(["bash", "-c", f"sleep 0.5; echo hello-from-fuse >> {append}"])
    started = time.monotonic()
    got: list = []
    while not got and time.monotonic() - started < 30:
        got = [m.value for records in consumer.poll(timeout_ms=1000).values() for m in records]
    elapsed = time.monotonic() - started
    writer.wait(10)
    consumer.close()
    assert got == [b"hello-from-fuse"]
    assert elapsed < 10, "the append did not wake the 20 s long poll"


def test_offsets_for_times_match_by_time(kafka_daemon: Seglogd) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "timed"
    producer = Producer({"bootstrap.servers": bootstrap(kafka_daemon), "linger.ms": 0})
    base = 1_700_000_000_000
    for i in range(20):
        producer.produce(topic, value=b"t%d" % i, timestamp=base + 1000 * i)
        producer.flush(10)  # one batch per record: the time index then has many entries to search
    consumer = Consumer({"bootstrap.servers": bootstrap(kafka_daemon), "group.id": "t"})
    for ts in (base - 5, base, base + 1500, base + 19_000):
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
        link = os.readlink(kafka_daemon.mount / f"{topic}-0" / "by-time" / str(ts))
        assert found.offset == int(link.rsplit("/", 1)[1])
    [past] = consumer.offsets_for_times([TopicPartition(topic, 0, base + 60_000)], timeout=10)
    assert past.offset == -1  # Kafka's answer for a time after the last record (by-time: ENOENT)
    consumer.close()


def test_admin_create_describe_delete(kafka_daemon: Seglogd) -> None:
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap(kafka_daemon)})
    futures = admin.create_topics([NewTopic("made", 3, 1, config={"retention.ms": "3600000"})])
    futures["made"].result(10)
    assert {"made-0", "made-1", "made-2"} <= set(os.listdir(kafka_daemon.mount))
    again = admin.create_topics([NewTopic("made", 3, 1)])
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS"):
        again["made"].result(10)

    [described] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "made")]).values()
    configs = described.result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"

    producer = Producer({"bootstrap.servers": bootstrap(kafka_daemon)})
    for i in range(10):
        producer.produce("made", value=b"%d" % i, partition=1)
    producer.flush(10)
    deleted = admin.delete_records([TopicPartition("made", 1, 4)])
    [result] = deleted.values()
    assert result.result(10).low_watermark == 4
    info = (kafka_daemon.mount / "made-1" / "info").read_text()
    assert '"start_offset": 4' in info

    # the topic configs a client gave live with the logs: after a restart (and any reload) too
    kafka_daemon.stop()
    restart(kafka_daemon)
    admin = AdminClient({"bootstrap.servers": bootstrap(kafka_daemon)})
    [described] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "made")]).values()
    assert described.result(10)["retention.ms"].value == "3600000"
    for p in range(3):
        info = json.loads((kafka_daemon.mount / f"made-{p}" / "info").read_text())
        assert info["config"]["retention.ms"] == 3600000

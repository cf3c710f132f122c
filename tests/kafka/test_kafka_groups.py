"""The classic consumer-group protocol with confluent-kafka consumers: two members share a 4-partition
topic, the group rebalances when one joins and when one leaves, commits are records of
``__consumer_offsets-<n>`` in Kafka's format and survive a restart, and a new member resumes there."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from support.kafka_fixture import bootstrap, kafka_port, start_kafka_daemon
from support.mount_fixture import Seglogd, fuse_required

from seglogfs.kafka.offsets_topic import offsets_partition, parse_commit
from seglogfs.log import Log

pytestmark = fuse_required

GROUP, TOPIC = "readers", "shared"
GHOST = """
import sys
from confluent_kafka import Consumer
server, group, topic = sys.argv[1:4]
consumer = Consumer({"bootstrap.servers": server, "group.id": group, "session.timeout.ms": 1500,
                     "heartbeat.interval.ms": 300, "enable.auto.commit": False})
consumer.subscribe([topic])
while True:
    consumer.poll(0.1)
"""


def _consumer(server: str, name: str):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": server, "group.id": GROUP, "client.id": name,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    consumer.subscribe([TOPIC])
    return consumer


def _until(consumers: list, done, timeout: float = 20, give_up: bool = False) -> list:
    """Poll every consumer until ``done()`` (or for ``timeout`` when ``give_up``); the messages they got."""
    got = []
    deadline = time.monotonic() + timeout
    while not done():
        if give_up and time.monotonic() >= deadline:
            break
        assert time.monotonic() < deadline, "the group did not get there in time"
        for consumer in consumers:
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                got.append(msg)
    return got


def _partitions(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_group_rebalances_commits_and_resumes_after_restart(kafka_daemon: Seglogd) -> None:
    from confluent_kafka import Producer, TopicPartition

    daemon = kafka_daemon
    for p in range(4):
        (daemon.mount / f"{TOPIC}-{p}").mkdir()
    server = bootstrap(daemon)
    producer = Producer({"bootstrap.servers": server})
    for i in range(400):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % 4)
    producer.flush(10)

    first = _consumer(server, "first")
    _until([first], lambda: _partitions(first) == {0, 1, 2, 3})
    second = _consumer(server, "second")
    _until([first, second], lambda: len(_partitions(first)) == len(_partitions(second)) == 2
           and _partitions(first) | _partitions(second) == {0, 1, 2, 3})

    mine = _partitions(second)
    # the second member commits 30 records of each of its partitions as read
    second.commit(offsets=[TopicPartition(TOPIC, p, 30) for p in mine], asynchronous=False)
    second.close()  # LeaveGroup: the first member takes everything again
    _until([first], lambda: _partitions(first) == {0, 1, 2, 3})

    # a member that dies without leaving is dropped once its session times out
    ghost = subprocess.Popen([sys.executable, "-c", GHOST, server, GROUP, TOPIC])
    try:
        _until([first], lambda: len(_partitions(first)) == 2)
    finally:
        ghost.kill()
        ghost.wait(10)
    _until([first], lambda: _partitions(first) == {0, 1, 2, 3})
    first.close()

    daemon.stop()
    offsets_log = daemon.data_dir / f"__consumer_offsets-{offsets_partition(GROUP)}"
    with Log.open(offsets_log, read_only=True) as stored:
        commits = [parse_commit(r.key, r.value) for r in stored.iter_records()]
    assert {(where, c.offset) for where, c in commits} >= {((GROUP, TOPIC, p), 30) for p in mine}

    daemon.start()
    daemon.extra["port"] = kafka_port(daemon)
    info = json.loads((daemon.mount / offsets_log.name / "info").read_text())
    assert info["config"]["cleanup.policy"] == "compact"  # after a restart too
    resumed = _consumer(bootstrap(daemon), "third")
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 20
    while len(seen) < 4:
        assert time.monotonic() < deadline
        msg = resumed.poll(0.1)
        if msg is not None and msg.error() is None:
            seen.setdefault(msg.partition(), msg.offset())
    resumed.close()
    assert {p: seen[p] for p in mine} == {p: 30 for p in mine}  # resumed at the commits
    assert all(seen[p] == 0 for p in {0, 1, 2, 3} - mine)  # never committed: from the start


def test_kafka_python_and_aiokafka_groups_and_admin_listing(kafka_daemon) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    server = bootstrap(kafka_daemon)
    producer = Producer({"bootstrap.servers": server})
    for i in range(30):
        producer.produce("grouped", value=b"%d" % i)
    assert producer.flush(10) == 0

    consumer = KafkaConsumer("grouped", bootstrap_servers=server, group_id="kp", auto_offset_reset="earliest",
                             enable_auto_commit=False)
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 20 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got += [m.value for m in records]
    assert got, f"kafka-python consumed nothing in 20 s; its assignment: {consumer.assignment()}"
    consumer.commit()  # what it has consumed
    admin = AdminClient({"bootstrap.servers": server})
    listed = admin.list_consumer_groups().result(10)
    assert "kp" in {g.group_id for g in listed.valid}
    [described] = admin.describe_consumer_groups(["kp"]).values()
    group = described.result(10)
    assert len(group.members) == 1 and str(group.state).endswith("STABLE")
    committed = len(got)
    consumer.close()
    for i in range(committed, committed + 5):  # what the next member of the group has to read
        producer.produce("grouped", value=b"%d" % i)
    assert producer.flush(10) == 0

    async def resume() -> list[bytes]:
        aio = AIOKafkaConsumer("grouped", bootstrap_servers=server, group_id="kp", enable_auto_commit=False)
        await aio.start()
        try:
            batch = await aio.getmany(timeout_ms=10_000)
            return [m.value for records in batch.values() for m in records]
        finally:
            await aio.stop()

    rest = asyncio.run(resume())
    assert rest and rest[0] == b"%d" % committed  # aiokafka resumes where kafka-python committed


def test_a_new_groups_members_starting_together_get_one_assignment(tmp_path) -> None:
    """Kafka's group.initial.rebalance.delay.ms: the first rebalance of an Empty group waits for the
    members starting with the first, so each gets its share once instead of everything and then half."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    daemon = start_kafka_daemon(tmp_path, logs={}, kafka={"group.min.session.timeout.ms": 1000,
                                                          "group.initial.rebalance.delay.ms": 2000})
    try:
        server = bootstrap(daemon)
        admin = AdminClient({"bootstrap.servers": server})
        admin.create_topics([NewTopic("together", 4)])["together"].result(10)
        assignments: dict[str, list[set[int]]] = {"a": [], "b": []}
        consumers = []
        for name in assignments:
            consumer = Consumer({"bootstrap.servers": server, "group.id": "together", "client.id": name,
                                 "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})

            def on_assign(_consumer, partitions, name=name) -> None:
                assignments[name].append({tp.partition for tp in partitions})

            consumer.subscribe(["together"], on_assign=on_assign)
            consumer.poll(0.3)  # sends its JoinGroup; the other starts 0.3 s later
            consumers.append(consumer)
        _until(consumers, lambda: all(assignments.values()))
        _until(consumers, lambda: False, timeout=1.0, give_up=True)  # a second rebalance would show now
        assert [len(a) for a in assignments.values()] == [1, 1], assignments  # one assignment each
        assert assignments["a"][0] | assignments["b"][0] == {0, 1, 2, 3}
        assert len(assignments["a"][0]) == len(assignments["b"][0]) == 2
        for consumer in consumers:
            consumer.close()
    finally:
        daemon.stop()

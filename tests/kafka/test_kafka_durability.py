"""kill -9 of seglogd under acks=all producers with flush.messages 1: every acknowledged record is in
the log after the restart. Then the same data dir mounted read-only: reads served, writes refused
with Kafka's error code."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kio.schema.errors import ErrorCode
from support.kafka_fixture import bootstrap, kafka_port, kcat, start_kafka_daemon
from support.kafka_wire import WireClient, produce_request, producer_batch
from support.mount_fixture import fuse_required

pytestmark = fuse_required

PRODUCER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Producer
    server, topic, tag, path = sys.argv[1:5]
    out = open(path, "a")
    def delivered(err, msg):
        if err is None:
            out.write(msg.value().decode() + "\\n")
            out.flush()
    producer = Producer({"bootstrap.servers": server, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 1, "message.timeout.ms": 2000, "log_level": 0})
    i = 0
    while True:
        try:
            producer.produce(topic, value=f"{tag}-{i}".encode(), on_delivery=delivered)
            i += 1
        except BufferError:
            pass
        producer.poll(0.0005)
""")


def test_acknowledged_records_survive_kill_9(tmp_path: Path) -> None:
    daemon = start_kafka_daemon(tmp_path, logs={"durable-0": {}}, defaults={"flush.messages": 1})
    acked = [tmp_path / f"acked-{i}.txt" for i in range(2)]
    producers = [
        subprocess.Popen([sys.executable, "-c", PRODUCER, bootstrap(daemon), "durable", f"p{i}", str(path)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i, path in enumerate(acked)
    ]
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(p.exists() and p.stat().st_size > 600 for p in acked):
            time.sleep(0.05)
        daemon.kill()
        time.sleep(0.3)
    finally:
        for producer in producers:
            producer.send_signal(signal.SIGKILL)
            producer.wait(10)
    acknowledged = [line for path in acked for line in path.read_text().splitlines()]
    assert len(acknowledged) > 50
    try:
        daemon.start()
        daemon.extra["port"] = kafka_port(daemon)
        stored = set((daemon.mount / "durable-0" / "records").read_text().splitlines())
        missing = [value for value in acknowledged if value not in stored]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
        # each producer's records in its own order, no duplicate from a retry
        for tag in ("p0", "p1"):
            mine = [int(v.split("-")[1]) for v in (daemon.mount / "durable-0" / "records").read_text().split()
                    if v.startswith(tag + "-")]
            assert mine == sorted(set(mine))

        daemon.stop()
        daemon.write_config(read_only=True)
        daemon.start()
        port = kafka_port(daemon)
        client = WireClient(port)
        response = client.request(0, 9, produce_request(9, "durable", producer_batch([b"nope"])))
        client.close()
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
        out = kcat("-b", f"127.0.0.1:{port}", "-C", "-t", "durable", "-e", "-f", "%o %s\n").stdout
        assert out.decode().splitlines() == [
            f"{offset} {value}" for offset, value in enumerate(
                (daemon.mount / "durable-0" / "records").read_text().splitlines()
            )
        ]
    finally:
        daemon.cleanup()

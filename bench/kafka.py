"""Kafka clients against seglogd's listener and against Apache Kafka's own broker, side by side in one
run over loopback, beside the mount's append.

The broker (KRaft, one node, the version tests/oracle uses, from scripts/kafka-oracle.sh's cache, a
server's JVM options) is the floor the clients put under any server on this machine: the same client
loop against each, so a target the broker misses too is the client's or the machine's, not seglogd's.

- ``cat`` of 100-byte lines into ``append`` (records/s), in interleaved rounds: the mount's write path
  with the listener off, on and idle, while a confluent-kafka consumer-group member reads that log
  through the listener, while another process keeps the share of a core that consumer used busy (what
  the consumer's own work costs the append on this machine), and while a consumer reads a backlog
  from the broker
- confluent-kafka producer (its defaults, acks=1) and consumer: records/s of 100-byte records
- end-to-end latency p50/p99 at 10,000 records/s (produce -> a consumer's poll), confluent-kafka
  defaults, and with ``linger.ms=0`` and idempotence (at most 5 requests in flight)
- kcat produce (``-l`` a file of lines) and consume (``-e``), records/s
- raw Produce v9 and Fetch v12 loops with no client library (the server's side alone)
- the floor asyncio puts under the listener: an asyncio server on the same kind of loop reading 1 MiB
  frames and answering each with a small one (what a Produce costs the loop with no work), in
  100-byte-record equivalents per second

Usage: ``python bench/kafka.py [--records 1000000]`` (needs FUSE, kcat, Java 17 and the Kafka cache;
run as a user who may mount).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from kafka_clients import VALUE, confluent_consume, confluent_produce
from seglogd_process import port_of, start_seglogd, stop_seglogd, write_config
from support.kafka_broker import kafka_version, running_broker

RECORD_ON_WIRE = 108  # a 100-byte value without key or headers in a v2 batch: 8 bytes of framing
#: the broker as a server runs it (kafka-server-start.sh's heap and GC), not the tests' quick-start JVM
BROKER_JVM = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")


GROUP_READER = """
import sys
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2] + "-readers",
                     "auto.offset.reset": "earliest", "enable.auto.commit": True})
consumer.subscribe([sys.argv[2]])
print("ready", flush=True)
while True:
    consumer.consume(10000, 0.5)
"""


BACKLOG_READER = """
import sys
from confluent_kafka import Consumer, TopicPartition
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "backlog", "enable.auto.commit": False})
consumer.assign([TopicPartition(sys.argv[2], 0, 0)])
while not consumer.consume(10000, 0.5):
    pass
print("ready", flush=True)  # reading a backlog now: busy for the whole append
while True:
    consumer.consume(10000, 0.5)
"""


BURNER = """
import sys, time
share = float(sys.argv[1])  # of one core: busy that part of every 10 ms
print("ready", flush=True)
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < 0.01 * share:
        pass
    time.sleep(0.01 * (1 - share))
"""


def mount_append_while_burning(mount: Path, lines: Path, n: int, log: str, share: float) -> float:
    """``mount_append`` while another process keeps ``share`` of a core busy (no Kafka at all)."""
    burner = subprocess.Popen([sys.executable, "-c", BURNER, str(share)], stdout=subprocess.PIPE, text=True)
    try:
        assert burner.stdout is not None
        burner.stdout.readline()
        return mount_append(mount, lines, n, log)
    finally:
        burner.kill()
        burner.wait()


def mount_append(mount: Path, lines: Path, n: int, log: str) -> float:
    (mount / log).mkdir(exist_ok=True)
    os.sync()  # no writeback of what came before competes with this append
    start = time.perf_counter()
    subprocess.run(f"cat {lines} > {mount}/{log}/append", shell=True, check=True)
    return n / (time.perf_counter() - start)


def mount_append_while_read(
    server: str, topic: str, mount: Path, lines: Path, n: int, log: str, *, backlog: bool = False
) -> tuple[float, float]:
    """``mount_append`` while a consumer-group member follows ``topic`` of ``server`` (the log being
    appended), or with ``backlog`` while a consumer is reading the records ``topic`` already holds;
    and the share of a core the consumer used meanwhile."""
    script = BACKLOG_READER if backlog else GROUP_READER
    reader = subprocess.Popen([sys.executable, "-c", script, server, topic], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout is not None
        reader.stdout.readline()
        if not backlog:
            time.sleep(2)  # joined, assigned, its fetch parked
        before, start = cpu_seconds(reader.pid), time.perf_counter()
        rate = mount_append(mount, lines, n, log)
        busy = (cpu_seconds(reader.pid) - before) / (time.perf_counter() - start)
        return rate, busy
    finally:
        reader.kill()
        reader.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LATENCY_CONSUMER = """
import struct, sys, time
from confluent_kafka import Consumer, TopicPartition
server, topic, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = Consumer({"bootstrap.servers": server, "group.id": "lat", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 100})
consumer.assign([TopicPartition(topic, 0, 0)])
print("ready", flush=True)
latencies, deadline = [], time.monotonic() + 120
while len(latencies) < total and time.monotonic() < deadline:
    msg = consumer.poll(0.5)  # consume(n, t) would wait for n records: poll returns each at once
    if msg is not None and msg.error() is None:
        latencies.append(time.perf_counter() - struct.unpack(">d", msg.value()[:8])[0])
consumer.close()
print(" ".join(f"{x * 1000:.3f}" for x in latencies))
"""


def end_to_end(server: str, topic: str, rate: int, seconds: float, **settings: object) -> tuple[float, float]:
    """p50 and p99 milliseconds from produce() to a consumer's poll (another process: CLOCK_MONOTONIC is
    shared), at ``rate`` records/s."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server, "acks": "1", **settings})
    producer.list_topics(topic, timeout=10)
    total = int(rate * seconds)
    consumer = subprocess.Popen([sys.executable, "-c", LATENCY_CONSUMER, server, topic, str(total)],
                                stdout=subprocess.PIPE, text=True)
    assert consumer.stdout is not None
    consumer.stdout.readline()
    time.sleep(1)  # its first fetch is parked
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, struct.pack(">d", time.perf_counter()) + VALUE[8:])
        producer.poll(0)
    producer.flush(30)
    out, _ = consumer.communicate(timeout=150)
    ms = sorted(float(x) for x in out.split())
    return statistics.median(ms), ms[int(len(ms) * 0.99) - 1]


def kcat_rates(server: str, topic: str, lines: Path, n: int) -> tuple[float, float]:
    start = time.perf_counter()
    subprocess.run(["kcat", "-b", server, "-P", "-t", topic, "-l", str(lines)], check=True)
    produce = n / (time.perf_counter() - start)
    start = time.perf_counter()
    subprocess.run(f"kcat -b {server} -C -t {topic} -e -q -f '%s\\n' > /dev/null", shell=True, check=True)
    return produce, n / (time.perf_counter() - start)


def raw_produce_rate(port: int, topic: str, n: int, per_batch: int = 9000) -> float:
    """Records/s the listener appends from Produce v9 requests of one ~1 MiB batch each (acks=1, up to
    5 in flight as librdkafka sends them): its side of producing, without a client's per-record work."""
    from kio.index import load_request_schema

    from seglogfs.kafka.messages import encode, make, nested
    from seglogfs.records import encode_values

    cls = load_request_schema(0, 9)
    batch = encode_values([VALUE] * per_batch, 0, int(time.time() * 1000))
    part = make(nested(cls, "PartitionProduceData"), index=0, records=batch)
    data = make(nested(cls, "TopicProduceData"), name=topic, partition_data=(part,))
    body = struct.pack(">hhih", 0, 9, 1, -1) + b"\0" + encode(
        make(cls, transactional_id=None, acks=1, timeout=timedelta(seconds=30), topic_data=(data,)))
    frame = struct.pack(">i", len(body)) + body
    requests = max(n // per_batch, 1)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        stream = sock.makefile("rb")
        sent = answered = 0
        start = time.perf_counter()
        while answered < requests:
            while sent < requests and sent - answered < 5:
                sock.sendall(frame)
                sent += 1
            (size,) = struct.unpack(">i", stream.read(4))
            stream.read(size)
            answered += 1
        elapsed = time.perf_counter() - start
    return requests * per_batch / elapsed


def raw_fetch_rate(port: int, topic: str, n: int, max_bytes: int = 1 << 20) -> float:
    """Records/s a client reading whole Fetch responses (1 MiB each) gets: the listener's side of
    consuming, without a client library's per-record work."""
    from kio.index import load_request_schema, load_response_schema
    from kio.serial import entity_reader

    from seglogfs.kafka.messages import encode, make, nested
    from seglogfs.records import iter_batch_headers

    cls = load_request_schema(1, 12)
    reader = entity_reader(load_response_schema(1, 12))
    got, offset = 0, 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        stream = sock.makefile("rb")
        start = time.perf_counter()
        while got < n:
            part = make(nested(cls, "FetchPartition"), partition=0, fetch_offset=offset,
                        partition_max_bytes=max_bytes)
            topics = (make(nested(cls, "FetchTopic"), topic=topic, partitions=(part,)),)
            body = struct.pack(">hhih", 1, 12, 1, -1) + b"\0" + encode(
                make(cls, max_wait=timedelta(0), min_bytes=1, max_bytes=max_bytes, topics=topics,
                     forgotten_topics_data=()))
            sock.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", stream.read(4))
            response, _ = reader(stream.read(size), 5)
            records = response.responses[0].partitions[0].records
            for header in iter_batch_headers(records):
                got += header.records_count
                offset = header.last_offset + 1
        elapsed = time.perf_counter() - start
    return got / elapsed


FLOOR_SERVER = """
import asyncio, struct, sys

async def serve(reader, writer):
    answer = struct.pack(">i", 12) + bytes(12)
    try:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            writer.write(answer)
            await writer.drain()
    except asyncio.IncompleteReadError:
        writer.close()

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0, limit=1 << 20)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def asyncio_floor(frames: int = 400, frame_size: int = 1 << 20) -> float:
    """100-byte-record equivalents/s an asyncio server process takes in as 1 MiB frames, answering
    each, 5 in flight (the raw Produce loop's pattern, with no work per frame)."""
    server = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        frame = struct.pack(">i", frame_size) + b"\0" * frame_size
        with socket.create_connection(("127.0.0.1", port)) as sock:
            stream = sock.makefile("rb")
            sent = answered = 0
            start = time.perf_counter()
            while answered < frames:
                while sent < frames and sent - answered < 5:
                    sock.sendall(frame)
                    sent += 1
                stream.read(16)
                answered += 1
            elapsed = time.perf_counter() - start
    finally:
        server.kill()
        server.wait()
    return frames * frame_size / RECORD_ON_WIRE / elapsed


def client_rows(server: str, lines: Path, n: int, latency_seconds: float) -> list[tuple[str, str]]:
    """The client figures against one server (seglogd's listener or the broker), as table rows."""
    rows = [("confluent-kafka produce, defaults, acks=1", f"{confluent_produce(server, 'p', n):,.0f} rec/s"),
            ("confluent-kafka consume", f"{confluent_consume(server, 'p', n):,.0f} rec/s")]
    port = int(server.rsplit(":", 1)[1])
    rows.append(("raw Produce v9 loop, ~1 MiB batches, 5 in flight",
                 f"{raw_produce_rate(port, 'p', n):,.0f} rec/s"))
    rows.append(("raw Fetch v12 loop, 1 MiB responses", f"{raw_fetch_rate(port, 'p', n):,.0f} rec/s"))
    p50, p99 = end_to_end(server, "lat", 10_000, latency_seconds)
    rows.append(("end-to-end at 10,000 rec/s, defaults (linger.ms 5)", f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"))
    p50, p99 = end_to_end(server, "lat0", 10_000, latency_seconds, **{
        "linger.ms": 0, "enable.idempotence": True, "acks": "all"})
    rows.append(("end-to-end at 10,000 rec/s, linger.ms=0, idempotent",
                 f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"))
    produce, consume = kcat_rates(server, "k", lines, n)
    rows.append(("kcat produce (-l file)", f"{produce:,.0f} rec/s"))
    rows.append(("kcat consume (-e)", f"{consume:,.0f} rec/s"))
    return rows


def median_row(
    what: str, figures: list[float], off: float, notes: list[str] | None = None
) -> tuple[str, str]:
    """A mount row: the median of the rounds, its ratio to the append with the listener off, the rounds."""
    middle = statistics.median(figures)
    ratio = f" ({middle / off:.2f}x)" if off else ""
    rounds = ", ".join(f"{x / 1e6:.2f}" + (f" [{note}]" if notes else "") for x, note in
                       zip(figures, notes or [""] * len(figures), strict=True))
    return what, f"{middle:,.0f} rec/s{ratio}; rounds (M/s): {rounds}"


def mount_rows(server: str, broker: str, mount: Path, lines: Path, n: int, rounds: int,
               off: list[float]) -> list[tuple[str, str]]:
    """The mount's append with the listener on: idle, under a consumer of the log it writes, and under
    a consumer reading a backlog from the broker, interleaved round by round."""
    idle, read, floor, burnt, read_cpu, floor_cpu = [], [], [], [], [], []
    for r in range(rounds):
        idle.append(mount_append(mount, lines, n, f"idle{r}-0"))
        (mount / f"read{r}-0").mkdir()  # the consumer is assigned the log before the append starts
        rate, busy = mount_append_while_read(server, f"read{r}", mount, lines, n, f"read{r}-0")
        read.append(rate)
        read_cpu.append(f"consumer {busy:.0%} of a core")
        burnt.append(mount_append_while_burning(mount, lines, n, f"burn{r}-0", min(busy, 1.0)))
        rate, busy = mount_append_while_read(broker, "backlog", mount, lines, n, f"floor{r}-0", backlog=True)
        floor.append(rate)
        floor_cpu.append(f"consumer {busy:.0%} of a core")
    base = statistics.median(off)
    return [
        median_row("mount: cat 100-byte lines > append, listener off", off, 0),
        median_row("  the same, listener on and idle", idle, base),
        median_row("  while a consumer-group member reads that log through the listener",
                   read, base, read_cpu),
        median_row("  while another process burns the consumer's share of a core (the machine's floor)",
                   burnt, base, [note.replace("consumer", "burning") for note in read_cpu]),
        median_row("  while a consumer reads a backlog from the Kafka broker", floor, base, floor_cpu),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the mount's appends")
    args = parser.parse_args()
    n = args.records
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp:
        base = Path(tmp)
        lines = base / "lines.txt"
        lines.write_bytes((b"y" * 99 + b"\n") * n)
        mount = base / "mnt"
        with running_broker(base / "broker", jvm_options=BROKER_JVM) as broker:
            backlog = ["kcat", "-b", broker.bootstrap, "-P", "-t", "backlog", "-l", str(lines)]
            subprocess.run(backlog, check=True)
            config = write_config(base / "off.yaml", base / "data-off", mount, {"segment.bytes": "1GiB"}, {})
            proc = start_seglogd(config, mount, "multi")
            try:
                off = [mount_append(mount, lines, n, f"off{r}-0") for r in range(args.rounds)]
            finally:
                stop_seglogd(proc, mount)
            config = write_config(base / "seglogfs.yaml", base / "data", mount, {"segment.bytes": "1GiB"}, {},
                                  kafka={"listeners": "PLAINTEXT://127.0.0.1:0",
                                         "group.initial.rebalance.delay.ms": 0})  # as the broker
            proc = start_seglogd(config, mount, "multi")
            try:
                server = f"127.0.0.1:{port_of(base / 'seglogd.stderr')}"
                appends = mount_rows(server, broker.bootstrap, mount, lines, n, args.rounds, off)
                seglogd_rows = client_rows(server, lines, n, args.latency_seconds)
                kafka_rows = client_rows(broker.bootstrap, lines, n, args.latency_seconds)
            finally:
                stop_seglogd(proc, mount)
        asyncio_rate = asyncio_floor()
    width = max(len(what) for what, _ in seglogd_rows)
    print(f"{n:,} records of 100 bytes, loopback")
    print(f"{'':<{width}}  {'seglogd':>28}  {'Apache Kafka ' + (kafka_version() or ''):>28}")
    for (what, ours), (_, theirs) in zip(seglogd_rows, kafka_rows, strict=True):
        print(f"{what:<{width}}  {ours:>28}  {theirs:>28}")
    print(f"{'asyncio floor: 1 MiB frames in, 5 in flight, one answer each':<{width}}  "
          f"{asyncio_rate:,.0f} rec/s equiv.")
    for what, figure in appends:
        print(f"{what}\n    {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

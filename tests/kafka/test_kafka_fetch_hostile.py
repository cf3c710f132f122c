"""Fetch's zero-copy path against hostile clients and files: clients that vanish or stop reading
mid-response, many large partitions, a segment cut under the daemon."""

from __future__ import annotations

import os
import resource
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from support.kafka_certs import make_certs
from support.kafka_fixture import kafka_port, start_kafka_daemon
from support.kafka_wire import WireClient
from support.mount_fixture import Seglogd, fuse_required, make_seglogd

from seglogfs.config import LogConfig
from seglogfs.kafka.messages import make
from seglogfs.log import Log
from seglogfs.records import iter_batch_headers

pytestmark = fuse_required

BIG = "big-0"
PARTITIONS = 40
NOFILE = 512  # the daemon's soft and hard RLIMIT_NOFILE


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    logs = {BIG: {}, "sealed-0": {"segment.bytes": "1MiB"}, **{f"many-{p}": {} for p in range(PARTITIONS)}}
    daemon = make_seglogd(tmp_path_factory.mktemp("fetch"), logs=logs,
                          defaults={"segment.bytes": "64MiB", "max.message.bytes": 1 << 20})
    daemon.settings["kafka"] = {"listeners": "PLAINTEXT://127.0.0.1:0"}
    daemon.write_config()
    daemon.extra["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
    daemon.start()
    daemon.extra["port"] = kafka_port(daemon)
    try:
        line = b"%08d " + b"x" * 90 + b"\n"
        data = b"".join(line % i for i in range(60_000))  # about 6 MB
        for at in range(0, len(data), 500_000):
            with open(daemon.mount / BIG / "append", "ab") as f:
                f.write(data[at:at + 500_000])
        for p in range(PARTITIONS):
            with open(daemon.mount / f"many-{p}" / "append", "ab") as f:
                f.write(b"".join(b"p%02d %06d %s\n" % (p, i, b"m" * 40) for i in range(1000)))
        yield daemon
    finally:
        daemon.cleanup()


def _fetch(version: int, asks: list[tuple[str, int, int]], max_bytes: int = 50 << 20,
           isolation: int = 0) -> object:
    cls = load_request_schema(1, version)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partitions"].type.__args__[0]
    topics = tuple(
        make(topic_cls, topic=log.rsplit("-", 1)[0],
             partitions=(make(part_cls, partition=int(log.rsplit("-", 1)[1]), fetch_offset=offset,
                              partition_max_bytes=limit),))
        for log, offset, limit in asks
    )
    return make(cls, replica_id=-1, max_wait=timedelta(0), min_bytes=1, max_bytes=max_bytes,
                isolation_level=isolation, topics=topics, forgotten_topics_data=())


def _fds(daemon: Seglogd) -> int:
    assert daemon.proc is not None
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))


def _segment(daemon: Seglogd, log: str) -> bytes:
    return (daemon.data_dir / log / "00000000000000000000.log").read_bytes()


def _by_log(response: object) -> dict[str, object]:
    """A Fetch response's partitions by log name (topic-partition)."""
    return {f"{t.topic}-{p.partition_index}": p for t in response.responses for p in t.partitions}  # type: ignore[attr-defined]


def _healthy(daemon: Seglogd) -> None:
    assert daemon.proc is not None and daemon.proc.poll() is None
    client = WireClient(daemon.extra["port"])
    try:
        response = client.request(1, 12, _fetch(12, [(BIG, 0, 40_000)]))
        [data] = response.responses[0].partitions
        assert data.error_code == ErrorCode.none
        assert data.records == _segment(daemon, BIG)[:len(data.records)]
    finally:
        client.close()


def test_many_large_partitions_are_each_their_segment_bytes(daemon: Seglogd) -> None:
    """More large partitions than a response sends from files: every one is its bytes."""
    client = WireClient(daemon.extra["port"])
    for version in (4, 12):
        asks = [(f"many-{p}", 0, 1 << 20) for p in range(PARTITIONS)]
        response = client.request(1, version, _fetch(version, asks))
        got = _by_log(response)
        for p in range(PARTITIONS):
            data = got[f"many-{p}"]
            assert data.error_code == ErrorCode.none
            assert data.records == _segment(daemon, f"many-{p}")
    client.close()


def test_clients_that_vanish_or_stall_mid_response_leak_nothing(daemon: Seglogd) -> None:
    """Clients closing or resetting mid-response, or stalled then closing: no descriptor left, nothing
    logged as an error, and the daemon serves on."""
    _healthy(daemon)
    before, logged = _fds(daemon), len(daemon.stderr())
    request = _fetch(12, [(BIG, 0, 50 << 20)] + [(f"many-{p}", 0, 1 << 20) for p in range(3)])
    for i in range(30):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", daemon.extra["port"]))
        client = WireClient.__new__(WireClient)
        client.sock, client.correlation = sock, 0
        client.send_raw(client.frame(1, 12, request) * 2)
        if i % 3 == 0:
            sock.recv(1000)
        elif i % 3 == 1:
            time.sleep(0.05)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0) if i % 2 else
                        struct.pack("ii", 0, 0))
        sock.close()
    deadline = time.monotonic() + 10
    while _fds(daemon) > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _fds(daemon) <= before
    _healthy(daemon)
    assert "ERROR" not in daemon.stderr()[logged:]  # a client going away is no error of the daemon's


def test_a_slow_reader_gets_every_pipelined_frame_whole(daemon: Seglogd) -> None:
    """A reader with a small buffer: large spliced frames and small ones after them, intact."""
    client = _small_buffer_client(daemon, timeout=30)
    segment = _segment(daemon, BIG)
    asks = [(0, 3 << 20), (100, 10), (30_000, 1 << 20), (59_999, 1)]
    for version in (4, 7, 11, 12):
        frames = [client.frame(1, version, _fetch(version, [(BIG, offset, limit)])) for offset, limit in asks]
        client.send_raw(b"".join(frames))
        for correlation in range(client.correlation - len(asks) + 1, client.correlation + 1):
            response = client.read_response(1, version, correlation)
            [data] = response.responses[0].partitions
            assert data.error_code == ErrorCode.none
            records = data.records
            assert records and records in segment
    client.close()


def _small_buffer_client(daemon: Seglogd, timeout: float = 20) -> WireClient:
    """A connection with a 4 KiB receive buffer: a reader that stalls the daemon's sends."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", daemon.extra["port"]))
    sock.settimeout(timeout)
    client = WireClient.__new__(WireClient)
    client.sock, client.correlation = sock, 0
    return client


def test_a_segment_cut_while_it_is_sent_never_completes_the_frame(daemon: Seglogd) -> None:
    """The segment file cut (``truncate -s``) while a stalled client's response is being sent from it:
    the frame is never completed (the connection ends), its bytes up to the cut are true, and the
    daemon serves on. (Bytes past the cut already queued on the socket are the file's pages, which
    the kernel may zero: docs/kafka-listener.md, Fetch.)"""
    log = "cut-0"
    (daemon.mount / log).mkdir()
    data = b"".join(b"cut %06d %s\n" % (i, b"c" * 90) for i in range(30_000))
    for at in range(0, len(data), 500_000):
        with open(daemon.mount / log / "append", "ab") as f:
            f.write(data[at:at + 500_000])
    request = _fetch(12, [(log, 0, 50 << 20)])
    whole = WireClient(daemon.extra["port"])
    whole.send_raw(whole.frame(1, 12, request))
    expected = whole.recv_frame()
    whole.close()
    segment = _segment(daemon, log)
    assert expected is not None and segment in expected
    client = _small_buffer_client(daemon)
    client.send_raw(client.frame(1, 12, request))
    time.sleep(0.3)  # the daemon is now blocked sending from the file
    cut = len(segment) // 2
    os.truncate(daemon.data_dir / log / "00000000000000000000.log", cut)
    got = b""
    try:
        while chunk := client.sock.recv(1 << 16):
            got += chunk
    except ConnectionResetError:
        pass
    client.close()
    assert len(got) < 4 + len(expected)
    true = expected.index(segment) + cut  # the frame's bytes before the cut's position
    assert got[4:4 + true] == expected[:min(true, len(got) - 4)]
    _healthy(daemon)

def test_stalled_clients_never_take_the_daemons_descriptors(daemon: Seglogd) -> None:
    """Clients that stop reading large responses hold each response's files: together they stay
    within a share of RLIMIT_NOFILE (past it partitions are copied), so other clients' fetches and the
    mount keep working and every partition is still its segment bytes."""
    before = _fds(daemon)
    asks = [(BIG, 0, 50 << 20)] + [(f"many-{p}", 0, 1 << 20) for p in range(PARTITIONS)]
    stalled = []
    for _ in range(NOFILE // 32):
        client = _small_buffer_client(daemon)
        client.send_raw(client.frame(1, 12, _fetch(12, asks)))
        stalled.append(client)
    time.sleep(0.5)  # every response now blocked on its client
    try:
        assert _fds(daemon) - before <= NOFILE // 4
        client = WireClient(daemon.extra["port"])
        response = client.request(1, 12, _fetch(12, asks))
        client.close()
        got = _by_log(response)
        for log, _, _ in asks:
            assert got[log].error_code == ErrorCode.none, log
            assert got[log].records == _segment(daemon, log)[:len(got[log].records)]
        for p in range(PARTITIONS):
            assert (daemon.mount / f"many-{p}" / "records").read_bytes().count(b"\n") == 1000
    finally:
        for client in stalled:
            client.close()
    deadline = time.monotonic() + 10
    while _fds(daemon) > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _fds(daemon) <= before


def test_mixed_responses_in_every_version_are_whole_batches_within_the_limits(daemon: Seglogd) -> None:
    """Sent-from-file, copied, empty and failed partitions in one response, v4..v12, pipelined: each
    frame decodes, each partition is its segment's whole batches from the fetch offset, the first
    partition with data whole, the rest within what is left of the response's max_bytes."""
    segments = {log: _segment(daemon, log) for log in [BIG] + [f"many-{p}" for p in range(4)]}
    headers = {log: list(iter_batch_headers(data)) for log, data in segments.items()}
    cases = [  # (asks, response max_bytes)
        ([(BIG, 30_000, 200_000), ("nosuch-0", 0, 1000), ("many-0", 0, 1 << 20), ("many-1", 1000, 1 << 20),
          ("many-2", 10, 100), ("many-3", 500, 40_000)], 50 << 20),
        ([("many-1", 1000, 1 << 20), (BIG, 59_000, 1 << 20), ("many-0", 0, 1 << 20), ("many-2", 0, 1 << 20)],
         120_000),
        ([("many-3", 0, 10), (BIG, 0, 1 << 20), ("many-0", 0, 1 << 20)], 1_200_000),
    ]
    client = WireClient(daemon.extra["port"])
    for version in range(4, 13):
        frames = [client.frame(1, version, _fetch(version, asks, max_bytes)) for asks, max_bytes in cases]
        client.send_raw(b"".join(frames))
        for correlation, (asks, max_bytes) in enumerate(cases, start=client.correlation - len(cases) + 1):
            response = client.read_response(1, version, correlation)
            got = _by_log(response)
            left, first = max_bytes, True
            for log, offset, limit in asks:
                data = got[log]
                if log not in segments:
                    assert data.error_code != ErrorCode.none and not data.records
                    continue
                assert data.error_code == ErrorCode.none, (version, log)
                records = data.records or b""
                batches = [h for h in headers[log] if h.last_offset >= offset]
                if not batches:
                    assert records == b""
                    continue
                start = batches[0].position
                assert records == segments[log][start:start + len(records)], (version, log)
                bound = min(limit, left)
                ends = [h.position + h.size - start for h in batches]
                fitting = [end for end in ends if end <= bound]
                want = max(fitting, default=ends[0] if first else 0)
                assert len(records) == want, (version, log, len(records), want)
                left -= len(records)
                first = first and not records
    client.close()


def test_a_read_only_daemon_fetches_from_a_segment_without_its_index(tmp_path: Path) -> None:
    """A read-only daemon over a segment whose .index is gone (lookups scan): a Fetch within a byte
    limit is still answered with the whole batches that fit, not a closed connection."""
    data_dir = tmp_path / "data"
    with Log.open(data_dir / "noindex-0", LogConfig(), create=True) as log:
        for chunk in range(50):
            log.append_values([b"r %d %d %s" % (chunk, i, b"i" * 200) for i in range(40)])
    (data_dir / "noindex-0" / "00000000000000000000.index").unlink()
    daemon = make_seglogd(tmp_path, data_dir=data_dir, read_only=True, logs={"noindex-0": {}})
    daemon.settings["kafka"] = {"listeners": "PLAINTEXT://127.0.0.1:0"}
    daemon.write_config()
    try:
        daemon.start()
        client = WireClient(kafka_port(daemon))
        response = client.request(1, 12, _fetch(12, [("noindex-0", 100, 50_000)]))
        client.close()
        assert response is not None, daemon.stderr()
        [data] = response.responses[0].partitions
        assert data.error_code == ErrorCode.none
        segment = _segment(daemon, "noindex-0")
        ends = [h.position + h.size for h in iter_batch_headers(segment)]
        first = next(h for h in iter_batch_headers(segment) if h.last_offset >= 100).position
        assert len(data.records) == max(end for end in ends if end - first <= 50_000) - first
        assert data.records == segment[first:first + len(data.records)]
    finally:
        daemon.cleanup()


def test_tls_fetches_from_a_segments_start_are_its_bytes_every_time(tmp_path: Path) -> None:
    """Over TLS asyncio reads each range from its descriptor's file position and seeks only to a
    non-zero start: fetches of a segment's first batches, again and again, on two connections taking
    turns, are each the segment's bytes (not cut short after the first one)."""
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    daemon = start_kafka_daemon(tmp_path, logs={"tls-0": {}}, kafka={
        "listeners": "SSL://127.0.0.1:0", "ssl.certfile": str(certs.server),
        "ssl.keyfile": str(certs.server_key), "ssl.cafile": str(certs.ca), "ssl.client.auth": "required",
    })
    try:
        with open(daemon.mount / "tls-0" / "append", "ab") as f:
            f.write(b"".join(b"tls %06d %s\n" % (i, b"t" * 90) for i in range(2000)))
        segment = _segment(daemon, "tls-0")
        context = ssl.create_default_context(cafile=str(certs.ca))
        context.load_cert_chain(str(certs.client), str(certs.client_key))
        context.check_hostname = False
        clients = []
        for _ in range(2):
            client = WireClient.__new__(WireClient)
            client.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", daemon.extra["port"])))
            client.sock.settimeout(20)
            client.correlation = 0
            clients.append(client)
        for turn in range(6):
            client = clients[turn % 2]
            offset = 0 if turn % 3 else 1000
            response = client.request(1, 12, _fetch(12, [("tls-0", offset, 1 << 20)]))
            assert response is not None, f"turn {turn}: the connection closed"
            [data] = response.responses[0].partitions
            assert data.error_code == ErrorCode.none
            assert len(data.records) >= 32 << 10 and data.records in segment
        for client in clients:
            client.close()
    finally:
        daemon.cleanup()


def test_a_segment_cut_before_a_fetch_is_a_partition_error_whatever_the_range_size(daemon: Seglogd) -> None:
    """A sealed segment cut under the daemon, then fetched across the cut: a small range (copied) and
    a large one (sent from the file) both get CORRUPT_MESSAGE for that partition, on a connection that
    stays open for the other partitions, rather than a connection closed at every retry."""
    log = "sealed-0"
    with open(daemon.mount / log / "append", "ab") as f:  # a batch a write; a roll at 1 MiB
        for chunk in range(120):
            f.write(b"".join(b"sealed %d %06d %s\n" % (chunk, i, b"s" * 90) for i in range(100)))
            f.flush()
    files = sorted((daemon.data_dir / log).glob("*.log"))
    assert len(files) >= 2
    first = files[0].read_bytes()
    cut = len(first) // 2
    os.truncate(files[0], cut)
    across = next(h for h in iter_batch_headers(first) if h.position + h.size > cut)
    before = next(h for h in iter_batch_headers(first) if h.position + h.size == across.position)
    small = before.size + across.size
    assert small < 32 << 10
    client = WireClient(daemon.extra["port"])
    for offset, limit in ((before.base_offset, small), (0, 1 << 20)):  # copied, then from the file
        asks = [(log, offset, limit), ("many-0", 0, 1 << 20)]
        response = client.request(1, 12, _fetch(12, asks))
        assert response is not None, f"limit {limit}: the connection closed"
        got = _by_log(response)
        assert got[log].error_code == ErrorCode.corrupt_message, limit
        assert got["many-0"].error_code == ErrorCode.none
        assert got["many-0"].records == _segment(daemon, "many-0")
    client.close()

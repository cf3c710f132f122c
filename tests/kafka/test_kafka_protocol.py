"""The listener against what real clients never send: errors as Kafka's codes, broken frames as a
closed connection, and the daemon and every log intact afterwards."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from support.kafka_fixture import start_kafka_daemon
from support.kafka_wire import WireClient, produce_request, producer_batch
from support.mount_fixture import Seglogd, fuse_required, sh

from seglogfs.kafka.api_versions import SUPPORTED
from seglogfs.kafka.messages import make
from seglogfs.records import iter_batch_headers

pytestmark = fuse_required

MAX_CONNECTIONS = 8
MAX_REQUEST = 1 << 20


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    daemon = start_kafka_daemon(
        tmp_path_factory.mktemp("wire"),
        logs={"events-0": {}},
        defaults={"segment.bytes": "1MiB", "max.message.bytes": 10_000},
        kafka={"max.connections": MAX_CONNECTIONS, "socket.request.max.bytes": MAX_REQUEST},
    )
    sh(f"printf 'one\\ntwo\\nthree\\n' >> {daemon.mount}/events-0/append", check=True)
    try:
        yield daemon
    finally:
        daemon.cleanup()


def _client(daemon: Seglogd) -> WireClient:
    return WireClient(daemon.extra["port"])


def _produce(daemon: Seglogd, records: bytes, topic: str = "events", version: int = 9) -> tuple[int, int]:
    client = _client(daemon)
    try:
        response = client.request(0, version, produce_request(version, topic, records))
    finally:
        client.close()
    [part] = response.responses[0].partition_responses
    return part.error_code.value, part.base_offset


def _records(daemon: Seglogd, log: str = "events-0") -> bytes:
    return (daemon.mount / log / "records").read_bytes()


def test_api_versions_announces_exactly_what_is_served(daemon: Seglogd) -> None:
    client = _client(daemon)
    for version in (0, 3, 4):
        cls = load_request_schema(18, version)
        request = make(cls, client_software_name="wire", client_software_version="1")
        response = client.request(18, version, request)
        assert response.error_code == ErrorCode.none
        assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == SUPPORTED
    client.close()


def test_api_versions_of_an_unknown_version_answers_in_v0(daemon: Seglogd) -> None:
    client = _client(daemon)
    client.send_raw(struct.pack(">ihhih", 10, 18, 99, 7, -1))
    frame = client.recv_frame()
    assert frame is not None
    correlation, error = struct.unpack_from(">ih", frame, 0)
    assert (correlation, error) == (7, ErrorCode.unsupported_version.value)
    client.close()


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_bad_crc_is_corrupt_message_and_nothing_is_appended(daemon: Seglogd, version: int) -> None:
    before = _records(daemon)
    batch = bytearray(producer_batch([b"good", b"bad"]))
    batch[-1] ^= 0xFF  # inside the records: the CRC no longer matches
    assert _produce(daemon, bytes(batch), version=version)[0] == ErrorCode.corrupt_message.value
    truncated = producer_batch([b"torn"])[:-3]
    assert _produce(daemon, truncated, version=version)[0] == ErrorCode.corrupt_message.value
    assert _records(daemon) == before


def test_errors_are_kafka_codes(daemon: Seglogd) -> None:
    before = _records(daemon)
    missing = _produce(daemon, producer_batch([b"x"]), topic="nowhere")[0]
    assert missing == ErrorCode.unknown_topic_or_partition.value
    too_large = producer_batch([os.urandom(20_000)])
    assert _produce(daemon, too_large)[0] == ErrorCode.message_too_large.value
    two = producer_batch([b"a"]) + producer_batch([b"b"])
    assert _produce(daemon, two)[0] == ErrorCode.invalid_record.value
    assert _records(daemon) == before
    error, offset = _produce(daemon, producer_batch([b"four"]))
    assert (error, offset) == (0, 3)
    assert _records(daemon) == before + b"four\n"


def test_idempotent_producer_retries_and_gaps(daemon: Seglogd) -> None:
    sh(f"mkdir {daemon.mount}/idem-0", check=True)
    first = producer_batch([b"s0", b"s1"], producer_id=4242, epoch=0, sequence=0)
    assert _produce(daemon, first, topic="idem") == (0, 0)
    assert _produce(daemon, first, topic="idem") == (0, 0)  # a retry: its offsets, nothing appended
    gap = producer_batch([b"s5"], producer_id=4242, epoch=0, sequence=5)
    assert _produce(daemon, gap, topic="idem")[0] == ErrorCode.out_of_order_sequence_number.value
    following = producer_batch([b"s2"], producer_id=4242, epoch=0, sequence=2)
    assert _produce(daemon, following, topic="idem") == (0, 2)
    assert _records(daemon, "idem-0") == b"s0\ns1\ns2\n"


def test_fetch_and_list_offsets_by_hand(daemon: Seglogd) -> None:
    client = _client(daemon)
    cls = load_request_schema(1, 12)
    part = make(cls.__dataclass_fields__["topics"].type.__args__[0].__dataclass_fields__["partitions"]
                .type.__args__[0], partition=0, fetch_offset=1, partition_max_bytes=1 << 20)
    topic = make(cls.__dataclass_fields__["topics"].type.__args__[0], topic="events", partitions=(part,))
    request = make(cls, max_wait=timedelta(0), min_bytes=1, topics=(topic,), forgotten_topics_data=())
    response = client.request(1, 12, request)
    [data] = response.responses[0].partitions
    assert data.error_code == ErrorCode.none
    assert data.high_watermark >= 3
    out_of_range = make(type(part), partition=0, fetch_offset=10**6, partition_max_bytes=1 << 20)
    request = make(cls, max_wait=timedelta(0), min_bytes=1, forgotten_topics_data=(),
                   topics=(make(type(topic), topic="events", partitions=(out_of_range,)),))
    [data] = client.request(1, 12, request).responses[0].partitions
    assert data.error_code == ErrorCode.offset_out_of_range
    client.close()


def _fetch_request(version: int, topic: str, offset: int, max_bytes: int) -> object:
    cls = load_request_schema(1, version)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    part = make(topic_cls.__dataclass_fields__["partitions"].type.__args__[0], partition=0,
                fetch_offset=offset, partition_max_bytes=max_bytes)
    return make(cls, replica_id=-1, max_wait=timedelta(0), min_bytes=1, max_bytes=50 << 20,
                isolation_level=0, topics=(make(topic_cls, topic=topic, partitions=(part,)),),
                forgotten_topics_data=())


@pytest.mark.parametrize("version", [4, 11, 12])
def test_large_fetches_are_the_segment_bytes_whole_batches_in_pipelined_frames(
    daemon: Seglogd, version: int
) -> None:
    """Records over 32 KiB are sent from the segment file (sendfile) between encoded parts: each
    response decodes, its records are the file's bytes from the batch holding the fetch offset, whole
    batches within the limit, and the frames after it on the connection are intact."""
    topic = f"bulk{version}"
    (daemon.mount / f"{topic}-0").mkdir()
    for chunk in range(4):  # one write each: batches of at most max.message.bytes
        lines = b"".join(b"bulk %d %06d %s\n" % (chunk, i, b"b" * 50) for i in range(1500))
        with open(daemon.mount / f"{topic}-0" / "append", "ab") as f:
            f.write(lines)
    segment = (daemon.data_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    batches = list(iter_batch_headers(segment))
    asks = [(0, 100_000), (2500, 1 << 20), (5999, 40_000), (0, 40_000)]
    client = _client(daemon)
    frames = [client.frame(1, version, _fetch_request(version, topic, *ask)) for ask in asks]
    client.send_raw(b"".join(frames))  # pipelined: every request before any answer is read
    for correlation, (offset, limit) in enumerate(asks, start=client.correlation - len(asks) + 1):
        response = client.read_response(1, version, correlation)
        [data] = response.responses[0].partitions
        assert data.error_code == ErrorCode.none
        assert data.high_watermark == 6000
        first = next(h for h in batches if h.last_offset >= offset)
        ends = {h.position + h.size for h in batches}
        records = data.records
        assert records == segment[first.position:first.position + len(records)]
        assert first.position + len(records) in ends  # whole batches
        assert len(records) <= limit or len(records) == first.size
        following = next((h for h in batches if h.position == first.position + len(records)), None)
        assert following is None or len(records) + following.size > limit  # as many as fit
    client.close()


def _alive_and_intact(daemon: Seglogd, before: bytes) -> None:
    assert daemon.proc is not None and daemon.proc.poll() is None
    assert _records(daemon) == before
    cls = load_request_schema(3, 12)
    request = make(cls, topics=None, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
    deadline = time.monotonic() + 10
    response = None
    while response is None and time.monotonic() < deadline:  # closed connections may still count
        client = _client(daemon)
        response = client.request(3, 12, request)
        client.close()
    assert response is not None
    assert any(t.name == "events" for t in response.topics)


def test_broken_frames_close_the_connection_only(daemon: Seglogd) -> None:
    before = _records(daemon)
    rng = random.Random(21)
    cases = [
        struct.pack(">i", MAX_REQUEST + 1),  # over socket.request.max.bytes: closed before reading it
        struct.pack(">i", 2**31 - 1) + b"x" * 100,
        struct.pack(">i", -5),
        struct.pack(">i", 3) + b"abc",  # shorter than a header
        struct.pack(">ihhih", 10, 9999, 0, 1, -1),  # unknown API key
        struct.pack(">ihhih", 10, 0, 99, 1, -1),  # unknown Produce version
        struct.pack(">ihhih", 12, 3, 12, 1, 500) + b"xx",  # client id past the frame
    ]
    for _ in range(40):  # valid headers, random bodies
        api_key = rng.choice(sorted(SUPPORTED))
        low, high = SUPPORTED[api_key]
        head = struct.pack(">hhih", api_key, rng.randint(low, high), 1, -1)
        body = head + rng.randbytes(rng.randint(0, 300))
        cases.append(struct.pack(">i", len(body)) + body)
    for _ in range(20):  # pure noise
        cases.append(rng.randbytes(rng.randint(1, 64)))
    valid = producer_batch([b"cut"])
    request = produce_request(9, "events", valid)
    from seglogfs.kafka.messages import encode

    body = struct.pack(">hhih", 0, 9, 1, -1) + b"\0" + encode(request)
    cases.append(struct.pack(">i", len(body)) + body[: len(body) // 2])  # truncated, then closed
    for data in cases:
        client = _client(daemon)
        client.send_raw(data)
        client.sock.shutdown(socket.SHUT_WR)
        while client.recv_frame() is not None:  # an error response, or none; then closed
            pass
        client.close()
    _alive_and_intact(daemon, before)
    assert "Traceback" not in daemon.stderr()


def test_max_connections(daemon: Seglogd) -> None:
    held = [_client(daemon) for _ in range(MAX_CONNECTIONS)]
    try:
        for client in held:  # each is served
            client.send_raw(struct.pack(">ihhih", 10, 18, 0, 1, -1))
            assert client.recv_frame() is not None
        extra = _client(daemon)
        assert extra.recv_frame() is None  # closed at once
        extra.close()
    finally:
        for client in held:
            client.close()
    _alive_and_intact(daemon, _records(daemon))


def test_verify_after_everything(daemon: Seglogd) -> None:
    result = sh(f"{Path(sys.executable).parent}/seglogfs verify {daemon.data_dir}")
    assert result.returncode == 0, result.stdout + result.stderr


def test_metadata_v0_empty_list_means_every_topic(daemon: Seglogd) -> None:
    client = _client(daemon)
    cls = load_request_schema(3, 0)
    every = client.request(3, 0, make(cls, topics=()))
    client.close()
    assert "events" in {t.name for t in every.topics}


def test_fetch_max_bytes_returns_one_whole_batch_past_it(daemon: Seglogd) -> None:
    for p in (0, 1):
        sh(f"mkdir {daemon.mount}/two-{p} && echo a{p} >> {daemon.mount}/two-{p}/append "
           f"&& echo b{p} >> {daemon.mount}/two-{p}/append", check=True)
    cls = load_request_schema(1, 12)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partitions"].type.__args__[0]
    parts = tuple(make(part_cls, partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in (0, 1))
    request = make(cls, max_wait=timedelta(0), min_bytes=1, max_bytes=1, forgotten_topics_data=(),
                   topics=(make(topic_cls, topic="two", partitions=parts),))
    client = _client(daemon)
    [first, second] = client.request(1, 12, request).responses[0].partitions
    client.close()
    from seglogfs.records import iter_batch_headers

    assert [h.base_offset for h in iter_batch_headers(first.records)] == [0]  # one batch, past max_bytes
    assert second.records == b"" and second.high_watermark == 2  # nothing more once max_bytes is spent


def test_a_client_that_stops_reading_holds_only_its_connection(daemon: Seglogd) -> None:
    sh(f"mkdir {daemon.mount}/big-0 && head -c 3000000 /dev/zero | tr '\\0' 'z' | fold -w 100 "
       f"> {daemon.mount}/big-0/append", check=True)
    cls = load_request_schema(1, 12)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partitions"].type.__args__[0]
    part = make(part_cls, partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    request = make(cls, max_wait=timedelta(0), min_bytes=1, forgotten_topics_data=(),
                   topics=(make(topic_cls, topic="big", partitions=(part,)),))
    from seglogfs.kafka.messages import encode

    body = struct.pack(">hhih", 1, 12, 1, -1) + b"\0" + encode(request)
    stalled = _client(daemon)
    stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sock.settimeout(0.5)
    with contextlib.suppress(TimeoutError):
        for _ in range(200):  # ~200 MiB of answers asked for, none read
            stalled.send_raw(struct.pack(">i", len(body)) + body)
    _alive_and_intact(daemon, _records(daemon))  # another client is served meanwhile
    stalled.close()

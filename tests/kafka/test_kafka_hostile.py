"""The listener against a hostile client: topic names that alias another topic's partition, writes
to Kafka's internal topics, CreateTopics asking for a million partitions, group requests with
empty ids, absurd session timeouts and oversized commit metadata. Each answer is the code a Kafka
4.1 broker gives (checked against it), and nothing reaches the data dir."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from support.bombs import bomb
from support.kafka_fixture import restart, start_kafka_daemon
from support.kafka_wire import WireClient, produce_request, producer_batch
from support.mount_fixture import Seglogd, fuse_required
from support.record_batches import raw_v2_batch

from seglogfs.compression import Compression
from seglogfs.kafka.messages import make, nested
from seglogfs.kafka.offsets_topic import offsets_partition

pytestmark = fuse_required


FETCH_MAX_BYTES = 64 * 1024
MAX_IDLE_MS = 3000


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    started = start_kafka_daemon(
        tmp_path_factory.mktemp("hostile"), logs={},
        kafka={"fetch.max.bytes": FETCH_MAX_BYTES, "group.min.session.timeout.ms": 1000,
               "connections.max.idle.ms": MAX_IDLE_MS},
    )
    try:
        yield started
    finally:
        started.cleanup()


@pytest.fixture
def client(daemon: Seglogd) -> Iterator[WireClient]:
    wire = WireClient(daemon.extra["port"])
    try:
        yield wire
    finally:
        wire.close()


def _create(
    client: WireClient, name: str, partitions: int, *, validate_only: bool = False,
    configs: dict[str, str] | None = None,
) -> tuple[int, Any]:
    cls = load_request_schema(19, 7)
    entry_cls = nested(cls, "CreatableTopicConfig")
    entries = tuple(make(entry_cls, name=k, value=v) for k, v in (configs or {}).items())
    topic = make(nested(cls, "CreatableTopic"), name=name, num_partitions=partitions, replication_factor=1,
                 assignments=(), configs=entries)
    request = make(cls, topics=(topic,), timeout=timedelta(seconds=10), validate_only=validate_only)
    [result] = client.request(19, 7, request).topics
    return result.error_code.value, result


def _metadata(client: WireClient, name: str) -> tuple[int, int]:
    cls = load_request_schema(3, 12)
    wanted = make(nested(cls, "MetadataRequestTopic"), name=name, topic_id=None)
    request = make(cls, topics=(wanted,), allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
    [topic] = client.request(3, 12, request).topics
    return topic.error_code.value, len(topic.partitions)


def _produce(client: WireClient, topic: str, partition: int = 0) -> int:
    response = client.request(0, 9, produce_request(9, topic, producer_batch([b"x"]), partition=partition))
    [part] = response.responses[0].partition_responses
    return part.error_code.value


def _delete_records(client: WireClient, topic: str, offset: int) -> int:
    cls = load_request_schema(21, 2)
    part = make(nested(cls, "DeleteRecordsPartition"), partition_index=0, offset=offset)
    request = make(cls, topics=(make(nested(cls, "DeleteRecordsTopic"), name=topic, partitions=(part,)),),
                   timeout=timedelta(seconds=5))
    [result] = client.request(21, 2, request).topics[0].partitions
    return result.error_code.value


def _join(client: WireClient, group: str, session_ms: int) -> int:
    cls = load_request_schema(11, 9)
    protocol = make(nested(cls, "JoinGroupRequestProtocol"), name="range", metadata=b"x")
    request = make(cls, group_id=group, session_timeout=timedelta(milliseconds=session_ms),
                   rebalance_timeout=timedelta(seconds=1), member_id="", group_instance_id=None,
                   protocol_type="consumer", protocols=(protocol,), reason=None)
    return client.request(11, 9, request).error_code.value


def _commit(client: WireClient, group: str, topic: str, offset: int, metadata: str = "", *,
            member_id: str = "", generation: int = -1) -> int:
    cls = load_request_schema(8, 9)
    part = make(nested(cls, "OffsetCommitRequestPartition"), partition_index=0, committed_offset=offset,
                committed_leader_epoch=-1, committed_metadata=metadata)
    topics = (make(nested(cls, "OffsetCommitRequestTopic"), name=topic, partitions=(part,)),)
    request = make(cls, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                   group_instance_id=None, topics=topics)
    [result] = client.request(8, 9, request).topics[0].partitions
    return result.error_code.value


def _committed(client: WireClient, group: str, topic: str) -> int:
    cls = load_request_schema(9, 7)
    wanted = make(nested(cls, "OffsetFetchRequestTopic"), name=topic, partition_indexes=(0,))
    response = client.request(9, 7, make(cls, group_id=group, topics=(wanted,), require_stable=False))
    return response.topics[0].partitions[0].committed_offset


def _end_offset(daemon: Seglogd, log: str) -> int:
    return json.loads((daemon.mount / log / "info").read_text())["end_offset"]


def test_a_topic_named_like_another_topics_partition_is_its_own(daemon: Seglogd,
                                                                client: WireClient) -> None:
    assert _create(client, "alias", 2)[0] == ErrorCode.none.value
    # "alias-1" is partition 1 of "alias", not partition 0 of a topic "alias-1"
    assert _metadata(client, "alias-1") == (ErrorCode.unknown_topic_or_partition.value, 0)
    assert _produce(client, "alias-1") == ErrorCode.unknown_topic_or_partition.value
    assert _create(client, "alias-1", 1)[0] == ErrorCode.none.value
    assert _produce(client, "alias-1") == ErrorCode.none.value
    assert (daemon.mount / "alias-1-0").is_dir()
    assert _end_offset(daemon, "alias-1") == 0
    assert _end_offset(daemon, "alias-1-0") == 1


def test_clients_cannot_write_kafkas_internal_topics(daemon: Seglogd, client: WireClient) -> None:
    assert _create(client, "tracked", 1)[0] == ErrorCode.none.value
    assert _commit(client, "auditors", "tracked", 0) == ErrorCode.none.value
    partition = offsets_partition("auditors")
    log = f"__consumer_offsets-{partition}"
    before = _end_offset(daemon, log)
    assert before == 1
    invalid = ErrorCode.invalid_topic_exception.value
    response = client.request(0, 9, produce_request(9, "__consumer_offsets", producer_batch([b"forged"]),
                                                     partition=partition))
    assert response.responses[0].partition_responses[0].error_code.value == invalid
    cls = load_request_schema(21, 2)
    part = make(nested(cls, "DeleteRecordsPartition"), partition_index=partition, offset=-1)
    request = make(cls, topics=(make(nested(cls, "DeleteRecordsTopic"), name="__consumer_offsets",
                                     partitions=(part,)),), timeout=timedelta(seconds=5))
    assert client.request(21, 2, request).topics[0].partitions[0].error_code.value == invalid
    assert _end_offset(daemon, log) == before
    assert _committed(client, "auditors", "tracked") == 0


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_topics_refuses_excessive_partition_counts(daemon: Seglogd, client: WireClient,
                                                          validate_only: bool) -> None:
    policy = ErrorCode.policy_violation.value
    for count in (1_000_000, 10_000):
        name = f"huge{count}{validate_only}"
        assert _create(client, name, count, validate_only=validate_only)[0] == policy
        assert not list(daemon.data_dir.glob(f"{name}-*"))
    assert _create(client, "x" * 249, 9_999, validate_only=True)[0] == ErrorCode.none.value


def test_group_requests_with_bad_ids_timeouts_and_metadata(daemon: Seglogd, client: WireClient) -> None:
    assert _join(client, "", 10_000) == ErrorCode.invalid_group_id.value
    assert _join(client, "sessions", 1) == ErrorCode.invalid_session_timeout.value
    assert _join(client, "sessions", 10**9) == ErrorCode.invalid_session_timeout.value
    assert _join(client, "sessions", 10_000) == ErrorCode.member_id_required.value
    assert _create(client, "noted", 1)[0] == ErrorCode.none.value
    assert _commit(client, "", "noted", 3) == ErrorCode.invalid_group_id.value
    # a member id and generation of a group that does not exist
    assert _commit(client, "nogroup", "noted", 3, member_id="someone", generation=1) == \
        ErrorCode.group_id_not_found.value
    too_large = ErrorCode.offset_metadata_too_large.value
    assert _commit(client, "noters", "noted", 3, metadata="m" * 4097) == too_large
    assert _committed(client, "noters", "noted") == -1
    assert _commit(client, "noters", "noted", 4, metadata="m" * 4096) == ErrorCode.none.value
    assert _committed(client, "noters", "noted") == 4


def test_a_compressed_bomb_over_max_message_bytes_is_refused_before_decompressing(
    daemon: Seglogd, client: WireClient
) -> None:
    """A 2 MiB lz4 batch of 512 MiB of zeros: over ``max.message.bytes`` (1 MiB), so MESSAGE_TOO_LARGE
    before anything is decompressed, as Kafka checks the size first."""
    assert _create(client, "bombed", 1)[0] == ErrorCode.none.value
    area = bomb(Compression.LZ4, 512 << 20)
    assert len(area) > 1 << 20
    batch = raw_v2_batch(area, 1000, attributes=Compression.LZ4)
    response = client.request(0, 9, produce_request(9, "bombed", batch))
    assert response.responses[0].partition_responses[0].error_code.value == ErrorCode.message_too_large.value
    assert _end_offset(daemon, "bombed-0") == 0


def test_a_member_id_handed_out_expires_after_its_session_timeout(client: WireClient) -> None:
    """MEMBER_ID_REQUIRED hands out an id a client must join with within its session timeout (Kafka's
    pending member); a client asking for ids and never joining does not grow the group for ever."""
    cls = load_request_schema(11, 9)
    protocol = make(nested(cls, "JoinGroupRequestProtocol"), name="range", metadata=b"x")

    def join(member_id: str) -> Any:
        request = make(cls, group_id="pending", session_timeout=timedelta(milliseconds=1000),
                       rebalance_timeout=timedelta(seconds=1), member_id=member_id, group_instance_id=None,
                       protocol_type="consumer", protocols=(protocol,), reason=None)
        return client.request(11, 9, request)

    first = join("")
    assert first.error_code.value == ErrorCode.member_id_required.value
    time.sleep(1.5)
    # nothing is left of the group then (Kafka's Dead: no members, no offsets)
    listed = client.request(16, 4, make(load_request_schema(16, 4), states_filter=()))
    assert "pending" not in {g.group_id for g in listed.groups}
    assert join(first.member_id).error_code.value == ErrorCode.unknown_member_id.value


def test_a_sequence_below_zero_from_a_producer_is_invalid(daemon: Seglogd, client: WireClient) -> None:
    assert _create(client, "sequenced", 1)[0] == ErrorCode.none.value
    batch = producer_batch([b"a"], producer_id=4242, epoch=0, sequence=-1)
    response = client.request(0, 9, produce_request(9, "sequenced", batch))
    assert response.responses[0].partition_responses[0].error_code.value == ErrorCode.invalid_record.value
    assert _end_offset(daemon, "sequenced-0") == 0


def test_delete_records_of_a_compacted_topic_is_a_policy_violation(daemon: Seglogd,
                                                                   client: WireClient) -> None:
    assert _create(client, "kept", 1, configs={"cleanup.policy": "compact"})[0] == ErrorCode.none.value
    assert _produce(client, "kept") == ErrorCode.none.value
    assert _delete_records(client, "kept", 1) == ErrorCode.policy_violation.value
    assert json.loads((daemon.mount / "kept-0" / "info").read_text())["start_offset"] == 0
    assert _create(client, "both", 1, configs={"cleanup.policy": "compact,delete"})[0] == ErrorCode.none.value
    assert _produce(client, "both") == ErrorCode.none.value
    assert _delete_records(client, "both", 1) == ErrorCode.none.value


def test_fetch_max_bytes_of_the_listener_bounds_a_response(daemon: Seglogd, client: WireClient) -> None:
    """A client asking for 2 GiB gets at most the listener's ``fetch.max.bytes`` (Kafka's rule), not
    the rest of the segment read into memory."""
    assert _create(client, "wide", 1)[0] == ErrorCode.none.value
    for _ in range(12):
        batch = producer_batch([bytes(10_000)])
        assert client.request(0, 9, produce_request(9, "wide", batch)).responses[0].partition_responses[
            0].error_code.value == ErrorCode.none.value
    cls = load_request_schema(1, 12)
    part = make(nested(cls, "FetchPartition"), partition=0, current_leader_epoch=-1, fetch_offset=0,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=2**31 - 1)
    request = make(cls, cluster_id=None, replica_id=-1, replica_state=None, max_wait=timedelta(0),
                   min_bytes=0, max_bytes=2**31 - 1, isolation_level=0, session_id=0, session_epoch=-1,
                   topics=(make(nested(cls, "FetchTopic"), topic="wide", topic_id=None, partitions=(part,)),),
                   forgotten_topics_data=(), rack_id="")
    [answer] = client.request(1, 12, request).responses[0].partitions
    assert answer.error_code.value == ErrorCode.none.value
    assert FETCH_MAX_BYTES // 2 < len(answer.records) <= FETCH_MAX_BYTES


def test_other_connections_are_answered_while_topics_are_created(daemon: Seglogd, client: WireClient) -> None:
    """A Metadata auto-creating many topics (each log a few fsyncs) does not stall the listener: a
    request on another connection, sent after it, is answered before it."""
    assert _create(client, "bystander", 1)[0] == ErrorCode.none.value
    cls = load_request_schema(3, 12)
    entry = nested(cls, "MetadataRequestTopic")
    names = tuple(make(entry, name=f"many{i}", topic_id=None) for i in range(100))
    request = make(cls, topics=names, allow_auto_topic_creation=True,
                   include_topic_authorized_operations=False)
    finished: list[str] = []
    lock = threading.Lock()

    def creating() -> None:
        topics = client.request(3, 12, request).topics
        assert all(t.error_code.value == ErrorCode.none.value for t in topics)
        with lock:
            finished.append("create")

    worker = threading.Thread(target=creating)
    worker.start()
    try:
        time.sleep(0.1)
        other = WireClient(daemon.extra["port"])
        try:
            assert _metadata(other, "bystander") == (ErrorCode.none.value, 1)
            with lock:
                finished.append("other")
        finally:
            other.close()
    finally:
        worker.join(60)
    assert finished == ["other", "create"]


def test_describe_configs_of_an_invalid_topic_name(client: WireClient) -> None:
    cls = load_request_schema(32, 4)
    entry = nested(cls, "DescribeConfigsResource")
    resources = tuple(
        make(entry, resource_type=2, resource_name=name, configuration_keys=None)
        for name in ("../x", "", "nosuch")
    )
    request = make(cls, resources=resources, include_synonyms=False, include_documentation=False)
    codes = [r.error_code.value for r in client.request(32, 4, request).results]
    invalid = ErrorCode.invalid_topic_exception.value
    assert codes == [invalid, invalid, ErrorCode.unknown_topic_or_partition.value]


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(daemon: Seglogd) -> None:
    """A connection that sends nothing (or stops halfway through a size prefix) is closed, as Kafka
    closes one idle for ``connections.max.idle.ms``; one that keeps asking stays open."""
    silent = socket.create_connection(("127.0.0.1", daemon.extra["port"]), timeout=MAX_IDLE_MS / 1000 * 4)
    halfway = socket.create_connection(("127.0.0.1", daemon.extra["port"]), timeout=MAX_IDLE_MS / 1000 * 4)
    active = WireClient(daemon.extra["port"])
    try:
        halfway.sendall(b"\0\0")
        began = time.monotonic()
        while time.monotonic() - began < MAX_IDLE_MS / 1000 * 1.5:
            assert _metadata(active, "nosuch")[0] == ErrorCode.unknown_topic_or_partition.value
            time.sleep(0.5)
        assert silent.recv(1) == b""
        assert halfway.recv(1) == b""
        assert _metadata(active, "nosuch")[0] == ErrorCode.unknown_topic_or_partition.value
    finally:
        silent.close()
        halfway.close()
        active.close()


def test_sigterm_while_a_topic_of_thousands_of_partitions_is_made(tmp_path: Path) -> None:
    """The daemon stops at once while a CreateTopics is making 9,000 logs (minutes of fsyncs): no
    more are made once it is stopping, and the data dir opens cleanly again."""
    stopping = start_kafka_daemon(tmp_path, logs={})
    try:
        wire = WireClient(stopping.extra["port"], timeout=120)

        def creating() -> None:
            with contextlib.suppress(OSError, AttributeError):  # the connection closes under it
                _create(wire, "vast", 9_000)

        worker = threading.Thread(target=creating, daemon=True)
        worker.start()
        deadline = time.monotonic() + 20
        while not list(stopping.data_dir.glob("vast-*")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert stopping.stop(timeout=30) == 0
        made = len(list(stopping.data_dir.glob("vast-*")))
        assert 0 < made < 9_000
        worker.join(5)
        wire.close()
        restart(stopping)
        assert "clean shutdown" in stopping.stderr()
    finally:
        stopping.cleanup()


def test_a_partition_named_twice_in_one_produce_is_appended_once(daemon: Seglogd, client: WireClient) -> None:
    """Kafka keys a Produce request by partition: the last batch named for it is appended, once."""
    assert _create(client, "twice", 1)[0] == ErrorCode.none.value
    cls = load_request_schema(0, 9)
    parts = tuple(make(nested(cls, "PartitionProduceData"), index=0, records=producer_batch([value]))
                  for value in (b"first", b"second"))
    topics = (make(nested(cls, "TopicProduceData"), name="twice", partition_data=parts),) * 2
    request = make(cls, transactional_id=None, acks=-1, timeout=timedelta(seconds=5), topic_data=topics)
    response = client.request(0, 9, request)
    [topic] = response.responses
    assert [(p.index, p.error_code.value, p.base_offset) for p in topic.partition_responses] == [(0, 0, 0)]
    assert (daemon.mount / "twice-0" / "records").read_text().splitlines() == ["second"]

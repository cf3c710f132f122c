"""A SASL_PLAINTEXT listener with SCRAM-SHA-256 users: real clients with the right credentials
produce and consume; a wrong password or an unknown user is refused with
SASL_AUTHENTICATION_FAILED; before authentication nothing but the SASL exchange is served."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import time
from collections.abc import Callable, Iterator

import pytest
from kio.schema.errors import ErrorCode
from support.kafka_fixture import bootstrap, records_jsonl, start_kafka_daemon
from support.kafka_security import (
    confluent_refusal,
    confluent_roundtrip,
    kafka_python_values,
    kcat_run,
    scram_user,
)
from support.kafka_wire import WireClient
from support.mount_fixture import Seglogd, fuse_required

from seglogfs.kafka.framing import frame
from seglogfs.kafka.messages import make
from seglogfs.kafka.sasl_scram import make_credential
from seglogfs.kafka.sasl_session import PRE_AUTH_MAX_BYTES

pytestmark = fuse_required

PASSWORD = "alice-s3cret, with = and ,"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seglogd]:
    daemon = start_kafka_daemon(
        tmp_path_factory.mktemp("sasl"),
        logs={},
        kafka={
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": ["SCRAM-SHA-256"],
            "users": {
                "alice": scram_user("alice", PASSWORD),
                "bob=,x": make_credential("bob", iterations=4096).to_yaml_fields(),
            },
        },
    )
    try:
        yield daemon
    finally:
        daemon.cleanup()


def _sasl(user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
    }


def test_confluent_with_the_right_password_produces_and_consumes(daemon: Seglogd) -> None:
    got = confluent_roundtrip(bootstrap(daemon), "sasl-confluent", 20, _sasl("alice", PASSWORD))
    assert got == [f"sasl-confluent {i}".encode() for i in range(20)]
    assert len(records_jsonl(daemon, "sasl-confluent-0")) == 20
    # a user name with SCRAM's escaped characters (',' and '=')
    assert confluent_roundtrip(bootstrap(daemon), "sasl-bob", 1, _sasl("bob=,x", "bob")) == [b"sasl-bob 0"]


def test_kcat_and_kafka_python_with_the_right_password(daemon: Seglogd) -> None:
    conf = [arg for key, value in _sasl("alice", PASSWORD).items() for arg in ("-X", f"{key}={value}")]
    produced = kcat_run("-b", bootstrap(daemon), *conf, "-P", "-t", "sasl-kcat", stdin=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat_run(
        "-b", bootstrap(daemon), *conf, "-C", "-t", "sasl-kcat", "-o", "beginning", "-e", "-q"
    )
    assert consumed.stdout == b"one\ntwo\n", consumed.stderr

    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    common = {
        "bootstrap_servers": bootstrap(daemon),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
    }
    producer = KafkaProducer(acks="all", **common)
    producer.send("sasl-kcat", b"three").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(**common)
    consumer.assign([TopicPartition("sasl-kcat", 0)])
    consumer.seek(TopicPartition("sasl-kcat", 0), 0)
    assert kafka_python_values(consumer, 3) == [b"one", b"two", b"three"]


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", PASSWORD), ("alice", "")])
def test_a_wrong_password_or_unknown_user_is_refused(daemon: Seglogd, user: str, password: str) -> None:
    error = confluent_refusal(bootstrap(daemon), _sasl(user, password or "x" * 300))
    assert "Authentication failed during authentication due to invalid credentials" in error, error
    assert "SASL authentication of ('127.0.0.1'" in daemon.stderr()
    if (user, password) != ("alice", "wrong"):
        return
    result = kcat_run(
        "-b",
        bootstrap(daemon),
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanisms=SCRAM-SHA-256",
        "-X",
        f"sasl.username={user}",
        "-X",
        f"sasl.password={password}",
        "-L",
        "-m",
        "2",
        timeout=30,
    )
    assert result.returncode != 0 and b"invalid credentials" in result.stderr, result.stderr


def test_before_authentication_only_the_sasl_exchange_is_served(daemon: Seglogd) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    client = WireClient(daemon.extra["port"])
    try:  # ApiVersions announces the SASL APIs on this listener
        versions = client.request(
            18, 3, make(load_api_versions(), client_software_name="t", client_software_version="1")
        )
        keys = {entry.api_key: (entry.min_version, entry.max_version) for entry in versions.api_keys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2)
        # any other API before authentication closes the connection, as Kafka does
        assert (
            client.request(
                3,
                12,
                MetadataRequest(
                    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
                ),
            )
            is None
        )
    finally:
        client.close()
    client = WireClient(daemon.extra["port"])
    try:  # SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, then closed
        response = client.request(36, 2, SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abc"))
        assert response.error_code == ErrorCode.illegal_sasl_state
        assert client.recv_frame() is None
    finally:
        client.close()
    client = WireClient(daemon.extra["port"])
    try:  # another mechanism: UNSUPPORTED_SASL_MECHANISM with the one served, then closed
        response = client.request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(response.mechanisms) == ["SCRAM-SHA-256"]
        assert client.recv_frame() is None
    finally:
        client.close()
    client = WireClient(daemon.extra["port"])
    try:  # a request larger than Kafka's sasl.server.max.receive.size before authentication
        client.send_raw(struct.pack(">i", PRE_AUTH_MAX_BYTES + 1) + b"\0" * 64)
        assert client.recv_frame() is None
    finally:
        client.close()
    after = confluent_roundtrip(bootstrap(daemon), "sasl-after", 1, _sasl("alice", PASSWORD))
    assert after == [b"sasl-after 0"]


def _scram_final(first_bare: str, server_first: bytes, password: str) -> tuple[bytes, bytes]:
    """A SCRAM-SHA-256 client's final message and the server signature it expects (RFC 5802)."""
    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    return f"{without_proof},p={proof}".encode(), b"v=" + base64.b64encode(
        hmac.new(server_key, auth, "sha256").digest()
    )


@pytest.mark.parametrize("password", [PASSWORD, "wrong"])
def test_a_handshake_v0_client_authenticates_with_bare_scram_frames(daemon: Seglogd, password: str) -> None:
    """SaslHandshake v0: the SCRAM messages follow as bare size-prefixed frames (no SaslAuthenticate)."""
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest

    client = WireClient(daemon.extra["port"])
    try:
        assert (
            client.request(17, 0, SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code
            == ErrorCode.none
        )
        first_bare = "n=alice,r=fyko+d2lbbFgONRv9qkxdawL"
        client.send_raw(frame(b"n,," + first_bare.encode()))
        server_first = client.recv_frame()
        assert server_first is not None and server_first.startswith(b"r=fyko+d2lbbFgONRv9qkxdawL")
        final, server_final = _scram_final(first_bare, server_first, password)
        client.send_raw(frame(final))
        if password != PASSWORD:
            assert client.recv_frame() is None  # refused: closed without an answer, as Kafka does
            return
        assert client.recv_frame() == server_final
        metadata = client.request(
            3,
            12,
            MetadataRequest(
                topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
            ),
        )
        assert metadata is not None and metadata.brokers
    finally:
        client.close()


def _wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def load_api_versions() -> type:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    return ApiVersionsRequest


def test_users_reloaded_without_a_restart(daemon: Seglogd) -> None:
    """Adding a user, removing one or changing a password applies to new connections at a reload."""
    kafka = dict(daemon.settings["kafka"])
    kafka["users"] = {"erin": make_credential("erin-pw", iterations=4096).to_yaml_fields()}
    daemon.write_config(kafka=kafka)
    assert _wait_for(lambda: "SCRAM users reloaded (1)" in daemon.stderr())
    assert "kafka changed" not in daemon.stderr()
    assert confluent_roundtrip(bootstrap(daemon), "sasl-erin", 1, _sasl("erin", "erin-pw")) == [
        b"sasl-erin 0"
    ]
    error = confluent_refusal(bootstrap(daemon), _sasl("alice", PASSWORD))
    assert "invalid credentials" in error, error

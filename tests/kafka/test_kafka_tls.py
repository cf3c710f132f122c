"""TLS listeners: SSL with ``ssl.client.auth: required`` serves real clients that present a
certificate from ``ssl.cafile`` and refuses one without a certificate or with one from another CA;
SASL_SSL runs SCRAM-SHA-256 inside TLS."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kafka_certs import KafkaCerts, make_certs
from support.kafka_fixture import bootstrap, records_jsonl, start_kafka_daemon
from support.kafka_security import (
    confluent_no_metadata,
    confluent_refusal,
    confluent_roundtrip,
    kafka_python_values,
    kcat_run,
)
from support.mount_fixture import Seglogd, fuse_required

from seglogfs.kafka.sasl_scram import make_credential

pytestmark = fuse_required

MAX_CONNECTIONS = 6


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> KafkaCerts:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, certs: KafkaCerts) -> Iterator[Seglogd]:
    daemon = start_kafka_daemon(
        tmp_path_factory.mktemp("tls"),
        logs={},
        kafka={
            "listeners": "SSL://127.0.0.1:0",
            "max.connections": MAX_CONNECTIONS,
            "ssl.certfile": str(certs.server),
            "ssl.keyfile": str(certs.server_key),
            "ssl.cafile": str(certs.ca),
            "ssl.client.auth": "required",
        },
    )
    try:
        yield daemon
    finally:
        daemon.cleanup()


def _tls(certs: KafkaCerts, cert: Path | None, key: Path | None, protocol: str = "SSL") -> dict[str, str]:
    conf = {"security.protocol": protocol, "ssl.ca.location": str(certs.ca)}
    if cert is not None and key is not None:
        conf |= {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    return conf


def test_a_client_certificate_from_the_ca_produces_and_consumes(daemon: Seglogd, certs: KafkaCerts) -> None:
    got = confluent_roundtrip(
        bootstrap(daemon), "tls-confluent", 20, _tls(certs, certs.client, certs.client_key)
    )
    assert got == [f"tls-confluent {i}".encode() for i in range(20)]
    assert len(records_jsonl(daemon, "tls-confluent-0")) == 20
    conf = [
        arg
        for key, value in _tls(certs, certs.client, certs.client_key).items()
        for arg in ("-X", f"{key}={value}")
    ]
    produced = kcat_run("-b", bootstrap(daemon), *conf, "-P", "-t", "tls-kcat", stdin=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat_run("-b", bootstrap(daemon), *conf, "-C", "-t", "tls-kcat", "-o", "beginning", "-e", "-q")
    assert consumed.stdout == b"one\ntwo\n", consumed.stderr
    # a Fetch over 32 KiB: its records go from the segment file through the TLS connection
    lines = b"".join(b"tls line %05d %s\n" % (i, b"t" * 60) for i in range(3000))
    produced = kcat_run("-b", bootstrap(daemon), *conf, "-P", "-t", "tls-big", stdin=lines)
    assert produced.returncode == 0, produced.stderr
    consumed = kcat_run("-b", bootstrap(daemon), *conf, "-C", "-t", "tls-big", "-o", "beginning", "-e", "-q")
    assert consumed.stdout == lines, consumed.stderr

    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    common = {
        "bootstrap_servers": bootstrap(daemon),
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(certs.client),
        "ssl_keyfile": str(certs.client_key),
    }
    producer = KafkaProducer(acks="all", **common)
    producer.send("tls-kcat", b"three").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(**common)
    partition = TopicPartition("tls-kcat", 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    assert kafka_python_values(consumer, 3) == [b"one", b"two", b"three"]


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate"])
def test_a_client_without_a_certificate_of_the_ca_is_refused(
    daemon: Seglogd, certs: KafkaCerts, who: str
) -> None:
    cert, key = (None, None) if who == "no certificate" else (certs.stranger, certs.stranger_key)
    confluent_no_metadata(bootstrap(daemon), _tls(certs, cert, key))
    # Python's own TLS client: the handshake fails, or (TLS 1.3) the connection ends before any answer
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert is not None and key is not None:
        context.load_cert_chain(str(cert), str(key))
    with socket.create_connection(("127.0.0.1", daemon.extra["port"]), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"\0\0\0\x0a\0\x12\0\0\0\0\0\x01\xff\xff")  # ApiVersions v0
                answer = tls.recv(4)
        except (ssl.SSLError, ConnectionError):
            answer = b""
    assert answer == b""
    # a client with the CA's certificate is still served
    got = confluent_roundtrip(bootstrap(daemon), "tls-after", 1, _tls(certs, certs.client, certs.client_key))
    assert got == [b"tls-after 0"]


def test_connections_in_their_tls_handshake_count_against_max_connections(
    daemon: Seglogd, certs: KafkaCerts
) -> None:
    """A client that connects and never completes the handshake holds one of max.connections, no
    more: past the limit, connections are closed at once, whatever state the others are in."""
    stalled: list[socket.socket] = []
    try:
        for _ in range(MAX_CONNECTIONS + 2):
            stalled.append(socket.create_connection(("127.0.0.1", daemon.extra["port"]), timeout=2))
        time.sleep(0.3)
        closed = 0
        for sock in stalled:
            sock.settimeout(0.05)
            with contextlib.suppress(TimeoutError):
                closed += sock.recv(1) == b""
        assert closed >= 2, f"{closed} of {len(stalled)} connections closed"
        assert "max.connections=6 reached" in daemon.stderr()
    finally:
        for sock in stalled:
            sock.close()
    time.sleep(0.3)
    got = confluent_roundtrip(bootstrap(daemon), "tls-limit", 1, _tls(certs, certs.client, certs.client_key))
    assert got == [b"tls-limit 0"]


def test_sasl_ssl_runs_scram_inside_tls(tmp_path: Path, certs: KafkaCerts) -> None:
    daemon = start_kafka_daemon(
        tmp_path,
        logs={},
        kafka={
            "listeners": "SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": ["SCRAM-SHA-256"],
            "users": {"carol": make_credential("carol-pw", iterations=4096).to_yaml_fields()},
            "ssl.certfile": str(certs.server),
            "ssl.keyfile": str(certs.server_key),
        },
    )
    try:
        sasl = {"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "carol"}
        conf = _tls(certs, None, None, "SASL_SSL") | sasl
        got = confluent_roundtrip(bootstrap(daemon), "sasl-ssl", 5, conf | {"sasl.password": "carol-pw"})
        assert got == [f"sasl-ssl {i}".encode() for i in range(5)]
        error = confluent_refusal(bootstrap(daemon), conf | {"sasl.password": "wrong"})
        assert "invalid credentials" in error, error
    finally:
        daemon.cleanup()

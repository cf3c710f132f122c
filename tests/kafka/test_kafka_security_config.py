"""``kafka:`` security settings: which listener may bind which address, SCRAM users stored salted
(RFC 7677's test vector; entries from ``seglogfs kafka-user add``), TLS files checked at load."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.kafka_certs import KafkaCerts, make_certs

from seglogd.config import parse_config
from seglogfs.errors import ConfigError
from seglogfs.kafka.sasl_scram import ScramCredential, ScramError, ScramExchange, make_credential

SCRAM = {
    "sasl.enabled.mechanisms": ["SCRAM-SHA-256"],
    "users": {"alice": make_credential("pw", iterations=4096).to_yaml_fields()},
}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> KafkaCerts:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _tls(certs: KafkaCerts, **more: str) -> dict[str, str]:
    return {"ssl.certfile": str(certs.server), "ssl.keyfile": str(certs.server_key), **more}


def _parse(tmp_path: Path, kafka: dict[str, Any]) -> Any:
    document = {"data_dir": str(tmp_path / "data"), "mount_point": str(tmp_path / "mnt"), "kafka": kafka}
    return parse_config(yaml.safe_dump(document), tmp_path / "c.yaml").kafka


def test_off_loopback_only_authenticating_listeners(tmp_path: Path, certs: KafkaCerts) -> None:
    sasl = _parse(tmp_path, {"listeners": "SASL_PLAINTEXT://0.0.0.0:9092", **SCRAM})
    assert sasl.listener.protocol == "SASL_PLAINTEXT" and set(sasl.security.users) == {"alice"}
    tls = _parse(
        tmp_path,
        {
            "listeners": "SSL://0.0.0.0:9093",
            **_tls(certs, **{"ssl.cafile": str(certs.ca), "ssl.client.auth": "required"}),
        },
    )
    assert tls.security.client_auth == "required"
    assert (
        _parse(tmp_path, {"listeners": "SASL_SSL://[::]:9094", **SCRAM, **_tls(certs)}).listener.host == "::"
    )
    for kafka in (
        {"listeners": "PLAINTEXT://0.0.0.0:9092"},
        {"listeners": "SSL://0.0.0.0:9093", **_tls(certs)},
        {
            "listeners": "SSL://10.1.2.3:9093",
            **_tls(certs, **{"ssl.cafile": str(certs.ca), "ssl.client.auth": "requested"}),
        },
    ):
        with pytest.raises(ConfigError, match="loopback address only") as caught:
            _parse(tmp_path, kafka)
        assert caught.value.key == "kafka.listeners"
    # TLS without client certificates is fine on loopback
    assert _parse(tmp_path, {"listeners": "SSL://127.0.0.1:9093", **_tls(certs)}).security.cafile is None


@pytest.mark.parametrize(
    ("kafka", "key", "reason"),
    [
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "users": SCRAM["users"]},
            "kafka.sasl.enabled.mechanisms",
            "needs [SCRAM-SHA-256]",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": ["PLAIN"]},
            "kafka.sasl.enabled.mechanisms",
            "only SCRAM-SHA-256",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": ["SCRAM-SHA-256"]},
            "kafka.users",
            "at least one user",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:1", **SCRAM, "users": {"bob": "hunter2"}},
            "kafka.users.bob",
            "plain password is not accepted",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:1",
                **SCRAM,
                "users": {"bob": {**SCRAM["users"]["alice"], "iterations": 1000}},
            },
            "kafka.users.bob.iterations",
            ">= 4096",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:1",
                **SCRAM,
                "users": {"bob": {**SCRAM["users"]["alice"], "stored_key": "AAAA"}},
            },
            "kafka.users.bob",
            "32 bytes",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:1", **SCRAM, "advertised.listeners": "PLAINTEXT://h:1"},
            "kafka.advertised.listeners",
            "must be the listener's (SASL_PLAINTEXT)",
        ),
        ({"listeners": "PLAINTEXT://127.0.0.1:1", **SCRAM}, "kafka.sasl.enabled.mechanisms", "has no SASL"),
        ({"listeners": "SSL://127.0.0.1:1"}, "kafka.ssl.certfile", "required for a SSL listener"),
        (
            {"listeners": "SSL://127.0.0.1:1", "ssl.certfile": "/nonexistent.pem", "ssl.keyfile": "/k.pem"},
            "kafka.ssl.certfile",
            "cannot load",
        ),
        (
            {
                "listeners": "SSL://127.0.0.1:1",
                "ssl.certfile": "/x",
                "ssl.keyfile": "/x",
                "ssl.client.auth": "required",
            },
            "kafka.ssl.cafile",
            "needs the CAs",
        ),
        (
            {
                "listeners": "SSL://127.0.0.1:1",
                "ssl.certfile": "/x",
                "ssl.keyfile": "/x",
                "ssl.client.auth": "always",
            },
            "kafka.ssl.client.auth",
            "expected one of required",
        ),
    ],
)
def test_refused(tmp_path: Path, kafka: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _parse(tmp_path, kafka)
    assert caught.value.key == key
    assert reason in caught.value.reason
    assert "hunter2" not in str(caught.value)


def test_a_key_that_is_not_the_certificates_is_a_config_error(tmp_path: Path, certs: KafkaCerts) -> None:
    with pytest.raises(ConfigError, match="cannot load the certificate") as caught:
        _parse(
            tmp_path,
            {
                "listeners": "SSL://127.0.0.1:1",
                "ssl.certfile": str(certs.server),
                "ssl.keyfile": str(certs.client_key),
            },
        )
    assert caught.value.key == "kafka.ssl.certfile"


def test_rfc7677_exchange() -> None:
    """RFC 7677 section 3: user "user", password "pencil"."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("pencil", iterations=4096, salt=salt)
    exchange = ScramExchange({"user": credential}, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = exchange.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert exchange.final(final) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    # the same messages with another password's credential, or a changed proof, fail
    for users, message in (
        ({"user": make_credential("pencil2", iterations=4096, salt=salt)}, final),
        ({"user": credential}, final.replace(b"p=dH", b"p=dI")),
    ):
        other = ScramExchange(users, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
        other.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
        with pytest.raises(ScramError):
            other.final(message)
    # a replayed final message fails against a fresh server nonce, even with a prefix added in front
    fresh = ScramExchange({"user": credential})
    fresh.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(ScramError, match="nonce"):
        fresh.final(final)


def test_an_unknown_user_gets_a_salt_as_a_known_one_does() -> None:
    exchange = ScramExchange({"alice": make_credential("pw", iterations=4096)})
    first = dict(part.split("=", 1) for part in exchange.first(b"n,,n=mallory,r=abc").decode().split(","))
    assert len(base64.b64decode(first["s"])) == 32 and int(first["i"]) == 4096  # as alice's
    again = ScramExchange({"alice": make_credential("pw", iterations=4096)})
    assert again.first(b"n,,n=mallory,r=abc").decode().split(",")[1] == f"s={first['s']}"


def test_kafka_user_add_prints_a_salted_entry_that_loads(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "seglogfs.tools.cli", "kafka-user", "add", "dave"]
    out = subprocess.run(
        command, input="dave's password\n", text=True, capture_output=True, check=True, timeout=60
    ).stdout
    assert "dave's password" not in out
    entry = yaml.safe_load(out)["users"]["dave"]
    credential = ScramCredential(
        base64.b64decode(entry["salt"]),
        entry["iterations"],
        base64.b64decode(entry["stored_key"]),
        base64.b64decode(entry["server_key"]),
    )
    assert credential == make_credential("dave's password", entry["iterations"], credential.salt)
    shown = repr(
        _parse(
            tmp_path,
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:1",
                "sasl.enabled.mechanisms": ["SCRAM-SHA-256"],
                "users": {"dave": entry},
            },
        )
    )
    assert repr(credential.stored_key) not in shown and repr(credential.server_key) not in shown
    assert (
        _parse(
            tmp_path,
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:1",
                "sasl.enabled.mechanisms": ["SCRAM-SHA-256"],
                "users": {"dave": entry},
            },
        ).security.users["dave"]
        == credential
    )
    weak = subprocess.run(
        [*command, "--iterations", "100"], input="x\n", text=True, capture_output=True, timeout=60
    )
    assert weak.returncode == 2 and "at least 4096" in weak.stderr

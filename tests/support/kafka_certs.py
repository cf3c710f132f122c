"""Test certificates for the Kafka listener's TLS, made with the ``openssl`` command in a temp dir:
a CA, a server certificate for 127.0.0.1/localhost and a client certificate it signed, and a client
certificate from another CA."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KafkaCerts", "make_certs"]

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class KafkaCerts:
    """PEM paths: ``ca``, ``server``/``server_key``, ``client``/``client_key`` (signed by ``ca``),
    ``stranger``/``stranger_key`` (signed by another CA)."""

    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path
    stranger: Path
    stranger_key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=30)


def _ca(out: Path, name: str) -> tuple[Path, Path]:
    cert, key = out / f"{name}.pem", out / f"{name}.key"
    _openssl("req", "-x509", *_KEY, "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def _leaf(out: Path, name: str, ca: tuple[Path, Path], usage: str, san: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (out / f"{name}{suffix}" for suffix in (".pem", ".key", ".csr", ".ext"))
    _openssl("req", *_KEY, "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    ext.write_text(
        f"basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
        f"subjectAltName={san}\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", cert,
             "-days", "2", "-extfile", ext)
    return cert, key


def make_certs(out: Path) -> KafkaCerts:
    """Make the test PKI under ``out``."""
    ca, other = _ca(out, "test-ca"), _ca(out, "other-ca")
    server = _leaf(out, "server", ca, "serverAuth", "IP:127.0.0.1,DNS:localhost")
    client = _leaf(out, "client", ca, "clientAuth", "DNS:client")
    stranger = _leaf(out, "stranger", other, "clientAuth", "DNS:stranger")
    return KafkaCerts(ca[0], *server, *client, *stranger)

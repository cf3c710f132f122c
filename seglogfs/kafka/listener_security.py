"""The listener's security settings in Kafka's names: SASL/SCRAM-SHA-256 users and TLS files
(``docs/kafka-listener.md`` section 9). Parsed from the ``kafka:`` section's plain values."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from seglogfs.errors import ConfigError

from .sasl_scram import MECHANISM, MIN_ITERATIONS, ScramCredential

__all__ = ["CLIENT_AUTH", "SECURITY_KEYS", "ListenerSecurity", "parse_security"]

#: Kafka's ``ssl.client.auth`` values
CLIENT_AUTH = ("required", "requested", "none")
SECURITY_KEYS = (
    "sasl.enabled.mechanisms", "users", "ssl.certfile", "ssl.keyfile", "ssl.cafile", "ssl.client.auth",
)
_USER_FIELDS = ("salt", "iterations", "stored_key", "server_key")


@dataclass(frozen=True)
class ListenerSecurity:
    """SASL mechanisms and users, and the TLS files (PEM paths) of a listener."""

    mechanisms: tuple[str, ...] = ()
    users: Mapping[str, ScramCredential] = field(default_factory=dict)
    certfile: str | None = None
    keyfile: str | None = None
    cafile: str | None = None
    client_auth: str = "none"

    def check(self, protocol: str) -> None:
        """ConfigError when the settings do not fit ``protocol`` (PLAINTEXT, SSL, SASL_*)."""
        sasl = protocol.startswith("SASL_")
        tls = protocol in ("SSL", "SASL_SSL")
        if sasl:
            if self.mechanisms != (MECHANISM,):
                raise ConfigError("kafka.sasl.enabled.mechanisms", list(self.mechanisms),
                                  f"a {protocol} listener needs [{MECHANISM}] (the only mechanism served)")
            if not self.users:
                raise ConfigError("kafka.users", None, f"a {protocol} listener needs at least one user "
                                  "(make an entry with `seglogfs kafka-user add NAME`)")
        elif self.mechanisms or self.users:
            key = "kafka.sasl.enabled.mechanisms" if self.mechanisms else "kafka.users"
            raise ConfigError(key, None, f"SASL settings on a {protocol} listener, which has no SASL")
        if tls:
            for key, value in (("ssl.certfile", self.certfile), ("ssl.keyfile", self.keyfile)):
                if value is None:
                    raise ConfigError(f"kafka.{key}", None, f"required for a {protocol} listener (PEM)")
            if self.client_auth != "none" and self.cafile is None:
                raise ConfigError("kafka.ssl.cafile", None,
                                  f"ssl.client.auth: {self.client_auth} needs the CAs of client certificates")
        elif self.certfile or self.keyfile or self.cafile or self.client_auth != "none":
            raise ConfigError("kafka.ssl.certfile", self.certfile, f"TLS settings on a {protocol} listener")

    def authenticates(self, protocol: str) -> bool:
        """Whether every client of a ``protocol`` listener proves who it is (SASL, or a certificate)."""
        return protocol.startswith("SASL_") or (protocol == "SSL" and self.client_auth == "required")


def _path(key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"kafka.{key}", value, "expected the path of a PEM file")
    return os.path.abspath(os.path.expanduser(value))


def _b64(key: str, value: object) -> bytes:
    try:
        if not isinstance(value, str):
            raise ValueError
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise ConfigError(key, "<hidden>", "expected base64") from None


def _user(name: object, entry: object) -> tuple[str, ScramCredential]:
    key = f"kafka.users.{name}"
    if not isinstance(name, str) or not name:
        raise ConfigError(key, name, "a user name is a non-empty string (quote it)")
    if isinstance(entry, str):
        raise ConfigError(key, "<hidden>", "a plain password is not accepted: users are stored salted; "
                          "make the entry with `seglogfs kafka-user add NAME`")
    if not isinstance(entry, Mapping) or set(entry) != set(_USER_FIELDS):
        raise ConfigError(key, None, f"expected a mapping of {', '.join(_USER_FIELDS)} "
                          "(made by `seglogfs kafka-user add NAME`)")
    iterations = entry["iterations"]
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < MIN_ITERATIONS:
        raise ConfigError(f"{key}.iterations", iterations, f"expected an integer >= {MIN_ITERATIONS}")
    try:
        credential = ScramCredential(
            salt=_b64(f"{key}.salt", entry["salt"]),
            iterations=iterations,
            stored_key=_b64(f"{key}.stored_key", entry["stored_key"]),
            server_key=_b64(f"{key}.server_key", entry["server_key"]),
        )
    except ValueError as err:
        raise ConfigError(key, None, str(err)) from None
    return name, credential


def parse_security(values: Mapping[str, object]) -> ListenerSecurity:
    """The security settings among the ``kafka:`` section's ``values`` (Kafka's names)."""
    mechanisms: tuple[str, ...] = ()
    if "sasl.enabled.mechanisms" in values:
        raw = values["sasl.enabled.mechanisms"]
        items = raw.split(",") if isinstance(raw, str) else raw
        if not isinstance(items, list | tuple) or not all(isinstance(m, str) for m in items):
            raise ConfigError("kafka.sasl.enabled.mechanisms", raw, f"expected a list, e.g. [{MECHANISM}]")
        mechanisms = tuple(m.strip().upper() for m in items if m.strip())
        unsupported = [m for m in mechanisms if m != MECHANISM]
        if unsupported:
            raise ConfigError("kafka.sasl.enabled.mechanisms", raw,
                              f"{', '.join(unsupported)}: only {MECHANISM} is served")
    users: dict[str, ScramCredential] = {}
    raw_users = values.get("users") or {}
    if not isinstance(raw_users, Mapping):
        raise ConfigError("kafka.users", None, "expected a mapping of user name to its SCRAM credential")
    for name, entry in raw_users.items():
        user, credential = _user(name, entry)
        users[user] = credential
    client_auth = values.get("ssl.client.auth", "none")
    if client_auth not in CLIENT_AUTH:
        raise ConfigError("kafka.ssl.client.auth", client_auth, f"expected one of {', '.join(CLIENT_AUTH)}")
    return ListenerSecurity(
        mechanisms=mechanisms,
        users=users,
        certfile=_path("ssl.certfile", values["ssl.certfile"]) if "ssl.certfile" in values else None,
        keyfile=_path("ssl.keyfile", values["ssl.keyfile"]) if "ssl.keyfile" in values else None,
        cafile=_path("ssl.cafile", values["ssl.cafile"]) if "ssl.cafile" in values else None,
        client_auth=str(client_auth),
    )

"""The listener's settings, in Kafka's broker-config names (the daemon reads them from YAML)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from seglogfs.errors import ConfigError

from .listener_security import ListenerSecurity

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "Endpoint", "ListenerConfig", "is_loopback", "parse_listener"]

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # Kafka's socket.request.max.bytes (100 MiB)
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms: an idle connection is closed
DEFAULT_FETCH_MAX_BYTES = 57_671_680  # Kafka's fetch.max.bytes (55 MiB): a Fetch response's bound
#: Kafka's group.min.session.timeout.ms and group.max.session.timeout.ms
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6_000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 3_000  # Kafka's group.initial.rebalance.delay.ms
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Endpoint:
    """One ``PROTOCOL://host:port`` of ``listeners`` / ``advertised.listeners``."""

    protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def parse_listener(key: str, text: object) -> Endpoint:
    """``PLAINTEXT://127.0.0.1:9092`` as Kafka writes it (one listener; ``[::1]`` for IPv6)."""
    if not isinstance(text, str) or "://" not in text:
        raise ConfigError(key, text, "expected PROTOCOL://host:port, e.g. PLAINTEXT://127.0.0.1:9092")
    if "," in text:
        raise ConfigError(key, text, "one listener only")
    protocol, _, rest = text.partition("://")
    protocol = protocol.upper()
    if protocol not in SECURITY_PROTOCOLS:
        supported = ", ".join(SECURITY_PROTOCOLS)
        raise ConfigError(key, text, f"security protocol {protocol}: expected one of {supported}")
    host, sep, port_text = rest.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(key, text, "expected a port number 0-65535 after the host")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Endpoint(protocol, host or "0.0.0.0", int(port_text))


def is_loopback(host: str) -> bool:
    """True for a loopback address or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ListenerConfig:
    """``kafka:`` of the daemon config. ``listener.port`` 0 binds a free port (tests)."""

    listener: Endpoint
    advertised: Endpoint | None = None
    node_id: int = 1
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    auto_create_topics: bool = True
    num_partitions: int = 1
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    max_idle_ms: int = DEFAULT_MAX_IDLE_MS
    min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS
    initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS
    #: who a listener that does not authenticate serves: "owner" (the daemon's user and root, as the
    #: mount without fuse.allow_other) or "everyone" on this host
    loopback_users: str = "owner"
    security: ListenerSecurity = field(default_factory=ListenerSecurity)

    @property
    def checks_local_users(self) -> bool:
        """Whether a connection is served only when its client runs as the daemon's user or root."""
        return self.loopback_users == "owner" and not self.security.authenticates(self.listener.protocol)

    def __post_init__(self) -> None:
        protocol = self.listener.protocol
        self.security.check(protocol)
        if self.advertised is not None and self.advertised.protocol != protocol:
            raise ConfigError("kafka.advertised.listeners", str(self.advertised),
                              f"its protocol must be the listener's ({protocol}), as Kafka requires")
        if not is_loopback(self.listener.host) and not self.security.authenticates(protocol):
            raise ConfigError(
                "kafka.listeners", str(self.listener),
                f"a {protocol} listener may bind a loopback address only (127.0.0.1, ::1, localhost): "
                "clients on other machines would read and write without authentication; use "
                "SASL_PLAINTEXT or SASL_SSL (SCRAM-SHA-256), or SSL with ssl.client.auth: required",
            )
        if self.loopback_users not in ("owner", "everyone"):
            raise ConfigError("kafka.loopback.users", self.loopback_users, "expected owner or everyone")
        if self.max_request_bytes < 1024:
            key = "kafka.socket.request.max.bytes"
            raise ConfigError(key, self.max_request_bytes, "expected at least 1024")
        if self.max_connections < 1:
            raise ConfigError("kafka.max.connections", self.max_connections, "expected at least 1")
        if self.num_partitions < 1:
            raise ConfigError("kafka.num.partitions", self.num_partitions, "expected at least 1")
        if self.max_idle_ms < 1:
            raise ConfigError("kafka.connections.max.idle.ms", self.max_idle_ms, "expected at least 1")
        if self.fetch_max_bytes < 1024:
            raise ConfigError("kafka.fetch.max.bytes", self.fetch_max_bytes, "expected at least 1024")
        if not 0 <= self.min_session_timeout_ms <= self.max_session_timeout_ms:
            raise ConfigError("kafka.group.min.session.timeout.ms", self.min_session_timeout_ms,
                              f"expected 0 to group.max.session.timeout.ms ({self.max_session_timeout_ms})")
        if self.initial_rebalance_delay_ms < 0:
            raise ConfigError("kafka.group.initial.rebalance.delay.ms", self.initial_rebalance_delay_ms,
                              "expected 0 or more")

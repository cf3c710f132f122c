"""``kafka:`` in the daemon YAML: Kafka's names and defaults, off unless configured, plaintext on
loopback only."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglogd.config import parse_config
from seglogfs.errors import ConfigError
from seglogfs.kafka.listener_config import DEFAULT_MAX_REQUEST_BYTES, Endpoint


def _config(tmp_path: Path, kafka: str | None) -> str:
    text = f"data_dir: {tmp_path}/data\nmount_point: {tmp_path}/mnt\n"
    return text + (f"kafka:\n{kafka}" if kafka is not None else "")


def test_off_unless_configured(tmp_path: Path) -> None:
    assert parse_config(_config(tmp_path, None)).kafka is None


def test_kafka_names_and_defaults(tmp_path: Path) -> None:
    cfg = parse_config(_config(tmp_path, "  listeners: PLAINTEXT://127.0.0.1:19092\n")).kafka
    assert cfg is not None
    assert cfg.listener == Endpoint("PLAINTEXT", "127.0.0.1", 19092)
    assert cfg.advertised is None and cfg.node_id == 1
    assert cfg.max_request_bytes == DEFAULT_MAX_REQUEST_BYTES == 100 * 1024 * 1024
    assert cfg.auto_create_topics is True and cfg.num_partitions == 1
    assert cfg.initial_rebalance_delay_ms == 3000  # Kafka's default
    full = parse_config(_config(tmp_path, (
        "  listeners: PLAINTEXT://[::1]:19092\n"
        "  advertised.listeners: PLAINTEXT://localhost:19092\n"
        "  node.id: 7\n  socket.request.max.bytes: 1MiB\n  max.connections: 10\n"
        "  auto.create.topics.enable: false\n  num.partitions: 4\n  group.initial.rebalance.delay.ms: 0\n"
    ))).kafka
    assert full is not None
    assert (full.listener.host, full.node_id) == ("::1", 7)
    assert full.advertised == Endpoint("PLAINTEXT", "localhost", 19092)
    assert (full.max_request_bytes, full.max_connections) == (1 << 20, 10)
    assert (full.auto_create_topics, full.num_partitions) == (False, 4)
    assert full.initial_rebalance_delay_ms == 0


@pytest.mark.parametrize(
    ("kafka", "key", "reason"),
    [
        ("  listeners: PLAINTEXT://0.0.0.0:9092\n", "kafka.listeners", "authentication"),
        ("  listeners: PLAINTEXT://192.168.1.5:9092\n", "kafka.listeners", "loopback"),
        ("  listeners: SASL_GSSAPI://127.0.0.1:9092\n", "kafka.listeners", "expected one of PLAINTEXT"),
        ("  listeners: 127.0.0.1:9092\n", "kafka.listeners", "PROTOCOL://host:port"),
        ("  listeners: PLAINTEXT://127.0.0.1:9092\n  log.dirs: /x\n", "kafka.log.dirs", "unknown setting"),
        ("  advertised.listeners: PLAINTEXT://127.0.0.1:9092\n", "kafka.listeners", "required"),
        ("  listeners: PLAINTEXT://[::1]:9092\n  num.partitions: 0\n", "kafka.num.partitions", "at least 1"),
        ("  listeners: PLAINTEXT://127.0.0.1:9092\n  loopback.users: all\n", "kafka.loopback.users",
         "owner or everyone"),
        ("  listeners: PLAINTEXT://127.0.0.1:9092\n  group.initial.rebalance.delay.ms: -1\n",
         "kafka.group.initial.rebalance.delay.ms", "0 or more"),
    ],
)
def test_refused(tmp_path: Path, kafka: str, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(tmp_path, kafka), tmp_path / "c.yaml")
    assert caught.value.key == key
    assert reason in caught.value.reason

"""A log's own topic configs, kept in its directory: what a client gave when it created the topic
(Kafka's CreateTopics configs, which a broker keeps in its metadata). A hidden file a broker's loader
ignores; JSON of Kafka's topic-config names and their values as given."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .durable_files import atomic_write
from .errors import ConfigError

__all__ = ["TOPIC_CONFIG_FILE", "read_topic_config", "write_topic_config"]

TOPIC_CONFIG_FILE = ".seglogfs.topic-config"
MAX_BYTES = 1 << 20


def read_topic_config(log_dir: Path) -> dict[str, str] | None:
    """The topic configs stored in ``log_dir``, None when it has none; ConfigError naming the file when
    it cannot be read as one (the log must not run on defaults its creator overrode: a compacted topic
    would be deleted by retention)."""
    path = log_dir / TOPIC_CONFIG_FILE
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(str(path), "(unreadable)", f"its topic configs: {exc.strerror}") from None
    try:
        configs = json.loads(data) if len(data) <= MAX_BYTES else None
    except ValueError:
        configs = None
    if not isinstance(configs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
    ):
        raise ConfigError(str(path), data[:80], "not a JSON object of topic-config names and string values")
    return configs


def write_topic_config(log_dir: Path, configs: Mapping[str, str]) -> None:
    """Store ``configs`` in ``log_dir`` durably (written whole, or not at all)."""
    data = json.dumps(dict(configs), sort_keys=True, indent=1).encode() + b"\n"
    atomic_write(log_dir / TOPIC_CONFIG_FILE, data)

"""CleanerConfig: Kafka's log.cleaner.* names, defaults, units and validation."""

from __future__ import annotations

import math

import pytest

from seglogfs.cleaner_config import CleanerConfig
from seglogfs.config import LogConfig
from seglogfs.errors import ConfigError


def test_kafka_defaults() -> None:
    assert CleanerConfig().to_dict() == {
        "log.cleaner.enable": True,
        "log.cleaner.threads": 1,
        "log.cleaner.backoff.ms": 15_000,
        "log.cleaner.dedupe.buffer.size": 134_217_728,
        "log.cleaner.io.buffer.size": 524_288,
        "log.cleaner.io.buffer.load.factor": 0.9,
        "log.cleaner.io.max.bytes.per.second": math.inf,
    }


def test_from_the_same_defaults_mapping_as_log_config() -> None:
    defaults = {
        "log.cleaner.enable": "false",
        "log.cleaner.threads": 2,
        "log.cleaner.backoff.ms": "2s",
        "log.cleaner.dedupe.buffer.size": "1MiB",
        "log.cleaner.io.max.bytes.per.second": "10MiB",
        "log.cleanup.policy": "compact",
        "segment.bytes": "1MiB",
    }
    cleaner = CleanerConfig.from_mapping(defaults)
    assert not cleaner.enable
    assert cleaner.threads == 2 and cleaner.backoff_ms == 2000
    assert cleaner.map_bytes_per_thread == 512 * 1024
    assert cleaner.map_capacity == int(512 * 1024 // 24 * 0.9)
    assert cleaner.io_max_bytes_per_second == 10 * 1024 * 1024
    assert LogConfig.from_mapping(defaults).cleanup_policy == ("compact",)


@pytest.mark.parametrize(
    ("key", "value", "reason_part"),
    [
        ("log.cleaner.enable", "yes", "true or false"),
        ("log.cleaner.threads", -1, "at least 0"),
        ("log.cleaner.threads", "2 threads", "takes no unit"),
        ("log.cleaner.backoff.ms", -5, "at least 0"),
        ("log.cleaner.dedupe.buffer.size", 30, "no room for one key"),
        ("log.cleaner.dedupe.buffer.size", "1m", "KiB/MiB/GiB"),
        ("log.cleaner.io.max.bytes.per.second", 0, "above 0"),
        ("log.cleaner.io.buffer.load.factor", 1.5, "at most 1"),
        ("log.cleaner.io.buffer.size", -1, "at least 0"),
    ],
)
def test_errors_name_key_and_value(key: str, value: object, reason_part: str) -> None:
    with pytest.raises(ConfigError) as info:
        CleanerConfig.from_mapping({key: value}, source="seglogd.yaml")
    assert info.value.key == key
    assert info.value.value == value
    assert reason_part in info.value.reason
    assert info.value.reason.endswith("(in seglogd.yaml)")

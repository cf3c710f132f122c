"""The mount's own per-log settings (seglogfs.fs.mount_config): read from the log's config mapping,
checked once, the isolation level an :class:`Isolation`."""

from __future__ import annotations

import pytest

from seglogfs.errors import ConfigError
from seglogfs.fs.mount_config import MOUNT_CONFIG_NAMES, MountConfigs, MountLogConfig
from seglogfs.read_committed import Isolation


def test_defaults_and_the_keys_info_shows() -> None:
    assert MountLogConfig().to_dict() == {
        "fs.listing.limit": 100000,
        "fs.append.key.separator": None,
        "fs.isolation.level": "read_uncommitted",
    }
    assert set(MountLogConfig().to_dict()) == MOUNT_CONFIG_NAMES


def test_from_mapping_reads_only_its_keys_over_a_base() -> None:
    base = MountLogConfig.from_mapping({"fs.listing.limit": 10, "segment.bytes": "1MiB"})
    settings = {"fs.append.key.separator": "::", "fs.isolation.level": "read_committed"}
    own = MountLogConfig.from_mapping(settings, base)
    assert own == MountLogConfig(10, "::", Isolation.READ_COMMITTED)
    assert own.isolation is Isolation.READ_COMMITTED
    assert MountLogConfig.from_mapping({"fs.append.key.separator": None}, own).append_key_separator is None


@pytest.mark.parametrize(
    ("key", "value", "reason_part"),
    [
        ("fs.listing.limit", 0, "at least 1"),
        ("fs.listing.limit", "10KiB", "no unit"),
        ("fs.append.key.separator", "", "non-empty string without a newline"),
        ("fs.append.key.separator", "a\nb", "non-empty string without a newline"),
        ("fs.append.key.separator", 5, "non-empty string without a newline"),
        ("fs.isolation.level", "committed", "read_uncommitted, read_committed"),
        ("fs.isolation.level", 1, "read_uncommitted, read_committed"),
    ],
)
def test_every_error_names_key_value_reason(key: str, value: object, reason_part: str) -> None:
    with pytest.raises(ConfigError) as info:
        MountLogConfig.from_mapping({key: value})
    assert (info.value.key, info.value.value) == (key, value)
    assert reason_part in info.value.reason


def test_each_log_its_own_else_the_defaults_until_an_update() -> None:
    committed = MountLogConfig(isolation=Isolation.READ_COMMITTED)
    configs = MountConfigs(MountLogConfig(listing_limit=5), {"t-0": committed})
    assert configs.of("t-0") is committed and configs.of("other-0").listing_limit == 5
    configs.update(MountLogConfig(), {})
    assert configs.of("t-0") == MountLogConfig()

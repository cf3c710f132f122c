"""The mount's own settings of each log (not Kafka's, so not the engine's ``LogConfig``), read from the
same per-log mappings as the log's config (``defaults`` and ``logs.<name>`` of the daemon's file):

- ``fs.listing.limit``: how many offsets ``ls by-offset`` lists;
- ``fs.append.key.separator``: splits ``key<sep>value`` lines written to ``append`` (None: lines carry
  no key), as Kafka's console producer does with ``key.separator``;
- ``fs.isolation.level``: what the views show: every record (``read_uncommitted``, Kafka's consumer
  default) or, as a ``read_committed`` consumer, no record of an aborted transaction and nothing at
  or past the last stable offset.

:class:`MountConfigs` holds them for every log; the daemon replaces them at a reload (live).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from seglogfs.config_units import INT_MAX, count_value
from seglogfs.errors import ConfigError
from seglogfs.read_committed import Isolation, isolation_level

__all__ = ["MOUNT_CONFIG_NAMES", "MountConfigs", "MountLogConfig"]

LISTING_LIMIT = "fs.listing.limit"
APPEND_KEY_SEPARATOR = "fs.append.key.separator"
ISOLATION_LEVEL = "fs.isolation.level"
#: the per-log keys the mount reads (``LogConfig.from_mapping`` skips them: its ``foreign``)
MOUNT_CONFIG_NAMES = frozenset({LISTING_LIMIT, APPEND_KEY_SEPARATOR, ISOLATION_LEVEL})


def _listing_limit(value: object, key: str) -> int:
    limit = count_value(value, key)
    if limit < 1:
        raise ConfigError(key, value, "must be at least 1")
    if limit > INT_MAX:
        raise ConfigError(key, value, f"must be at most {INT_MAX}")
    return limit


def _separator(value: object, key: str) -> str | None:
    # The console producer's key.separator: any non-empty text that cannot occur inside a line.
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\n" in value:
        raise ConfigError(key, value, "expected a non-empty string without a newline (or null for off)")
    return value


def _isolation(value: object, key: str) -> Isolation:
    try:
        return isolation_level(value)
    except ValueError:
        accepted = ", ".join(level.value for level in Isolation)
        raise ConfigError(key, value, f"must be one of {accepted}") from None


@dataclass(frozen=True, slots=True)
class MountLogConfig:
    """The mount settings of one log (see the module docstring); defaults as documented in
    docs/configuration.md."""

    listing_limit: int = 100_000
    append_key_separator: str | None = None
    isolation: Isolation = Isolation.READ_UNCOMMITTED

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, object], base: MountLogConfig | None = None
    ) -> MountLogConfig:
        """``base`` (the defaults when None) overridden by the ``fs.*`` keys of ``mapping``; other keys
        are the engine's (``LogConfig.from_mapping`` checks them). ConfigError names a bad key."""
        base = base if base is not None else cls()
        return cls(
            _listing_limit(mapping[LISTING_LIMIT], LISTING_LIMIT)
            if LISTING_LIMIT in mapping else base.listing_limit,
            _separator(mapping[APPEND_KEY_SEPARATOR], APPEND_KEY_SEPARATOR)
            if APPEND_KEY_SEPARATOR in mapping else base.append_key_separator,
            _isolation(mapping[ISOLATION_LEVEL], ISOLATION_LEVEL)
            if ISOLATION_LEVEL in mapping else base.isolation,
        )

    def to_dict(self) -> dict[str, object]:
        """The settings by their keys, as ``info`` shows them beside the log's config."""
        return {
            LISTING_LIMIT: self.listing_limit,
            APPEND_KEY_SEPARATOR: self.append_key_separator,
            ISOLATION_LEVEL: self.isolation.value,
        }


@dataclass(slots=True)
class MountConfigs:
    """The mount settings of every log: its own when configured, else ``defaults``. Replaced as a
    whole by :meth:`update` (a reload); readers take one lookup per request, no lock."""

    defaults: MountLogConfig = field(default_factory=MountLogConfig)
    logs: dict[str, MountLogConfig] = field(default_factory=dict)

    def of(self, name: str) -> MountLogConfig:
        """The settings of log ``name``."""
        return self.logs.get(name, self.defaults)

    def update(self, defaults: MountLogConfig, logs: Mapping[str, MountLogConfig]) -> None:
        """Apply a reloaded configuration (each log's next request sees it)."""
        self.logs = dict(logs)
        self.defaults = defaults

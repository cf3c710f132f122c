"""The daemon's YAML configuration (DESIGN.md section 3).

```yaml
data_dir: ./var/data
mount_point: ./var/mnt
read_only: false
fuse: {allow_other: false}
defaults: {segment.bytes: 1GiB, retention.ms: 7d}   # Kafka topic-config and broker-level names
logs:
  events-0: {}
  audit-0: {retention.ms: 30d, compression.type: zstd}
```

Relative ``data_dir`` and ``mount_point`` resolve against the current working directory, not the
config file's directory: the embedded default (``config/seglogfs.yaml``) is meant to run from the
checkout with everything under ``./var/``. Services should use absolute paths (or set
``WorkingDirectory=``). ``~`` is expanded.

Every problem is a ``ConfigError`` whose key is the dotted path in the file (``logs.audit-0.retention.ms``)
and whose reason ends with ``(<file>, line N)``; YAML syntax errors give the line and column.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from seglogfs.checkpoint import validate_log_name
from seglogfs.config import LogConfig
from seglogfs.errors import ConfigError, InvalidLogNameError

__all__ = ["DEFAULT_CONFIG_PATH", "DaemonConfig", "load_config", "parse_config"]

# The embedded default, in the checkout next to the daemon package.
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "config" / "seglogfs.yaml"

_TOP_KEYS = ("data_dir", "mount_point", "read_only", "fuse", "defaults", "logs")
_FUSE_KEYS = ("allow_other",)


@dataclass(frozen=True)
class DaemonConfig:
    """A loaded, validated daemon configuration.

    ``logs`` maps each configured log to its effective ``LogConfig`` (``defaults`` overridden by the
    log's own settings); ``log_overrides`` keeps those per-log settings as written.
    """

    data_dir: Path
    mount_point: Path
    read_only: bool
    allow_other: bool
    defaults: LogConfig
    logs: dict[str, LogConfig] = field(default_factory=dict)
    log_overrides: dict[str, dict] = field(default_factory=dict)
    source: Path = DEFAULT_CONFIG_PATH

    def log_config(self, name: str) -> LogConfig:
        """The config of log ``name``: its own if configured, else the defaults."""
        return self.logs.get(name, self.defaults)


def _key_lines(node: yaml.Node, prefix: str, lines: dict[str, int], source: Path) -> None:
    """Record the 1-based line of every mapping key under ``prefix``; refuse duplicate keys."""
    if not isinstance(node, yaml.MappingNode):
        return
    seen: set[str] = set()
    for key_node, value_node in node.value:
        key = str(key_node.value)
        path = f"{prefix}.{key}" if prefix else key
        if key in seen:
            raise ConfigError(path, key, f"duplicate key ({source}, line {key_node.start_mark.line + 1})")
        seen.add(key)
        lines[path] = key_node.start_mark.line + 1
        _key_lines(value_node, path, lines, source)


def parse_config(text: str, source: str | Path = "<string>") -> DaemonConfig:
    """Parse and validate a YAML config given as text; ``source`` names it in errors."""
    source = Path(source)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        document = yaml.safe_load(text) if root is not None else None
    except yaml.MarkedYAMLError as err:
        lines = text.splitlines()
        mark = err.problem_mark or err.context_mark
        if mark is not None and mark.line >= len(lines) and err.context_mark is not None:
            mark = err.context_mark  # an error at end of input: point at what was left open
        line_no = mark.line + 1 if mark is not None else 0
        column = mark.column + 1 if mark is not None else 0
        offending = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
        problem = "; ".join(part for part in (err.context, err.problem) if part) or "invalid YAML"
        raise ConfigError(
            "<yaml>", offending, f"YAML syntax error: {problem} ({source}, line {line_no}, column {column})"
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError("<yaml>", "", f"YAML error: {err} ({source})") from None
    key_lines: dict[str, int] = {}
    if root is not None:
        _key_lines(root, "", key_lines, source)

    def fail(key: str, value: object, reason: str) -> ConfigError:
        line = key_lines.get(key)
        where = f"{source}, line {line}" if line is not None else str(source)
        return ConfigError(key, value, f"{reason} ({where})")

    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise fail("<document>", document, "the top level must be a mapping")
    for key in document:
        if key not in _TOP_KEYS:
            raise fail(str(key), document[key], f"unknown setting; expected one of {', '.join(_TOP_KEYS)}")

    def path_setting(key: str) -> Path:
        if key not in document:
            raise fail(key, None, "required setting is missing")
        value = document[key]
        if not isinstance(value, str) or not value.strip():
            raise fail(key, value, "expected a directory path")
        # abspath, not resolve(): it must not touch a possibly stale FUSE mount point.
        return Path(os.path.abspath(os.path.expanduser(value)))

    def bool_setting(key: str, value: object) -> bool:
        if not isinstance(value, bool):
            raise fail(key, value, "expected true or false")
        return value

    def mapping_setting(key: str, value: object) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise fail(key, value, "expected a mapping")
        return value

    data_dir = path_setting("data_dir")
    mount_point = path_setting("mount_point")
    if data_dir == mount_point or mount_point in data_dir.parents or data_dir in mount_point.parents:
        # A mount point inside the data dir would look like a log; a data dir inside the mount is hidden.
        raise fail("mount_point", str(mount_point), f"must not overlap data_dir {data_dir}")
    read_only = bool_setting("read_only", document.get("read_only", False))
    fuse = mapping_setting("fuse", document.get("fuse"))
    for key in fuse:
        if key not in _FUSE_KEYS:
            raise fail(f"fuse.{key}", fuse[key], f"unknown setting; expected one of {', '.join(_FUSE_KEYS)}")
    allow_other = bool_setting("fuse.allow_other", fuse.get("allow_other", False))

    def log_config(prefix: str, mapping: Mapping, base: LogConfig | None, broker_names: bool) -> LogConfig:
        try:
            return LogConfig.from_mapping(mapping, base, broker_names=broker_names)
        except ConfigError as err:
            raise fail(f"{prefix}.{err.key}", err.value, err.reason) from None

    defaults = log_config("defaults", mapping_setting("defaults", document.get("defaults")), None, True)
    logs: dict[str, LogConfig] = {}
    overrides: dict[str, dict] = {}
    for name, settings in mapping_setting("logs", document.get("logs")).items():
        if not isinstance(name, str):
            raise fail(f"logs.{name}", name, "YAML read this name as a number; quote it")
        try:
            validate_log_name(name)
        except InvalidLogNameError as err:
            raise fail(f"logs.{name}", name, str(err)) from None
        settings = mapping_setting(f"logs.{name}", settings)
        # Per-log settings take topic-level names only, as Kafka's topic configs do.
        logs[name] = log_config(f"logs.{name}", settings, defaults, False)
        overrides[name] = dict(settings)
    return DaemonConfig(
        data_dir=data_dir,
        mount_point=mount_point,
        read_only=read_only,
        allow_other=allow_other,
        defaults=defaults,
        logs=logs,
        log_overrides=overrides,
        source=Path(os.path.abspath(source)) if str(source) != "<string>" else source,
    )


def load_config(path: str | Path | None = None) -> DaemonConfig:
    """Load and validate the YAML config at ``path`` (the embedded default when None)."""
    path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError("<file>", str(path), f"cannot read the config file: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError("<file>", str(path), f"not UTF-8 text at byte {err.start}") from None
    return parse_config(text, Path(os.path.abspath(path)))

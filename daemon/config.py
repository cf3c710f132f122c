"""The daemon's YAML configuration (docs/configuration.md).

```yaml
data_dir: ./var/data
mount_point: ./var/mnt
read_only: false
fuse: {allow_other: false, owner: seglog, group: kafka, read: everyone, write: group}
defaults: {segment.bytes: 1GiB, retention.ms: 7d}   # Kafka topic-config and broker-level names
logs:
  events-0: {}
  audit-0: {retention.ms: 30d, compression.type: zstd}
  users-0: {cleanup.policy: compact, fs.append.key.separator: ":"}
```

``defaults`` also holds the broker-wide ``log.cleaner.*`` settings (``CleanerConfig``: threads, backoff,
dedupe buffer, I/O limit, enable); a log's own settings cannot.

Relative ``data_dir`` and ``mount_point`` resolve against the current working directory, not the
config file's directory: the embedded default (``config/seglogfs.yaml``) is meant to run from the
checkout with everything under ``./var/``. Services should use absolute paths (or set
``WorkingDirectory=``). ``~`` is expanded.

``fuse:`` says who reaches the mount and what they may do there (the kernel enforces the modes):
``allow_other`` lets users other than the daemon's in at all; ``owner`` and ``group`` (a name or numeric
id; the defaults are the daemon's user and, for a named owner, that user's primary group) own every
path; ``read`` and ``write`` are each ``owner``, ``group`` or ``everyone``: who may list and read,
and who may append and ``mkdir`` a log (by default everyone reads, the owner writes).

Every problem is a ``ConfigError`` whose key is the dotted path in the file (``logs.audit-0.retention.ms``)
and whose reason ends with ``(<file>, line N)``; YAML syntax errors give the line and column.
YAML anchors and aliases work (``b-0: *common``, ``<<: *common``) as long as the document expands to at
most ``MAX_EXPANDED_NODES`` nodes: an alias bomb is refused at once, naming the line where it crosses.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import yaml

from seglogfs.cleaner_config import CleanerConfig
from seglogfs.config import LogConfig
from seglogfs.config_units import count_value, size_value
from seglogfs.errors import ConfigError, InvalidLogNameError
from seglogfs.fs.access import Access, Scope, resolve_group, resolve_user
from seglogfs.fs.mount_config import MOUNT_CONFIG_NAMES, MountLogConfig
from seglogfs.kafka.listener_config import ListenerConfig, parse_listener
from seglogfs.kafka.listener_security import SECURITY_KEYS, parse_security
from seglogfs.kafka.tls import server_context
from seglogfs.log_files import check_new_log_name, parse_log_dir_name

__all__ = ["DEFAULT_CONFIG_PATH", "DaemonConfig", "load_config", "parse_config"]

# The embedded default, in the checkout next to the daemon package.
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "config" / "seglogfs.yaml"

_TOP_KEYS = ("data_dir", "mount_point", "read_only", "fuse", "defaults", "logs", "kafka")
_FUSE_KEYS = ("allow_other", "owner", "group", "read", "write")
_KAFKA_KEYS = (
    "listeners", "advertised.listeners", "node.id", "socket.request.max.bytes", "max.connections",
    "auto.create.topics.enable", "num.partitions", "fetch.max.bytes", "connections.max.idle.ms",
    "group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.initial.rebalance.delay.ms",
    "loopback.users", *SECURITY_KEYS,
)
_SCOPES = ", ".join(scope.value for scope in Scope)
_Id = TypeVar("_Id")  # what resolve_user / resolve_group return


@dataclass(frozen=True)
class DaemonConfig:
    """A loaded, validated daemon configuration.

    ``logs`` maps each configured log to its effective ``LogConfig`` (``defaults`` overridden by the
    log's own settings); ``log_overrides`` keeps those per-log settings as written; ``cleaner`` holds
    the ``log.cleaner.*`` settings of ``defaults``. ``mount_defaults`` and ``mount_logs`` are the
    mount's own settings (``fs.*``) read from the same mappings.
    """

    data_dir: Path
    mount_point: Path
    read_only: bool
    allow_other: bool
    defaults: LogConfig
    logs: dict[str, LogConfig] = field(default_factory=dict)
    log_overrides: dict[str, dict] = field(default_factory=dict)
    source: Path = DEFAULT_CONFIG_PATH
    access: Access = field(default_factory=Access.of_process)  # the `fuse:` owner, group and modes
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    mount_defaults: MountLogConfig = field(default_factory=MountLogConfig)
    mount_logs: dict[str, MountLogConfig] = field(default_factory=dict)
    kafka: ListenerConfig | None = None  # the Kafka listener; None: off

    def log_config(self, name: str) -> LogConfig:
        """The config of log ``name``: its own if configured, else the defaults."""
        return self.logs.get(name, self.defaults)

    def mount_config(self, name: str) -> MountLogConfig:
        """The mount settings of log ``name``: its own if configured, else the defaults."""
        return self.mount_logs.get(name, self.mount_defaults)


# A real config has hundreds of nodes; aliases can make a few lines expand to billions (the "billion
# laughs" bomb), which every walk over the document would then pay for, at start and on each reload.
MAX_EXPANDED_NODES = 100_000


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, text: str, source: Path) -> None:
    """Refuse a document whose aliases expand to more than ``MAX_EXPANDED_NODES`` nodes, or refer to
    a node that contains them; the error names the line of the node where the limit is crossed.

    Counts each distinct node once (an iterative post-order walk with memoised sizes), so the check
    itself costs no more than the document's text.
    """
    sizes: dict[int, int] = {}
    expanding: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]

    def refuse(node: yaml.Node, reason: str) -> ConfigError:
        line = node.start_mark.line + 1
        lines = text.splitlines()
        offending = lines[line - 1] if 0 < line <= len(lines) else ""
        return ConfigError("<yaml>", offending, f"{reason} ({source}, line {line})")

    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            expanding.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _node_children(node))
            if size > MAX_EXPANDED_NODES:
                raise refuse(node, f"YAML aliases expand this to more than {MAX_EXPANDED_NODES} nodes")
            sizes[key] = size
        elif key in expanding:
            raise refuse(node, "a YAML alias refers to a node that contains it")
        elif key not in sizes:
            expanding.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _node_children(node))


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


def _compose(text: str, source: Path) -> tuple[object, dict[str, int]]:
    """The YAML document in ``text`` and the line of every mapping key, by dotted path."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None:
            _check_expansion(root, text, source)
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
    except RecursionError:  # PyYAML composes and constructs recursively
        raise ConfigError("<yaml>", "", f"YAML nested too deeply ({source})") from None
    key_lines: dict[str, int] = {}
    if root is not None:
        _key_lines(root, "", key_lines, source)
    return document, key_lines


class _Settings:
    """The settings of one document, read and checked one by one; every error names its line."""

    def __init__(self, document: object, key_lines: dict[str, int], source: Path) -> None:
        self.key_lines = key_lines
        self.source = source
        if document is None:
            document = {}
        if not isinstance(document, dict):
            raise self.fail("<document>", document, "the top level must be a mapping")
        for key in document:
            if key not in _TOP_KEYS:
                expected = f"unknown setting; expected one of {', '.join(_TOP_KEYS)}"
                raise self.fail(str(key), document[key], expected)
        self.document: dict = document

    def fail(self, key: str, value: object, reason: str) -> ConfigError:
        line = self.key_lines.get(key)
        where = f"{self.source}, line {line}" if line is not None else str(self.source)
        return ConfigError(key, value, f"{reason} ({where})")

    def path(self, key: str) -> Path:
        if key not in self.document:
            raise self.fail(key, None, "required setting is missing")
        value = self.document[key]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, value, "expected a directory path")
        # abspath, not resolve(): it must not touch a possibly stale FUSE mount point.
        return Path(os.path.abspath(os.path.expanduser(value)))

    def boolean(self, key: str, value: object) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, value, "expected true or false")
        return value

    def mapping(self, key: str, value: object) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, value, "expected a mapping")
        return value

    def account_id(self, key: str, value: object, resolve: Callable[[str | int], _Id], what: str) -> _Id:
        """A user/group given by name or id (an int, or a string of digits)."""
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.fail(key, value, f"expected a {what} name or numeric id")
        try:
            return resolve(int(value) if isinstance(value, str) and value.isdigit() else value)
        except KeyError:
            raise self.fail(key, value, f"no such {what} on this machine") from None
        except ValueError as err:
            raise self.fail(key, value, str(err)) from None

    def scope(self, key: str, value: object) -> Scope:
        try:
            return Scope(value)
        except ValueError:
            raise self.fail(key, value, f"expected one of {_SCOPES}") from None

    def log_config(
        self, prefix: str, mapping: Mapping, base: LogConfig | None, broker_names: bool
    ) -> LogConfig:
        try:
            names = MOUNT_CONFIG_NAMES  # the mount's, read by mount_config
            return LogConfig.from_mapping(mapping, base, broker_names=broker_names, foreign=names)
        except ConfigError as err:
            raise self.fail(f"{prefix}.{err.key}", err.value, err.reason) from None

    def mount_config(self, prefix: str, mapping: Mapping, base: MountLogConfig | None) -> MountLogConfig:
        """The mount's own settings (``fs.*``) in ``mapping``."""
        try:
            return MountLogConfig.from_mapping(mapping, base)
        except ConfigError as err:
            raise self.fail(f"{prefix}.{err.key}", err.value, err.reason) from None

    def cleaner_config(self, mapping: Mapping) -> CleanerConfig:
        """The broker-wide ``log.cleaner.*`` settings among ``defaults``."""
        try:
            return CleanerConfig.from_mapping(mapping)
        except ConfigError as err:
            raise self.fail(f"defaults.{err.key}", err.value, err.reason) from None


def _fuse_settings(settings: _Settings) -> tuple[bool, Access]:
    """``fuse:``: allow_other, and the owner, group and scopes of every path."""
    fuse = settings.mapping("fuse", settings.document.get("fuse"))
    for key in fuse:
        if key not in _FUSE_KEYS:
            expected = f"unknown setting; expected one of {', '.join(_FUSE_KEYS)}"
            raise settings.fail(f"fuse.{key}", fuse[key], expected)
    allow_other = settings.boolean("fuse.allow_other", fuse.get("allow_other", False))
    uid, gid = os.getuid(), os.getgid()
    if "owner" in fuse:
        uid, primary_gid = settings.account_id("fuse.owner", fuse["owner"], resolve_user, "user")
        gid = primary_gid if primary_gid is not None else gid
    if "group" in fuse:
        gid = settings.account_id("fuse.group", fuse["group"], resolve_group, "group")
    read = settings.scope("fuse.read", fuse.get("read", Scope.EVERYONE.value))
    write = settings.scope("fuse.write", fuse.get("write", Scope.OWNER.value))
    try:
        return allow_other, Access(uid, gid, read, write)
    except ValueError as err:
        raise settings.fail("fuse.write", write.value, str(err)) from None


#: the kafka: section's counts and sizes, by Kafka's name: the ListenerConfig field each sets
_KAFKA_COUNTS = {
    "node.id": "node_id", "max.connections": "max_connections", "num.partitions": "num_partitions",
    "connections.max.idle.ms": "max_idle_ms", "group.min.session.timeout.ms": "min_session_timeout_ms",
    "group.max.session.timeout.ms": "max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
}
_KAFKA_SIZES = {"socket.request.max.bytes": "max_request_bytes", "fetch.max.bytes": "fetch_max_bytes"}


def _kafka_settings(settings: _Settings) -> ListenerConfig | None:
    """``kafka:``: the Kafka wire-protocol listener, off when the section is absent."""
    if "kafka" not in settings.document:
        return None
    kafka = settings.mapping("kafka", settings.document.get("kafka"))
    for key in kafka:
        if key not in _KAFKA_KEYS:
            expected = f"unknown setting; expected one of {', '.join(_KAFKA_KEYS)}"
            raise settings.fail(f"kafka.{key}", kafka[key], expected)
    if "listeners" not in kafka:
        raise settings.fail("kafka.listeners", None, "required setting is missing, e.g. PLAINTEXT://127.0.0.1:9092")
    try:
        listener = parse_listener("listeners", kafka["listeners"])
        advertised = kafka.get("advertised.listeners")
        values: dict = {"listener": listener}
        if advertised is not None:
            values["advertised"] = parse_listener("advertised.listeners", advertised)
        for key, field_name in _KAFKA_COUNTS.items():
            if key in kafka:
                values[field_name] = count_value(kafka[key], key)
        for key, field_name in _KAFKA_SIZES.items():
            if key in kafka:
                values[field_name] = size_value(kafka[key], key)
        if "auto.create.topics.enable" in kafka:
            values["auto_create_topics"] = settings.boolean(
                "kafka.auto.create.topics.enable", kafka["auto.create.topics.enable"]
            )
        if "loopback.users" in kafka:
            values["loopback_users"] = kafka["loopback.users"]
        config = ListenerConfig(**values, security=parse_security(kafka))
        if listener.protocol in ("SSL", "SASL_SSL"):
            server_context(config.security)  # the files are read now, so that a bad one is a config error
        return config
    except ConfigError as err:
        key = err.key if err.key.startswith("kafka.") else f"kafka.{err.key}"
        raise settings.fail(key, err.value, err.reason) from None


def _log_settings(
    settings: _Settings, defaults: LogConfig, mount_defaults: MountLogConfig
) -> tuple[dict[str, LogConfig], dict[str, dict], dict[str, MountLogConfig]]:
    """``logs:``: each log's effective config, its own settings as written, and its mount settings."""
    logs: dict[str, LogConfig] = {}
    overrides: dict[str, dict] = {}
    mount: dict[str, MountLogConfig] = {}
    for name, own in settings.mapping("logs", settings.document.get("logs")).items():
        if not isinstance(name, str):
            raise settings.fail(f"logs.{name}", name, "YAML read this name as a number; quote it")
        try:
            key = check_new_log_name(name)
        except InvalidLogNameError as err:
            raise settings.fail(f"logs.{name}", name, str(err)) from None
        taken = next((other for other in logs if parse_log_dir_name(other) == key), None)
        if taken is not None:
            taken_by = f"topic {key[0]} partition {key[1]} is log {taken} already"
            raise settings.fail(f"logs.{name}", name, taken_by)
        own = settings.mapping(f"logs.{name}", own)
        # Per-log settings take topic-level names only, as Kafka's topic configs do.
        logs[name] = settings.log_config(f"logs.{name}", own, defaults, False)
        mount[name] = settings.mount_config(f"logs.{name}", own, mount_defaults)
        overrides[name] = dict(own)
    return logs, overrides, mount


def parse_config(text: str, source: str | Path = "<string>") -> DaemonConfig:
    """Parse and validate a YAML config given as text; ``source`` names it in errors."""
    source = Path(source)
    settings = _Settings(*_compose(text, source), source)
    data_dir = settings.path("data_dir")
    mount_point = settings.path("mount_point")
    if data_dir == mount_point or mount_point in data_dir.parents or data_dir in mount_point.parents:
        # A mount point inside the data dir would look like a log; a data dir inside the mount is hidden.
        raise settings.fail("mount_point", str(mount_point), f"must not overlap data_dir {data_dir}")
    read_only = settings.boolean("read_only", settings.document.get("read_only", False))
    allow_other, access = _fuse_settings(settings)
    defaults_mapping = settings.mapping("defaults", settings.document.get("defaults"))
    defaults = settings.log_config("defaults", defaults_mapping, None, True)
    cleaner = settings.cleaner_config(defaults_mapping)
    mount_defaults = settings.mount_config("defaults", defaults_mapping, None)
    logs, overrides, mount_logs = _log_settings(settings, defaults, mount_defaults)
    kafka = _kafka_settings(settings)
    return DaemonConfig(
        data_dir=data_dir,
        mount_point=mount_point,
        read_only=read_only,
        allow_other=allow_other,
        access=access,
        defaults=defaults,
        logs=logs,
        log_overrides=overrides,
        cleaner=cleaner,
        mount_defaults=mount_defaults,
        mount_logs=mount_logs,
        kafka=kafka,
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

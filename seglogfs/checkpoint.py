"""Kafka's small bookkeeping files: text checkpoints, ``partition.metadata``, the clean-shutdown marker,
empty producer snapshots, and log directory names.

Formats (see shared/reference/kafka-format.md sections 5 and 8):

- offset checkpoints (``recovery-point-offset-checkpoint``...): ``0`` / count / ``topic partition offset``
- ``leader-epoch-checkpoint``: ``0`` / count / ``epoch startOffset``
- ``partition.metadata``: ``version: 0\\ntopic_id: <22-char base64url UUID>`` (no trailing newline)
- ``.kafka_cleanshutdown``: ``{"version":0,"brokerEpoch":N}`` in the data dir

Every write goes to ``<file>.tmp``, is fsynced, renamed over the target and the directory fsynced, as
Kafka's ``CheckpointFile`` does, so a crash leaves either the old or the new file. The ``.tmp`` file is
always created afresh and never through a symlink (see :func:`create_new_file`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from seglogfs.errors import InvalidLogNameError, SeglogError

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN_FILE",
    "EMPTY_PRODUCER_SNAPSHOT",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "PARTITION_METADATA",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "CorruptCheckpointError",
    "atomic_write",
    "check_new_log_name",
    "clean_shutdown_marker_exists",
    "create_new_file",
    "fsync_dir",
    "is_kafka_special_dir",
    "new_topic_id",
    "parse_log_dir_name",
    "read_clean_shutdown_marker",
    "read_leader_epoch_checkpoint",
    "read_offset_checkpoint",
    "read_partition_metadata",
    "remove_clean_shutdown_marker",
    "shared_topic_partitions",
    "validate_log_name",
    "validate_topic",
    "write_clean_shutdown_marker",
    "write_empty_producer_snapshot",
    "write_leader_epoch_checkpoint",
    "write_offset_checkpoint",
    "write_partition_metadata",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

# int16 version 1, CRC-32C of the 4 zero bytes that follow, int32 count 0 (ProducerSnapshot.json).
EMPTY_PRODUCER_SNAPSHOT = bytes.fromhex("000148674bc700000000")

_VERSION = 0
_INT = re.compile(r"-?\d+")  # Integer.parseInt / Long.parseLong: no spaces, no '+', no '_'
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_LOG_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
# LocalLog's DeleteDirPattern / FutureDirPattern / StrayDirPattern: <topic>-<partition>.<uuid>-<kind>
_SPECIAL_DIR = re.compile(r"(\S+)-(\S+)\.(\S+)-(delete|future|stray)")
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")


class CorruptCheckpointError(SeglogError):
    """A checkpoint or metadata file that does not parse; names the file and the 1-based line."""

    def __init__(self, message: str, path: str | Path, line: int | None = None):
        self.path = str(path)
        self.line = line
        where = f" in {self.path}" + (f" at line {line}" if line is not None else "")
        super().__init__(f"{message}{where}")


# --- atomic writes ---------------------------------------------------------------------------------


def fsync_dir(path: str | Path) -> None:
    """fsync a directory so that renames and creations in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_new_file(path: str | Path) -> int:
    """A write descriptor on a new, empty regular file at ``path``, made by this call.

    A leftover at ``path`` (a crashed write's file, or a symlink planted there) is unlinked first, and
    the file is created with ``O_EXCL | O_NOFOLLOW``: a symlink is never followed, so nothing outside
    the directory is ever written. A directory in the way raises ``IsADirectoryError``.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def atomic_write(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write ``<path>.tmp``, fsync, rename over ``path``, fsync the dir."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = create_new_file(tmp)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


# --- text checkpoints ------------------------------------------------------------------------------


def _parse_int(text: str, bounds: tuple[int, int], what: str, path: Path, line: int) -> int:
    if _INT.fullmatch(text) is None or not bounds[0] <= int(text) <= bounds[1]:
        raise CorruptCheckpointError(f"bad {what} {text!r}", path, line)
    return int(text)


def _read_entries(path: str | Path, fields: int) -> list[tuple[list[str], int]]:
    """The entry lines of a version-0 checkpoint split on whitespace, each with its line number.

    Mirrors Kafka's ``CheckpointFile`` reader: an empty file, or one holding only the version line,
    has no entries; a version other than 0, a malformed line, or a count that does not match the
    number of entry lines is an error.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as err:
        raise CorruptCheckpointError(f"not UTF-8 text ({err.reason})", path) from None
    lines = text.splitlines()
    if not lines:
        return []
    if _parse_int(lines[0], _INT32, "version", path, 1) != _VERSION:
        raise CorruptCheckpointError(f"unsupported version {lines[0]!r}", path, 1)
    if len(lines) < 2:
        return []
    expected = _parse_int(lines[1], _INT32, "entry count", path, 2)
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        # Java's line.split("\\s+") keeps a leading empty field and drops trailing ones.
        parts = re.split(r"\s+", line.rstrip())
        if len(parts) != fields or not parts[0]:
            raise CorruptCheckpointError(f"malformed line {line!r}", path, number)
        entries.append((parts, number))
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"expected {expected} entries but found {len(entries)}", path, len(lines)
        )
    return entries


def _render(lines: Iterable[str], count: int) -> bytes:
    return f"{_VERSION}\n{count}\n".encode() + "".join(f"{line}\n" for line in lines).encode()


def read_offset_checkpoint(path: str | Path) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from an offset checkpoint; {} when the file does not exist.

    Raises ``CorruptCheckpointError`` naming the file and line on a bad version, a malformed line or
    a count mismatch.
    """
    path = Path(path)
    result: dict[tuple[str, int], int] = {}
    for (topic, partition, offset), number in _read_entries(path, 3):
        key = (topic, _parse_int(partition, _INT32, "partition", path, number))
        result[key] = _parse_int(offset, _INT64, "offset", path, number)
    return result


def write_offset_checkpoint(path: str | Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Atomically write ``{(topic, partition): offset}`` as a Kafka offset checkpoint (sorted lines)."""
    lines = []
    for (topic, partition), offset in sorted(offsets.items()):
        validate_topic(topic)
        if not 0 <= partition <= _INT32[1]:
            raise ValueError(f"partition {partition} of {topic!r} is not in [0, 2^31)")
        lines.append(f"{topic} {partition} {int(offset)}")
    atomic_write(path, _render(lines, len(lines)))


def read_leader_epoch_checkpoint(path: str | Path) -> list[tuple[int, int]]:
    """``[(epoch, start_offset), ...]`` in file order; [] when the file does not exist."""
    path = Path(path)
    return [
        (
            _parse_int(epoch, _INT32, "epoch", path, number),
            _parse_int(offset, _INT64, "start offset", path, number),
        )
        for (epoch, offset), number in _read_entries(path, 2)
    ]


def write_leader_epoch_checkpoint(path: str | Path, entries: Iterable[tuple[int, int]]) -> None:
    """Atomically write ``[(epoch, start_offset), ...]`` as a Kafka leader-epoch checkpoint."""
    lines = [f"{int(epoch)} {int(offset)}" for epoch, offset in entries]
    atomic_write(path, _render(lines, len(lines)))


# --- partition.metadata ----------------------------------------------------------------------------


def new_topic_id() -> str:
    """A random topic ID as Kafka prints it: 16 random bytes, base64url without padding (22 chars).

    Like Kafka's ``Uuid.randomUuid`` it never returns the all-zero ID, the metadata topic's ID
    (``AAAAAAAAAAAAAAAAAAAAAQ``), or an ID starting with '-' (which command-line tools take for a flag).
    """
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
        if not text.startswith("-") and int.from_bytes(raw, "big") > 1:
            return text


def write_partition_metadata(log_dir: str | Path, topic_id: str | None = None) -> str:
    """Atomically write ``<log_dir>/partition.metadata``; returns the topic ID (a new one when None)."""
    if topic_id is None:
        topic_id = new_topic_id()
    elif _TOPIC_ID.fullmatch(topic_id) is None:
        raise ValueError(f"topic id {topic_id!r} is not a 22-character base64url UUID")
    atomic_write(Path(log_dir) / PARTITION_METADATA, f"version: 0\ntopic_id: {topic_id}".encode())
    return topic_id


def read_partition_metadata(log_dir: str | Path) -> str | None:
    """The topic ID in ``<log_dir>/partition.metadata``, or None when the file does not exist."""
    path = Path(log_dir) / PARTITION_METADATA
    try:
        lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    # Kafka's PartitionMetadataReadBuffer splits each line on ":\s+".
    fields = [re.split(r":\s+", line, maxsplit=1) for line in lines]
    if not fields or fields[0] != ["version", "0"]:
        raise CorruptCheckpointError(f"expected 'version: 0', found {lines[0] if lines else ''!r}", path, 1)
    if len(fields) < 2 or fields[1][0] != "topic_id" or len(fields[1]) != 2:
        raise CorruptCheckpointError("expected 'topic_id: <id>'", path, 2)
    topic_id = fields[1][1].strip()
    if _TOPIC_ID.fullmatch(topic_id) is None:
        raise CorruptCheckpointError(f"bad topic id {topic_id!r}", path, 2)
    return topic_id


# --- clean shutdown marker -------------------------------------------------------------------------


def write_clean_shutdown_marker(data_dir: str | Path, broker_epoch: int = 0) -> None:
    """Atomically write ``<data_dir>/.kafka_cleanshutdown`` as Kafka 3.7+ does."""
    body = json.dumps({"version": 0, "brokerEpoch": int(broker_epoch)}, separators=(",", ":"))
    atomic_write(Path(data_dir) / CLEAN_SHUTDOWN_FILE, body.encode())


def clean_shutdown_marker_exists(data_dir: str | Path) -> bool:
    """True when the data dir was shut down cleanly (the marker file exists, whatever it holds)."""
    return (Path(data_dir) / CLEAN_SHUTDOWN_FILE).is_file()


def read_clean_shutdown_marker(data_dir: str | Path) -> int | None:
    """The broker epoch in the marker, -1 when the marker has none (older Kafka wrote an empty file or
    the JSON is unreadable: Kafka then still counts the shutdown as clean), None when there is no marker.
    """
    try:
        text = (Path(data_dir) / CLEAN_SHUTDOWN_FILE).read_bytes()
    except FileNotFoundError:
        return None
    try:
        epoch = json.loads(text).get("brokerEpoch", -1)
    except (ValueError, AttributeError):
        return -1
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else -1


def remove_clean_shutdown_marker(data_dir: str | Path) -> bool:
    """Delete the marker (done as soon as loading starts, KAFKA-10471); True if there was one."""
    path = Path(data_dir) / CLEAN_SHUTDOWN_FILE
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


# --- producer snapshots ----------------------------------------------------------------------------


def write_empty_producer_snapshot(path: str | Path) -> None:
    """Write an empty producer snapshot (``<20-digit offset>.snapshot``), fsynced.

    Kafka writes these at segment bases when no producer state exists; their presence lets it skip
    rebuilding producer state by scanning the log.
    """
    atomic_write(path, EMPTY_PRODUCER_SNAPSHOT)


# --- log directory names ---------------------------------------------------------------------------


def validate_topic(topic: object, what: str = "topic") -> str:
    """``topic`` if it is a valid Kafka topic name, else ``InvalidLogNameError``.

    Kafka's topic rule: 1-249 characters from [A-Za-z0-9._-], and not "." or "..".
    """
    if not isinstance(topic, str):
        raise InvalidLogNameError(f"{what} {topic!r} is not a string")
    if topic in (".", ".."):
        raise InvalidLogNameError(f"{what} {topic!r} is not allowed")
    if _LOG_NAME.fullmatch(topic) is None:
        if not topic:
            reason = "is empty"
        elif len(topic) > 249:
            reason = f"is {len(topic)} characters long (at most 249)"
        else:
            reason = "may contain only ASCII letters, digits, '.', '_' and '-'"
        raise InvalidLogNameError(f"{what} {topic!r} {reason}")
    return topic


def _split_log_dir_name(name: str) -> tuple[str, int]:
    """Kafka's split of ``<topic>-<partition>`` at the last '-' (see :func:`parse_log_dir_name`)."""
    topic, dash, suffix = name.rpartition("-")
    if dash and topic and suffix.isdigit() and int(suffix) <= _INT32[1]:
        return topic, int(suffix)
    return name, 0


def validate_log_name(name: object) -> str:
    """``name`` if it is a valid log directory name, else ``InvalidLogNameError``.

    The name follows Kafka's topic rule (1-249 characters from [A-Za-z0-9._-], not "." or ".."), and
    so does the topic it maps to: ``.-0`` would be topic "." (which no checkpoint may hold).
    """
    validate_topic(name, "log name")
    assert isinstance(name, str)
    topic, partition = _split_log_dir_name(name)
    try:
        validate_topic(topic)
    except InvalidLogNameError as exc:
        raise InvalidLogNameError(f"log name {name!r} would be partition {partition} of {exc}") from None
    return name


def parse_log_dir_name(name: str) -> tuple[str, int]:
    """``(topic, partition)`` of a log directory name.

    Kafka splits ``<topic>-<partition>`` at the last '-'. A name without a ``-<digits>`` suffix (or
    whose suffix would leave an empty topic or overflow an int32) is partition 0 of the topic of that
    whole name, so ``events`` and ``events-0`` both map to ``("events", 0)``.
    Raises ``InvalidLogNameError`` for a name outside Kafka's rules or whose topic would be.
    """
    validate_log_name(name)
    return _split_log_dir_name(name)


def check_new_log_name(name: object) -> tuple[str, int]:
    """``(topic, partition)`` of a name a new log may take, else ``InvalidLogNameError``.

    Beyond :func:`validate_log_name`, the name must be the one spelling of its topic-partition that
    Kafka itself would write: a ``-<digits>`` suffix is a partition in [0, 2^31) without leading
    zeros after a non-empty topic (``x-00``, ``x-007``, ``-5`` and ``t-2147483648`` are refused), and it
    is not one of Kafka's ``-delete``/``-future``/``-stray`` directory names. Whether the
    topic-partition is already taken by another name (``c`` beside ``c-0``) is the caller's check.
    """
    validate_log_name(name)
    assert isinstance(name, str)
    if is_kafka_special_dir(name):
        raise InvalidLogNameError(f"log name {name!r} is a Kafka -delete/-future/-stray directory name")
    topic, dash, suffix = name.rpartition("-")
    if dash and suffix.isdigit() and (not topic or str(int(suffix)) != suffix or int(suffix) > _INT32[1]):
        raise InvalidLogNameError(
            f"log name {name!r} is not canonical: write the partition after the last '-' as a number "
            f"in [0, 2147483647] without leading zeros, after a non-empty topic"
        )
    return parse_log_dir_name(name)


def shared_topic_partitions(names: Iterable[str]) -> dict[tuple[str, int], list[str]]:
    """The topic-partitions that two or more of ``names`` map to, each with those names (sorted).

    Such logs would share one line of every data-dir checkpoint (``c`` and ``c-0``, ``x-00`` and ``x-0``).
    """
    by_key: dict[tuple[str, int], list[str]] = {}
    for name in sorted(names):
        by_key.setdefault(parse_log_dir_name(name), []).append(name)
    return {key: found for key, found in by_key.items() if len(found) > 1}


def is_kafka_special_dir(name: str) -> bool:
    """True for Kafka's ``<topic>-<p>.<uuid>-delete|-future|-stray`` directories, which are not logs."""
    return _SPECIAL_DIR.fullmatch(name) is not None

"""Kafka's small bookkeeping files: text checkpoints, ``partition.metadata``, the clean-shutdown marker
and empty producer snapshots (their names: :mod:`seglogfs.log_files`).

Formats (see docs/kafka-format.md sections 5.1, 5.4, 8.4 and 8.5):

- offset checkpoints (``recovery-point-offset-checkpoint``...): ``0`` / count / ``topic partition offset``
- ``leader-epoch-checkpoint``: ``0`` / count / ``epoch startOffset``
- ``partition.metadata``: ``version: 0\\ntopic_id: <22-char base64url UUID>`` (no trailing newline)
- ``.kafka_cleanshutdown``: ``{"version":0,"brokerEpoch":N}`` in the data dir

Every write goes to ``<file>.tmp``, is fsynced, renamed over the target and the directory fsynced, as
Kafka's ``CheckpointFile`` does, so a crash leaves either the old or the new file. The ``.tmp`` file is
always created afresh and never through a symlink (:mod:`seglogfs.durable_files`).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from seglogfs.durable_files import atomic_write, fsync_dir
from seglogfs.errors import SeglogError
from seglogfs.log_files import CLEAN_SHUTDOWN_FILE, PARTITION_METADATA, validate_topic

log = logging.getLogger(__name__)

__all__ = [
    "EMPTY_PRODUCER_SNAPSHOT",
    "CorruptCheckpointError",
    "new_topic_id",
    "read_clean_shutdown_marker",
    "read_leader_epoch_checkpoint",
    "read_offset_checkpoint",
    "read_offset_checkpoint_or_empty",
    "read_partition_metadata",
    "remove_clean_shutdown_marker",
    "write_clean_shutdown_marker",
    "write_empty_producer_snapshot",
    "write_leader_epoch_checkpoint",
    "write_offset_checkpoint",
    "write_partition_metadata",
]


# int16 version 1, CRC-32C of the 4 zero bytes that follow, int32 count 0 (ProducerSnapshot.json).
EMPTY_PRODUCER_SNAPSHOT = bytes.fromhex("000148674bc700000000")

_VERSION = 0
_INT = re.compile(r"-?\d+")  # Integer.parseInt / Long.parseLong: no spaces, no '+', no '_'
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")


class CorruptCheckpointError(SeglogError):
    """A checkpoint or metadata file that does not parse; names the file and the 1-based line."""

    def __init__(self, message: str, path: str | Path, line: int | None = None):
        self.path = str(path)
        self.line = line
        where = f" in {self.path}" + (f" at line {line}" if line is not None else "")
        super().__init__(f"{message}{where}")


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


def read_offset_checkpoint_or_empty(
    path: Path, *, unreadable_is_empty: bool = False
) -> dict[tuple[str, int], int]:
    """A data dir's offset checkpoint; a missing or corrupt file counts as empty, as in Kafka (a warning
    names the file). ``unreadable_is_empty``: an OSError reading it counts as empty too (readers that
    must not fail on a broker's half-written data dir), else it propagates."""
    errors: tuple[type[Exception], ...] = (CorruptCheckpointError, OSError) if unreadable_is_empty else (
        CorruptCheckpointError,
    )
    try:
        return read_offset_checkpoint(path) if path.exists() else {}
    except errors as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}

def read_leader_epoch_checkpoint(path: str | Path) -> list[tuple[int, int]]:
    """``[(epoch, start_offset), ...]`` in file order; [] when the file does not exist.

    Kafka parity: the engine only writes this file; the reader checks ours against a broker's."""
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
    """The topic ID in ``<log_dir>/partition.metadata``, or None when the file does not exist.

    Kafka parity: the engine only writes this file; the reader checks ours against a broker's."""
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
    rebuilding producer state by scanning the log. No engine caller yet: ``producer_state.py`` writes
    full snapshots and is not wired into ``Log`` so far (issue 11); kept, with its tested bytes.
    """
    atomic_write(path, EMPTY_PRODUCER_SNAPSHOT)

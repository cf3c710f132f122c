"""Every on-disk name of a data dir, in one place (Kafka's ``LogFileUtils`` and ``LocalLog`` name rules).

A data dir holds log directories named ``<topic>-<partition>`` plus the data-dir files (checkpoints,
the clean-shutdown marker, the lock). A log directory holds segments, each a set of files named by
the segment's base offset as 20 zero-padded digits and a suffix (``00000000000000000000.log``), plus
the per-log files (``partition.metadata``, ``leader-epoch-checkpoint``, the owner lock). Files in
transit carry a second suffix: ``.deleted`` (retention, removed after ``file.delete.delay.ms``),
``.cleaned`` and ``.swap`` (a segment replacement; see :mod:`seglogfs.log_loader`), and ``.corrupt``
(a ``.swap`` set that failed validation, set aside). See ``docs/kafka-format.md`` section 8.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from seglogfs.errors import InvalidLogNameError

# --- segment files ---------------------------------------------------------------------------------

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"
KRAFT_SNAPSHOT_SUFFIX = ".checkpoint"  # a KRaft metadata snapshot: record batches, like a .log
#: the files of one segment, as the log layer renames them together
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
#: every file named by an offset in a log dir (producer snapshots are named by the offset they cover)
OFFSET_NAMED_SUFFIXES = (*SEGMENT_SUFFIXES, PRODUCER_SNAPSHOT_SUFFIX)

DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
CORRUPT_SUFFIX = ".corrupt"


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset as 20 zero-padded digits, then the suffix."""
    return f"{base_offset:020d}{suffix}"


def base_offset_from_name(name: str) -> int:
    """The base offset encoded before the first '.' of a segment file name."""
    return int(name.split(".", 1)[0])


def parse_offset_file_name(name: str) -> tuple[int, str] | None:
    """``(offset, suffix)`` of a file named by an offset (``<digits>.<suffix>``, the suffix with its dot
    and any in-transit suffix, ``.log.deleted``), or None for any other name."""
    stem, dot, rest = name.partition(".")
    if not dot or not (stem.isascii() and stem.isdigit()):
        return None
    return int(stem), "." + rest


def sibling_path(path: Path, suffix: str) -> Path:
    """The file of the same segment as ``path`` with another suffix (``5.index`` -> ``5.log``), its
    offset kept as written (a dumped file need not be named the canonical 20-digit way)."""
    return path.absolute().parent / (path.name.partition(".")[0] + suffix)


def is_segment_file_name(name: str, suffixes: Iterable[str] = OFFSET_NAMED_SUFFIXES) -> bool:
    """True for ``<digits><suffix>`` with one of ``suffixes`` exactly (no in-transit suffix)."""
    parsed = parse_offset_file_name(name)
    return parsed is not None and parsed[1] in suffixes


def offset_named_files(directory: Path, suffix: str = "") -> list[Path]:
    """The files of ``directory`` named by an offset (``<digits>.<...>``) and ending in ``suffix``, sorted."""
    return sorted(
        path
        for path in directory.iterdir()
        if path.name.endswith(suffix) and parse_offset_file_name(path.name) is not None
    )


def segment_base_offsets(directory: Path) -> list[int]:
    """The base offsets of the segments in a log dir (its ``<digits>.log`` files), ascending."""
    return sorted(
        parsed[0]
        for parsed in (parse_offset_file_name(name) for name in os.listdir(directory))
        if parsed is not None and parsed[1] == LOG_SUFFIX
    )


def files_of_segment(directory: Path, base_offset: int, suffix: str = "") -> list[Path]:
    """The files of ``directory`` named ``<20-digit base_offset>.<...><suffix>``, sorted."""
    return sorted(directory.glob(segment_file_name(base_offset, ".*" + suffix)))


def sealed_segment_file(name: str, active_base_offset: int) -> bool:
    """True for a ``.log``/``.index``/``.timeindex`` of a segment older than the active one, named the
    canonical 20-digit way: such a file never changes again (retention may still delete it)."""
    parsed = parse_offset_file_name(name)
    return (
        parsed is not None
        and parsed[1] in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
        and name == segment_file_name(parsed[0], parsed[1])
        and parsed[0] < active_base_offset
    )


# --- data-dir and log-dir files --------------------------------------------------------------------

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"  # KRaft's bootstrap metadata, a record-batch file
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DATA_DIR_LOCK_FILE = ".lock"  # Kafka's LogManager.LockFileName

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
LOG_LOCK_FILE = ".seglogfs.lock"  # ours: the owner of one log dir (a broker keeps no such file)
#: the files a log dir holds besides its segments
LOG_DIR_FILES = (PARTITION_METADATA, LEADER_EPOCH_CHECKPOINT)

# --- log directory names ---------------------------------------------------------------------------

_INT32_MAX = 2**31 - 1
_LOG_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
# LocalLog's DeleteDirPattern / FutureDirPattern / StrayDirPattern: <topic>-<partition>.<uuid>-<kind>
_SPECIAL_DIR = re.compile(r"(\S+)-(\S+)\.(\S+)-(delete|future|stray)")



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
    if dash and topic and suffix.isdigit() and int(suffix) <= _INT32_MAX:
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
    if dash and suffix.isdigit() and (not topic or str(int(suffix)) != suffix or int(suffix) > _INT32_MAX):
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


# --- finding log dirs ------------------------------------------------------------------------------


def is_log_dir(path: Path) -> bool:
    """True for a directory that holds a segment (live or awaiting deletion) or a log's owner lock:
    a log dir, as opposed to a data dir of log dirs."""
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                parsed = parse_offset_file_name(entry.name)
                if entry.name == LOG_LOCK_FILE or (
                    parsed is not None and parsed[1] in (LOG_SUFFIX, LOG_SUFFIX + DELETED_SUFFIX)
                ):
                    return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    return False


def find_log_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """The log directories under ``path``: itself when it is a log dir, else its subdirectories whose
    names are log names (sorted; Kafka's special dirs, hidden names and symlinks left out)."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    if is_log_dir(root):
        return [root]
    found = []
    for child in sorted(root.iterdir()):
        if child.is_symlink() or not child.is_dir() or child.name.startswith("."):
            continue
        if is_kafka_special_dir(child.name):
            continue
        try:
            validate_log_name(child.name)
        except InvalidLogNameError:
            continue
        found.append(child)
    return found

"""Producer state: per producer id, its epoch, last batch and open transaction, as Kafka's
ProducerStateManager keeps it, plus its ``<20-digit offset>.snapshot`` files.

The state is built by applying the log's batches in offset order (:meth:`ProducerStateManager.update`,
:meth:`~ProducerStateManager.replay`) or loaded from the newest usable snapshot
(:meth:`~ProducerStateManager.load_latest`). A transaction of producer P opens at P's first
transactional data batch after its previous marker and completes at P's COMMIT or ABORT marker; the
caller turns each completed ABORTED transaction into a ``.txnindex`` entry with the last stable offset
:meth:`~ProducerStateManager.last_stable_offset` gives. Snapshot layout: docs/kafka-format.md
section 5.4. Not thread-safe: the owning log serialises calls.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from crc32c import crc32c

from .durable_files import atomic_write, fsync_dir
from .errors import CorruptRecordError, ReadOnlyLogError, SeglogError
from .log_files import PRODUCER_SNAPSHOT_SUFFIX, parse_offset_file_name, segment_file_name
from .records import BatchHeader, Compression, decode_batch_all, decode_record, records_area

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "CompletedTxn",
    "ControlType",
    "CorruptSnapshotError",
    "EndTxnMarker",
    "OngoingTxn",
    "ProducerStateEntry",
    "ProducerStateManager",
    "end_txn_marker",
    "read_snapshot",
    "snapshot_bytes",
]

#: Kafka's ``producer.id.expiration.ms`` default: one day
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, CRC-32C of bytes [6, end), entry count
_CRC_START = 6
# producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch,
# currentTxnFirstOffset (-1 = none): 46 bytes
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_MARKER_KEY = struct.Struct(">hh")  # version, control type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
# A snapshot being written (durable_files.atomic_write's temp name): its suffix is ".snapshot.tmp", so no
# snapshot listing (ours, Kafka's: the name must end in ".snapshot") ever takes it for a snapshot.
_TEMP_NAME = re.compile(r"\d+\.snapshot\.tmp")


class CorruptSnapshotError(SeglogError):
    """A producer snapshot that does not parse (bad version, CRC or length); names the file."""


class ControlType(IntEnum):
    """The control record types that end a transaction (2-6 are KRaft's, not markers)."""

    ABORT = 0
    COMMIT = 1


@dataclass(slots=True, frozen=True)
class EndTxnMarker:
    """The control record of a COMMIT or ABORT control batch."""

    control_type: ControlType
    coordinator_epoch: int


@dataclass(slots=True, frozen=True)
class CompletedTxn:
    """A transaction its marker ended: [first_offset, last_offset], last_offset being the marker's."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class OngoingTxn(NamedTuple):
    """An open transaction: its producer and the base offset of its first data batch."""

    producer_id: int
    first_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    """What is known of one producer: exactly the fields of a snapshot entry.

    Kafka keeps the last 5 batches of each producer to detect duplicate client retries; our appends
    are not idempotent and never validate client sequences, so only the last data batch is kept
    (``last_sequence``, ``last_offset``, ``offset_delta``, ``timestamp``), which is all a snapshot
    stores. ``last_offset`` is -1 and ``last_sequence`` -1 until the producer's first data batch.
    """

    producer_id: int
    epoch: int = -1
    last_sequence: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None


def end_txn_marker(
    header: BatchHeader, batch: bytes | memoryview, *, path: str | Path | None = None
) -> EndTxnMarker | None:
    """The transaction marker a control batch holds (``batch``: its bytes alone), or None when it
    holds none: a KRaft or unknown control type, or no record (compaction empties a control batch
    whose transaction is gone). Only the first record counts, as in Kafka. A damaged record, or a key
    or marker value too short to parse, raises CorruptRecordError at the batch's position in ``path``.
    The CRC is the caller's to check."""
    try:
        first = _first_record(header.at(0), batch, path)
    except CorruptRecordError as exc:
        raise exc.at(path, header.position) from None
    if first is None:
        return None
    key, value = first
    where = f"control batch at offset {header.base_offset}"
    if key is None or len(key) < _MARKER_KEY.size:
        size = "null" if key is None else f"{len(key)} bytes"
        raise CorruptRecordError(f"{where}: control record key is {size}, needs 4", path, header.position)
    # A key or value version above 0 is parsed as version 0, as Kafka does.
    _, type_id = _MARKER_KEY.unpack_from(key)
    if type_id not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    if value is None or len(value) < _MARKER_VALUE.size:
        size = "null" if value is None else f"{len(value)} bytes"
        raise CorruptRecordError(
            f"{where}: {ControlType(type_id).name} marker value is {size}, needs 6", path, header.position
        )
    _, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return EndTxnMarker(ControlType(type_id), coordinator_epoch)


def _first_record(
    header: BatchHeader, batch: bytes | memoryview, path: str | Path | None
) -> tuple[bytes | None, bytes | None] | None:
    """(key, value) of the first record of the control batch ``header`` (at position 0 of ``batch``)."""
    if header.records_count == 1 and header.compression == Compression.NONE:
        # what a coordinator writes: one uncompressed record, decoded alone (6x faster than the batch)
        record = decode_record(records_area(batch, header, path), header, path=path)
        return record.key, record.value
    records = decode_batch_all(batch, header, path=path)
    return (records[0].key, records[0].value) if records else None


# --- snapshot files --------------------------------------------------------------------------------


def snapshot_bytes(entries: Iterable[ProducerStateEntry]) -> bytes:
    """A snapshot file's bytes holding ``entries`` in the order given."""
    packed = [
        _SNAPSHOT_ENTRY.pack(
            e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp,
            e.coordinator_epoch, -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
        for e in entries
    ]
    body = struct.pack(">i", len(packed)) + b"".join(packed)  # the CRC covers the count too
    return struct.pack(">hI", _SNAPSHOT_VERSION, crc32c(body)) + body


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """The entries of a snapshot file; CorruptSnapshotError naming it for a bad version, CRC or length
    (a symlink is never followed: OSError ELOOP, as the loader refuses symlinked segment files)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        data = file.read()
    if len(data) < _SNAPSHOT_HEAD.size:
        raise CorruptSnapshotError(f"snapshot {path} is {len(data)} bytes, shorter than its 10-byte header")
    version, stored_crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    if version != _SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot {path} has unknown version {version}")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != stored_crc:
        raise CorruptSnapshotError(f"snapshot {path} has CRC {computed} but its header says {stored_crc}")
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"snapshot {path} holds {len(data)} bytes for {count} entries")
    entries = []
    for producer_id, epoch, sequence, last_offset, delta, timestamp, coordinator_epoch, txn_first in (
        _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEAD.size :])
    ):
        first = None if txn_first < 0 else txn_first
        entries.append(ProducerStateEntry(
            producer_id, epoch, sequence, last_offset, delta, timestamp, coordinator_epoch, first
        ))
    return entries


def producers_listed_twice(entries: list[ProducerStateEntry]) -> list[int]:
    """The producer ids a snapshot lists more than once, ascending (a sound snapshot has none)."""
    listed = Counter(entry.producer_id for entry in entries)
    return sorted(pid for pid, times in listed.items() if times > 1)


def _check_open_transactions(entries: list[ProducerStateEntry], offset: int, path: Path) -> None:
    """CorruptSnapshotError when the open transactions of a snapshot taken at ``offset`` cannot be: one
    beginning at or past the snapshot's own offset, or two beginning at the same offset; or when a
    producer is listed twice (its first entry's open transaction would stay open for good, with no
    producer left to end it). The CRC says only that the bytes are as written."""
    twice = producers_listed_twice(entries)
    if twice:
        raise CorruptSnapshotError(f"snapshot {path}: producer {twice[0]} is listed twice")
    firsts: set[int] = set()
    for entry in entries:
        first = entry.current_txn_first_offset
        if first is None:
            continue
        if first >= offset or first in firsts:
            raise CorruptSnapshotError(
                f"snapshot {path}: producer {entry.producer_id}'s open transaction begins at {first}, "
                f"{'past the snapshot offset' if first >= offset else 'as another one does'} ({offset})"
            )
        firsts.add(first)


# --- the manager -----------------------------------------------------------------------------------


class ProducerStateManager:
    """The producer state of one log, and its snapshots in ``directory`` (the log dir)."""

    def __init__(
        self,
        directory: Path,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        read_only: bool = False,
    ) -> None:
        """``read_only``: never write, rename or delete a file (a corrupt or out-of-range snapshot is
        then skipped, and :meth:`take_snapshot` raises ReadOnlyLogError)."""
        self.directory = Path(directory)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.read_only = read_only
        self._producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id, ascending (Kafka's TreeMap of ongoing transactions)
        self._ongoing: dict[int, int] = {}
        self._map_end_offset = 0

    # --- the state ---

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Every known producer by id (a read-only view; the entries are live)."""
        return MappingProxyType(self._producers)

    @property
    def map_end_offset(self) -> int:
        """The offset after the last batch the state has seen (Kafka's mapEndOffset)."""
        return self._map_end_offset

    def update_map_end_offset(self, offset: int) -> None:
        """Record that the state covers the log up to ``offset`` (exclusive)."""
        self._map_end_offset = offset

    def ongoing_transactions(self) -> list[OngoingTxn]:
        """The open transactions, oldest first."""
        return [OngoingTxn(pid, first) for first, pid in self._ongoing.items()]

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None when none is open."""
        return next(iter(self._ongoing), None)

    def _open_txn(self, entry: ProducerStateEntry, first_offset: int) -> None:
        entry.current_txn_first_offset = first_offset
        newest = next(reversed(self._ongoing), None)
        self._ongoing[first_offset] = entry.producer_id
        if newest is not None and first_offset < newest:  # out of order (a load): keep them sorted
            self._ongoing = dict(sorted(self._ongoing.items()))

    def update(self, header: BatchHeader, marker: EndTxnMarker | None) -> CompletedTxn | None:
        """Apply one batch (``marker``: its :func:`end_txn_marker`, for a control batch); the
        transaction a marker completes, still open until :meth:`complete_txn`. Batches without a
        producer id (ours, legacy ones) leave producers alone."""
        self._map_end_offset = header.last_offset + 1
        if header.producer_id < 0 or (header.is_control and marker is None):
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            entry = self._producers[header.producer_id] = ProducerStateEntry(header.producer_id)
        if entry.epoch != header.producer_epoch:  # Kafka forgets the last batches of another epoch
            entry.epoch = header.producer_epoch
            entry.last_sequence, entry.last_offset, entry.offset_delta = -1, -1, 0
        if marker is not None:
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.timestamp = header.max_timestamp  # Kafka's lastTimestamp moves with markers too
            first = entry.current_txn_first_offset
            if first is None:
                return None  # a marker with no open transaction completes nothing
            aborted = marker.control_type == ControlType.ABORT
            return CompletedTxn(header.producer_id, first, header.base_offset, aborted)
        entry.last_sequence = header.last_sequence
        entry.last_offset = header.last_offset
        entry.offset_delta = header.last_offset - header.base_offset
        entry.timestamp = header.max_timestamp
        if header.is_transactional and entry.current_txn_first_offset is None:
            self._open_txn(entry, header.base_offset)
        return None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is closed: the first offset of the oldest open transaction of
        another producer, else the offset after the marker."""
        for first, pid in self._ongoing.items():
            if pid != completed.producer_id:
                return first
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Close the transaction ``completed`` (returned by :meth:`update`)."""
        self._ongoing.pop(completed.first_offset, None)
        entry = self._producers.get(completed.producer_id)
        if entry is not None and entry.current_txn_first_offset == completed.first_offset:
            entry.current_txn_first_offset = None

    def replay(
        self,
        batches: Iterable[tuple[BatchHeader, bytes | memoryview]],
        *,
        path: str | Path | None = None,
        marker: Callable[[BatchHeader, bytes | memoryview], EndTxnMarker | None] | None = None,
    ) -> list[tuple[CompletedTxn, int]]:
        """Apply batches in offset order (each with its bytes, read only for control batches); every
        transaction completed, in marker order, with its last stable offset. ``path`` names the file
        in errors; ``marker`` reads a control batch's marker instead of :func:`end_txn_marker` (which
        raises on a malformed one)."""
        completed_txns = []
        for header, batch in batches:
            found = None
            if header.is_control and header.producer_id >= 0:
                found = end_txn_marker(header, batch, path=path) if marker is None else marker(header, batch)
            completed = self.update(header, found)
            if completed is not None:
                completed_txns.append((completed, self.last_stable_offset(completed)))
                self.complete_txn(completed)
        return completed_txns

    # --- snapshots ---

    def _snapshot_files(self) -> list[tuple[int, Path]]:
        """(offset, path) of every ``<offset>.snapshot`` in the directory, oldest first."""
        found = []
        with os.scandir(self.directory) as entries:
            for dir_entry in entries:
                parsed = parse_offset_file_name(dir_entry.name)
                if parsed is not None and parsed[1] == PRODUCER_SNAPSHOT_SUFFIX:
                    found.append((parsed[0], Path(dir_entry.path)))
        return sorted(found)

    def snapshot_offsets(self) -> list[int]:
        """The offsets of the snapshot files, ascending."""
        return [offset for offset, _ in self._snapshot_files()]

    def take_snapshot(self) -> Path:
        """Write every producer (by id) to ``<map_end_offset>.snapshot``, crash-safe: a crash leaves
        the previous file or the new one, and at worst a temp file :meth:`load_latest` removes."""
        if self.read_only:
            raise ReadOnlyLogError(f"{self.directory} is open read-only: no producer snapshot written")
        path = self.directory / segment_file_name(self._map_end_offset, PRODUCER_SNAPSHOT_SUFFIX)
        data = snapshot_bytes(self._producers[pid] for pid in sorted(self._producers))
        if _holds(path, data):
            return path  # the same snapshot is on disk already (an idle log's close, a restart's open)
        atomic_write(path, data)
        return path

    def delete_snapshots_below(self, offset: int) -> None:
        """Delete the snapshots taken before ``offset`` (Kafka's deleteSnapshotsBefore)."""
        self._delete_snapshots(lambda snap: snap < offset)

    def _delete_snapshots(self, doomed: Callable[[int], bool]) -> list[tuple[int, Path]]:
        """Delete the snapshots whose offset is ``doomed`` (a writer's); the others, oldest first."""
        files = self._snapshot_files()
        if self.read_only:
            return files
        kept, deleted = [], False
        for offset, path in files:
            if doomed(offset):
                path.unlink(missing_ok=True)
                deleted = True
            else:
                kept.append((offset, path))
        if deleted:
            fsync_dir(self.directory)
        return kept

    def _remove_temp_files(self) -> None:
        """Remove the temp files of snapshots a crash interrupted."""
        if self.read_only:
            return
        with os.scandir(self.directory) as entries:
            temps = [Path(e.path) for e in entries if _TEMP_NAME.fullmatch(e.name)]
        for temp in temps:
            log.info("removing %s, a producer snapshot a crash left unfinished", temp)
            temp.unlink(missing_ok=True)

    def _expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        # Kafka's isProducerExpired: an open transaction keeps a producer however old it is.
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.timestamp >= self.producer_id_expiration_ms
        )

    def load_latest(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> int:
        """Replace the state with the newest usable snapshot's; the offset to replay the log from.

        Snapshots outside [log_start_offset, log_end_offset] are deleted; a corrupt one is deleted
        with a warning naming it and the next older one tried. Producers expired at ``now_ms`` are
        dropped (unless in a transaction). Without a usable snapshot the state is empty and the
        replay starts at ``log_start_offset``.
        """
        self._remove_temp_files()
        kept = self._delete_snapshots(lambda snap: snap < log_start_offset or snap > log_end_offset)
        self._producers.clear()
        self._ongoing.clear()
        for offset, path in reversed(kept):
            if not log_start_offset <= offset <= log_end_offset:
                continue  # out of range (kept by a read-only load)
            try:
                entries = read_snapshot(path)
                _check_open_transactions(entries, offset, path)
            except (CorruptSnapshotError, OSError) as exc:  # OSError: ELOOP, a symlink planted there
                if self.read_only or not isinstance(exc, CorruptSnapshotError):
                    log.warning("%s; skipping it", exc)
                    continue
                log.warning("%s; deleting it", exc)
                path.unlink(missing_ok=True)
                fsync_dir(self.directory)
                continue
            for entry in entries:
                if not self._expired(entry, now_ms):
                    self._load_entry(entry)
            self._map_end_offset = offset
            return offset
        self._map_end_offset = log_start_offset
        return log_start_offset

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._open_txn(entry, entry.current_txn_first_offset)


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` holds exactly ``data`` (a file there was written by ``atomic_write``: durable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        return os.pread(fd, len(data) + 1, 0) == data
    except OSError:
        return False
    finally:
        os.close(fd)

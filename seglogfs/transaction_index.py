"""TransactionIndex: the ``.txnindex`` of one segment, the aborted transactions whose markers it holds.

Each entry is an :class:`AbortedTxn` of 34 big-endian bytes (docs/kafka-format.md section 8.6),
appended in marker order, so ``last_offset`` increases through the file. A read_committed reader
collects the entries overlapping its range, segment after segment, and stops at the first segment
holding an entry whose ``last_stable_offset`` reaches past the range: every transaction still open
below that point was completed (and indexed) by then.

The file exists only once something was appended (Kafka creates it only when needed); a missing file
and an empty one both mean "no aborted transaction here". Writers are serialised by the owning log;
a reader may run alongside an append and then ignores a partly written last entry.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .durable_files import atomic_write
from .errors import CorruptIndexError, InvalidRecordError, ReadOnlyLogError

__all__ = ["ABORTED_TXN_SIZE", "AbortedTxn", "TransactionIndex"]

_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
ABORTED_TXN_SIZE = _ENTRY.size  # 34
_CURRENT_VERSION = 0
_DTYPE = np.dtype(
    [("version", ">i2"), ("producer_id", ">i8"), ("first", ">i8"), ("last", ">i8"), ("lso", ">i8")]
)
_NOFOLLOW = os.O_CLOEXEC | os.O_NOFOLLOW  # a symlink planted at the path is ELOOP, never followed


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: producer, its first and marker offsets, the LSO when it completed."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = _CURRENT_VERSION

    def to_bytes(self) -> bytes:
        """The 34-byte entry: int16 version, then producerId, first, last, lastStable as int64."""
        try:
            return _ENTRY.pack(
                self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
            )
        except struct.error as exc:
            raise ValueError(f"{self} does not fit a transaction index entry: {exc}") from None

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, position: int = 0) -> AbortedTxn:
        """The entry at ``position`` of ``data`` (at least 34 bytes there), nothing checked."""
        version, producer_id, first, last, lso = _ENTRY.unpack_from(data, position)
        return cls(producer_id, first, last, lso, version)


def _txns(entries: np.ndarray) -> list[AbortedTxn]:
    return [AbortedTxn(pid, first, last, lso, version) for version, pid, first, last, lso in entries.tolist()]


class TransactionIndex:
    """The ``.txnindex`` at ``path`` of the segment starting at ``base_offset``.

    ``writable=False`` never changes the file (append, truncate_to and reset raise ReadOnlyLogError).
    """

    def __init__(self, path: Path, base_offset: int, *, writable: bool = True):
        self.path = Path(path)
        self.base_offset = base_offset
        self.writable = writable
        self._fd = -1  # opened by the first change; O_APPEND, so every write lands at the end
        self._last_offset: int | None = None  # of the last entry, once known (None: empty or not read)
        self._last_known = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ reading

    def _read_file(self) -> bytes:
        """The whole file (b"" when it does not exist)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError:
            return b""
        try:
            size = os.fstat(fd).st_size
            chunks, position = [], 0
            while position < size:
                chunk = os.pread(fd, size - position, position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _entry_array(self, data: bytes | None = None) -> np.ndarray:
        """The complete entries of ``data`` (by default the file) as a structured array, each
        version checked.

        A partial last entry is left out: an append may be under way (a torn one is what
        :meth:`sanity_check` reports, and recovery rebuilds the file).
        """
        data = self._read_file() if data is None else data
        whole = len(data) - len(data) % ABORTED_TXN_SIZE
        entries = np.frombuffer(data, dtype=_DTYPE, count=whole // ABORTED_TXN_SIZE)
        bad = np.flatnonzero(entries["version"] != _CURRENT_VERSION)
        if bad.size:
            self._corrupt(int(bad[0]), f"version {int(entries['version'][bad[0]])} (only 0 is known)")
        return entries

    def entries(self) -> list[AbortedTxn]:
        """Every entry in file order ([] when the file is missing or empty)."""
        return _txns(self._entry_array())

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The entries overlapping ``[fetch_offset, upper_bound_offset)`` (``last_offset >= fetch_offset``
        and ``first_offset < upper_bound_offset``) in file order, and whether the search is complete:
        True when an entry's ``last_stable_offset >= upper_bound_offset`` (no later segment can hold an
        aborted transaction starting below the bound)."""
        entries = self._entry_array()
        overlapping = (entries["last"] >= fetch_offset) & (entries["first"] < upper_bound_offset)
        complete = bool((entries["lso"] >= upper_bound_offset).any())
        return _txns(entries[overlapping]), complete

    def sanity_check(self) -> None:
        """CorruptIndexError naming the file and the entry's byte position when the length is not a
        whole number of entries, a version is not 0, an entry's first offset is past its last, a last
        offset is below the segment's base offset, or the last offsets decrease."""
        data = self._read_file()
        if not data:  # no file, or no entry: nothing to check (most segments)
            return
        if len(data) % ABORTED_TXN_SIZE:
            whole = len(data) - len(data) % ABORTED_TXN_SIZE
            raise CorruptIndexError(
                f"transaction index {self.path}: {len(data)} bytes is not a multiple of "
                f"{ABORTED_TXN_SIZE}: a partial entry at position {whole}"
            )
        entries = self._entry_array(data)
        first, last = entries["first"], entries["last"]
        checks = (
            (first > last, "first offset {first} is past last offset {last}"),
            (last < self.base_offset, f"last offset {{last}} is below the base offset {self.base_offset}"),
            (np.r_[False, last[1:] < last[:-1]], "last offset {last} is below the previous entry's"),
        )
        damaged = [
            (int(bad[0]), reason) for failing, reason in checks if (bad := np.flatnonzero(failing)).size
        ]
        if damaged:
            i, reason = min(damaged)  # the first damaged entry in the file
            self._corrupt(i, reason.format(first=int(first[i]), last=int(last[i])))

    def _corrupt(self, entry: int, reason: str) -> None:
        raise CorruptIndexError(
            f"transaction index {self.path}: entry at position {entry * ABORTED_TXN_SIZE}: {reason}"
        )

    # ------------------------------------------------------------------ changing

    def append(self, txn: AbortedTxn) -> None:
        """Add ``txn`` at the end, creating the file on the first append.

        InvalidRecordError when its first offset is past its last, its last offset is below the
        segment's base offset or not above the previous entry's (one marker completes one
        transaction, so two entries never share a last offset; Kafka refuses it too), or its version
        is not 0. CorruptIndexError when the file ends in a partial entry. All or nothing: a short
        write (ENOSPC) is cut back and raised.
        """
        self._check_writable()
        if txn.version != _CURRENT_VERSION:
            raise InvalidRecordError(f"{self.path}: aborted transaction {txn}: version must be 0")
        if txn.first_offset > txn.last_offset or txn.last_offset < self.base_offset:
            raise InvalidRecordError(
                f"{self.path}: aborted transaction {txn}: needs first offset <= last offset and "
                f"last offset >= the segment's base offset {self.base_offset}"
            )
        entry = txn.to_bytes()
        with self._lock:
            fd = self._open_for_writing(create=True)
            previous = self._previous_last_offset(fd)
            if previous is not None and txn.last_offset <= previous:
                raise InvalidRecordError(
                    f"{self.path}: aborted transaction {txn}: last offset {txn.last_offset} is not "
                    f"above the previous entry's {previous}"
                )
            size = os.fstat(fd).st_size
            written = os.write(fd, entry)
            if written != len(entry):
                os.ftruncate(fd, size)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
            self._last_offset, self._last_known = txn.last_offset, True

    def _open_for_writing(self, *, create: bool) -> int:
        """The writer's descriptor (held from then on); -1 when the file is missing and not ``create``."""
        if self._fd < 0:
            flags = os.O_RDWR | os.O_APPEND | _NOFOLLOW | (os.O_CREAT if create else 0)
            try:
                self._fd = os.open(self.path, flags, 0o644)
            except FileNotFoundError:
                if create:
                    raise
        return self._fd

    def _previous_last_offset(self, fd: int) -> int | None:
        """The last entry's last offset, read once from the file (None when it is empty)."""
        if not self._last_known:
            size = os.fstat(fd).st_size
            if size % ABORTED_TXN_SIZE:
                raise CorruptIndexError(
                    f"transaction index {self.path}: cannot append after a partial entry at position "
                    f"{size - size % ABORTED_TXN_SIZE} ({size} bytes)"
                )
            if size:
                tail = os.pread(fd, ABORTED_TXN_SIZE, size - ABORTED_TXN_SIZE)
                self._last_offset = AbortedTxn.from_bytes(tail).last_offset
            self._last_known = True
        return self._last_offset

    def truncate_to(self, offset: int) -> None:
        """Drop the entries from the first whose last offset is >= ``offset`` on (a log truncated to
        ``offset`` loses the markers at and after it), and a partial last entry. The entries are in
        last-offset order, so one cut of the file does it."""
        self._check_writable()
        with self._lock:
            fd = self._open_for_writing(create=False)
            if fd < 0:
                return
            entries = self._entry_array()
            dropped = np.flatnonzero(entries["last"] >= offset)
            keep = int(dropped[0]) if dropped.size else entries.size
            if keep * ABORTED_TXN_SIZE < os.fstat(fd).st_size:
                os.ftruncate(fd, keep * ABORTED_TXN_SIZE)
            self._last_offset = int(entries["last"][keep - 1]) if keep else None
            self._last_known = True

    def rewrite(self, entries: Sequence[AbortedTxn]) -> None:
        """Replace the file with ``entries`` in one step (a new file renamed over it: a crash leaves the
        old file or the new one); no entry removes it. The entries are checked as :meth:`append`
        checks them."""
        self._check_writable()
        previous: int | None = None
        for txn in entries:
            if txn.first_offset > txn.last_offset or txn.last_offset < self.base_offset or (
                previous is not None and txn.last_offset <= previous
            ):
                raise InvalidRecordError(f"{self.path}: aborted transaction {txn} out of order or range")
            previous = txn.last_offset
        with self._lock:
            if self._fd >= 0:  # it would go on writing to the replaced file
                os.close(self._fd)
                self._fd = -1
            if entries:
                atomic_write(self.path, b"".join(txn.to_bytes() for txn in entries))
            else:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            self._last_offset, self._last_known = previous, True

    def reset(self) -> None:
        """Empty the file (when it exists): recovery rebuilds it from the segment's markers."""
        self._check_writable()
        with self._lock:
            fd = self._open_for_writing(create=False)
            if fd >= 0:
                os.ftruncate(fd, 0)
            self._last_offset, self._last_known = None, fd >= 0

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyLogError(f"transaction index {self.path} is open read-only")

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fsync the file when this object has changed it."""
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)

    def close(self) -> None:
        """Close the writer's descriptor (appending later opens it again)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._last_known = False

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Rename the file (e.g. to ``.deleted``) when it exists; the index refers to ``new_path`` from
        then on (an open descriptor follows the file), like :meth:`AbstractIndex.rename_to`."""
        new_path = Path(new_path)
        with self._lock:
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.path, new_path)
            self.path = new_path

    def delete_if_exists(self) -> bool:
        """Close and delete the file; False when there was none."""
        self.close()
        with self._lock, contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            return True
        return False

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self.path)!r}, base_offset={self.base_offset})"


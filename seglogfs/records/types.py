"""The codec's value types: what goes into a batch (ProducerRecord) and what comes out of one (Record,
DecodedRecord, RecordColumns, RecordBounds)."""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import repeat
from pathlib import Path

import numpy as np

Header = tuple[str, bytes | None]
#: what the codec reads batches from: a file's bytes, a view of them, or the file mapped
ByteSource = bytes | bytearray | memoryview | mmap.mmap
#: the file named in errors (None: none)
Where = str | Path | None


class TimestampType(IntEnum):
    """Kafka's timestamp types (the numbers Spark's Kafka source uses for ``timestampType``)."""

    NO_TIMESTAMP = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @classmethod
    def from_name(cls, name: str) -> TimestampType:
        """``CreateTime`` / ``LogAppendTime`` (Kafka's ``message.timestamp.type`` values)."""
        names = {"createtime": cls.CREATE_TIME, "logappendtime": cls.LOG_APPEND_TIME}
        try:
            return names[name.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown timestamp type {name!r}") from None

    @property
    def kafka_name(self) -> str:
        """The name kafka-dump-log.sh prints: CreateTime, LogAppendTime or NoTimestampType."""
        return {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[int(self)]


@dataclass(slots=True)
class ProducerRecord:
    """A record to append. ``timestamp`` is epoch milliseconds; None means "now"."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp: int | None = None


@dataclass(slots=True, frozen=True)
class Record:
    """A user record read back from the log."""

    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(slots=True, frozen=True)
class DecodedRecord:
    """Every record of a batch as kafka-dump-log.sh shows it, control records included."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    sequence: int  # -1 when the batch has no producer sequence
    is_control: bool
    crc: int | None = None  # legacy messages carry their own CRC-32
    is_valid: bool = True


@dataclass(slots=True)
class RecordColumns:
    """All user records of one batch as numpy columns.

    Keys and values are slices of ``data``: ``key_starts[i]`` / ``key_lengths[i]`` (length -1 = null).
    ``headers`` is None when no record has headers, else one tuple per record.
    """

    data: np.ndarray
    offsets: np.ndarray
    timestamps: np.ndarray
    timestamp_type: TimestampType
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray
    headers: list[tuple[Header, ...]] | None = field(default=None)

    def __len__(self) -> int:
        return int(self.offsets.shape[0])

    def record(self, i: int) -> Record:
        """Record ``i`` of the columns."""
        data = self.data
        kl, vl = int(self.key_lengths[i]), int(self.value_lengths[i])
        ks, vs = int(self.key_starts[i]), int(self.value_starts[i])
        return Record(
            int(self.offsets[i]),
            int(self.timestamps[i]),
            self.timestamp_type,
            None if kl < 0 else data[ks : ks + kl].tobytes(),
            None if vl < 0 else data[vs : vs + vl].tobytes(),
            self.headers[i] if self.headers is not None else (),
        )

    def records(self) -> list[Record]:
        """Every record of the columns: :meth:`record` for all ``i`` at once, several times faster
        (whole columns become lists in one step each, and ``Record`` is built without a Python frame)."""
        keys, values = self.keys_and_values()
        return list(
            map(
                Record,
                self.offsets.tolist(),
                self.timestamps.tolist(),
                repeat(self.timestamp_type),
                keys,
                values,
                self.headers_or_empty(),
            )
        )

    def keys_and_values(self) -> tuple[list[bytes | None], list[bytes | None]]:
        """Every key and every value as bytes (None for null), for the bulk conversions."""
        data = self.data.tobytes()  # one copy; slicing bytes is cheaper than slicing the array per record
        return (
            _slices(data, self.key_starts, self.key_lengths),
            _slices(data, self.value_starts, self.value_lengths),
        )

    def headers_or_empty(self) -> Sequence[tuple[Header, ...]]:
        """One header tuple per record (empty tuples when no record has headers)."""
        return self.headers if self.headers is not None else [()] * len(self)

    def select(self, mask: np.ndarray) -> RecordColumns:
        """The records where ``mask`` is true."""
        headers = None if self.headers is None else [h for h, m in zip(self.headers, mask, strict=True) if m]
        return RecordColumns(
            self.data,
            self.offsets[mask],
            self.timestamps[mask],
            self.timestamp_type,
            self.key_starts[mask],
            self.key_lengths[mask],
            self.value_starts[mask],
            self.value_lengths[mask],
            headers,
        )


def _slices(data: bytes, starts: np.ndarray, lengths: np.ndarray) -> list[bytes | None]:
    """``data[starts[i]:starts[i] + lengths[i]]`` for each i; None where the length is -1."""
    if (lengths < 0).all():  # no keys: the append fast path writes none
        return [None] * lengths.shape[0]
    return [
        None if n < 0 else data[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]


@dataclass(slots=True)
class RecordBounds:
    """Where each record of an uncompressed v2 batch starts (its length prefix), relative to the
    batch's records area: file position = batch position + V2_HEADER_SIZE + start. 4 bytes a record.
    ``offset_deltas`` is None when the records are at offsets base..base+n-1, as every batch written by
    a producer is."""

    starts: np.ndarray
    area_size: int
    offset_deltas: np.ndarray | None

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (for cache accounting)."""
        return self.starts.nbytes + (0 if self.offset_deltas is None else self.offset_deltas.nbytes)

    def index_of(self, base_offset: int, offset: int) -> int:
        """The record index holding ``offset`` in the batch at ``base_offset``, or -1 (compaction may
        have left gaps)."""
        delta = offset - base_offset
        if self.offset_deltas is None:
            return delta if 0 <= delta < self.starts.shape[0] else -1
        i = int(np.searchsorted(self.offset_deltas, delta))
        return i if i < self.offset_deltas.shape[0] and int(self.offset_deltas[i]) == delta else -1

    def span(self, i: int) -> tuple[int, int]:
        """(start, end) of record i, length prefix included, within the records area."""
        end = int(self.starts[i + 1]) if i + 1 < self.starts.shape[0] else self.area_size
        return int(self.starts[i]), end

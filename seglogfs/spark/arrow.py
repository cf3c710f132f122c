"""Decoded record columns -> Arrow record batches, in bulk: numpy over whole flushes, then Arrow C++.

The builder gathers the columns of many Kafka batches and builds only the columns a read asks for
(:class:`~.schema.ReadColumns`), once per flush of tens of thousands of rows:

- keys and values stay where the codec left them (slices of each batch's records buffer). At flush
  the buffers are joined into one, and each column is described as a ``binary`` array of 2n
  elements over that buffer, alternating the wanted slices and the bytes between them (record
  framing, other fields); Arrow's ``take`` of the even elements then copies each slice once, in C++.
- offsets, timestamps and the timestamp type are numpy concatenations; topic and partition are
  repeated scalars.

Timestamps: a Spark timestamp is int64 microseconds, so a record timestamp (int64 ms) outside
[:data:`MIN_SPARK_TIMESTAMP_MS`, :data:`MAX_SPARK_TIMESTAMP_MS`] (about years -290,000..294,000) has no
Spark value. As Spark's Kafka source (whose ms -> us conversion is an exact multiplication that
throws on overflow), the read fails; the error names the log, the offset and the timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglogfs.records import RecordColumns

from .schema import ReadColumns

#: flush before the joined buffers pass this many bytes (binary offsets are int32)
MAX_FLUSH_BYTES = 1 << 30
#: the most bytes one ``binary`` column can slice (its offsets are int32)
MAX_BINARY_BYTES = (1 << 31) - 1
#: the record timestamps (epoch ms) whose microseconds fit Spark's int64 timestamp
MAX_SPARK_TIMESTAMP_MS = ((1 << 63) - 1) // 1000
MIN_SPARK_TIMESTAMP_MS = -((1 << 63) // 1000)


class TimestampRangeError(ValueError):
    """A record timestamp that no Spark timestamp can show (its microseconds overflow int64)."""


def check_spark_timestamps(log: str, offsets: np.ndarray, timestamps: np.ndarray) -> None:
    """Raise TimestampRangeError naming ``log``, the offset and the value of the first timestamp
    outside what a Spark timestamp holds."""
    if timestamps.shape[0] == 0:
        return
    if timestamps.min() >= MIN_SPARK_TIMESTAMP_MS and timestamps.max() <= MAX_SPARK_TIMESTAMP_MS:
        return
    bad = int(
        np.flatnonzero((timestamps < MIN_SPARK_TIMESTAMP_MS) | (timestamps > MAX_SPARK_TIMESTAMP_MS))[0]
    )
    raise TimestampRangeError(
        f"log {log} offset {int(offsets[bad])}: timestamp {int(timestamps[bad])} ms is outside what a "
        f"Spark timestamp holds (epoch ms {MIN_SPARK_TIMESTAMP_MS}..{MAX_SPARK_TIMESTAMP_MS}); Spark's "
        "Kafka source fails on it too. Leave the timestamp column out (.schema(...) without it) to "
        "read the other columns"
    )


def binary_column(data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """``data[starts[i]:starts[i] + lengths[i]]`` for each i as a ``binary`` array (null for length -1).

    Slices must not overlap and must ascend, as keys (or values) of consecutive records do.
    """
    n = lengths.shape[0]
    nulls = lengths < 0
    if nulls.all():
        return pa.nulls(n, pa.binary())
    begin = np.where(nulls, 0, starts).astype(np.int64, copy=False)
    bounds = np.empty(2 * n + 1, dtype=np.int64)
    bounds[0 : 2 * n : 2] = begin
    bounds[1 : 2 * n : 2] = begin + np.maximum(lengths, 0)
    bounds[2 * n] = bounds[2 * n - 1]
    # A null's slice becomes an empty one where the previous slice ended: the bounds stay ascending.
    np.maximum.accumulate(bounds, out=bounds)
    framed = pa.Array.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(bounds.astype(np.int32)), data])
    picked = pc.take(framed, pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    if not nulls.any():
        return picked
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [validity, *picked.buffers()[1:]])


@dataclass
class _Collected:
    """The parts of the Kafka batches added since the last flush (only the wanted columns)."""

    buffers: list[np.ndarray] = field(default_factory=list)
    key_starts: list[np.ndarray] = field(default_factory=list)
    key_lengths: list[np.ndarray] = field(default_factory=list)
    value_starts: list[np.ndarray] = field(default_factory=list)
    value_lengths: list[np.ndarray] = field(default_factory=list)
    offsets: list[np.ndarray] = field(default_factory=list)
    timestamps: list[np.ndarray] = field(default_factory=list)
    ts_types: list[tuple[int, int]] = field(default_factory=list)  # (rows, type) per batch
    headers: list = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0


class BatchBuilder:
    """Collects the columns of many Kafka batches of one log and emits Spark-shaped RecordBatches
    holding only ``columns`` (all of Spark's Kafka columns by default)."""

    def __init__(self, topic: str, partition: int, columns: ReadColumns, log: str | None = None) -> None:
        self.topic = topic
        self.log = log or f"{topic}-{partition}"
        self.partition = partition
        self.columns = columns
        self.schema = self.columns.arrow
        wanted = set(self.columns.names)
        self._bytes = bool(wanted & {"key", "value"})
        self._wanted = wanted
        self._parts = _Collected()

    @property
    def rows(self) -> int:
        return self._parts.rows

    @property
    def full(self) -> bool:
        """True when the collected bytes call for a flush whatever the row count."""
        return self._parts.nbytes >= MAX_FLUSH_BYTES

    def fits(self, columns: RecordColumns) -> bool:
        """True when ``columns`` can join the collected bytes within Arrow's 32-bit binary offsets."""
        return not self._bytes or self._parts.nbytes + columns.data.shape[0] <= MAX_BINARY_BYTES

    def add(self, columns: RecordColumns) -> None:
        """Add the (already offset-filtered) records of one batch."""
        n = len(columns)
        if n == 0:
            return
        parts, wanted = self._parts, self._wanted
        if self._bytes:
            shift = parts.nbytes
            parts.buffers.append(columns.data)
            parts.nbytes += columns.data.shape[0]
            if "key" in wanted:
                parts.key_starts.append(columns.key_starts + shift)
                parts.key_lengths.append(columns.key_lengths)
            if "value" in wanted:
                parts.value_starts.append(columns.value_starts + shift)
                parts.value_lengths.append(columns.value_lengths)
        if "offset" in wanted:
            parts.offsets.append(columns.offsets)
        if "timestamp" in wanted:
            check_spark_timestamps(self.log, columns.offsets, columns.timestamps)
            parts.timestamps.append(columns.timestamps)
        if "timestampType" in wanted:
            parts.ts_types.append((n, int(columns.timestamp_type)))
        if "headers" in wanted:
            if columns.headers is None:
                parts.headers.extend([None] * n)
            else:
                parts.headers.extend([list(h) if h else None for h in columns.headers])
        parts.rows += n

    def flush(self) -> pa.RecordBatch | None:
        """The collected rows as one RecordBatch (None when empty); the builder starts over."""
        parts, n = self._parts, self._parts.rows
        if n == 0:
            return None
        self._parts = _Collected()
        data = pa.py_buffer(np.concatenate(parts.buffers)) if self._bytes else None
        arrays = [self._column(name, parts, n, data) for name in self.columns.names]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _column(self, name: str, parts: _Collected, n: int, data: pa.Buffer | None) -> pa.Array:
        if name == "key":
            return binary_column(data, _joined(parts.key_starts), _joined(parts.key_lengths))
        if name == "value":
            return binary_column(data, _joined(parts.value_starts), _joined(parts.value_lengths))
        if name == "topic":
            return pa.repeat(pa.scalar(self.topic, pa.string()), n)
        if name == "partition":
            return pa.repeat(pa.scalar(self.partition, pa.int32()), n)
        if name == "offset":
            return pa.array(_joined(parts.offsets))
        if name == "timestamp":
            micros = _joined(parts.timestamps) * 1000
            return pa.array(micros, type=pa.int64()).view(pa.timestamp("us", tz="UTC"))
        if name == "timestampType":
            counts, types = zip(*parts.ts_types, strict=True)
            return pa.array(np.repeat(np.array(types, dtype=np.int32), counts))
        return pa.array(parts.headers, type=self.schema.field(self.columns.names.index(name)).type)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64, copy=False)

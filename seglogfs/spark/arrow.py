"""Decoded record columns -> Arrow record batches, in bulk (numpy, then one C++ cast per column).

Keys and values stay where the codec left them (slices of each batch's records buffer). Rather
than gathering bytes in numpy, each column is first described as an Arrow ``binary_view`` array
(16-byte views pointing into those buffers, one buffer per Kafka batch) and then cast to ``binary``
by Arrow, which copies each slice once in C++.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from seglogfs.records import RecordColumns

from .schema import arrow_schema

_INLINE = 12  # binary_view: values up to 12 bytes live inside the view itself


def _heads(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The first 12 bytes at each start (zero-padded past the end of ``data``): (n, 12) uint8."""
    limit = data.shape[0] - _INLINE
    if limit < 0:
        data = np.concatenate([data, np.zeros(_INLINE, np.uint8)])
        limit = data.shape[0] - _INLINE
    # A sliding window of the buffer: window[i] is data[i:i+12], without copying.
    window = np.lib.stride_tricks.as_strided(data, shape=(limit + 1, _INLINE), strides=(1, 1))
    heads = window[np.minimum(starts, limit)]
    if starts.shape[0] == 0 or int(starts.max()) <= limit:
        return heads
    for i in np.flatnonzero(starts > limit).tolist():  # only values in the buffer's last 12 bytes
        tail = data[int(starts[i]) :]
        heads[i] = 0
        heads[i, : tail.shape[0]] = tail[:_INLINE]
    return heads


@dataclass
class _BinaryColumn:
    """One binary column gathered from many batch buffers, built at flush as binary_view -> binary."""

    heads: list[np.ndarray] = field(default_factory=list)
    starts: list[np.ndarray] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)
    buffer_ids: list[np.ndarray] = field(default_factory=list)
    all_null: bool = True

    def add(self, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, buffer_index: int) -> None:
        n = lengths.shape[0]
        null = bool((lengths < 0).all())
        self.all_null = self.all_null and null
        self.heads.append(np.zeros((n, _INLINE), np.uint8) if null else _heads(data, starts))
        self.starts.append(starts)
        self.lengths.append(lengths)
        self.buffer_ids.append(np.full(n, buffer_index, dtype=np.int32))

    def build(self, buffers: list[pa.Buffer], n: int) -> pa.Array:
        if self.all_null:
            return pa.nulls(n, pa.binary())
        lengths = np.concatenate(self.lengths)
        lens = np.maximum(lengths, 0).astype(np.int32)
        heads = np.concatenate(self.heads)
        views = np.empty((n, 4), dtype=np.int32)
        raw = views.view(np.uint8).reshape(n, 16)
        small = lens <= _INLINE
        # Inline values: the bytes themselves, zero-padded; others: 4-byte prefix, buffer, offset.
        raw[:, 4:16] = heads
        ids, starts = np.concatenate(self.buffer_ids), np.concatenate(self.starts)
        if small.any():
            raw[small, 4:16] *= np.arange(_INLINE, dtype=np.int32)[None, :] < lens[small, None]
            big = ~small
            views[big, 2] = ids[big]
            views[big, 3] = starts[big]
        else:
            views[:, 2] = ids
            views[:, 3] = starts
        views[:, 0] = lens
        nulls = lengths < 0
        arr = pa.Array.from_buffers(pa.binary_view(), n, [_validity(nulls), pa.py_buffer(views), *buffers])
        return arr.cast(pa.binary())


def _validity(null_mask: np.ndarray) -> pa.Buffer | None:
    if not null_mask.any():
        return None
    return pa.py_buffer(np.packbits(~null_mask, bitorder="little"))


class BatchBuilder:
    """Collects the columns of many Kafka batches of one log and emits Spark-shaped RecordBatches."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self._buffers: list[pa.Buffer] = []
        self._keys = _BinaryColumn()
        self._values = _BinaryColumn()
        self._offsets: list[np.ndarray] = []
        self._timestamps: list[np.ndarray] = []
        self._ts_types: list[np.ndarray] = []
        self._headers: list = []

    def add(self, columns: RecordColumns) -> None:
        """Add the (already offset-filtered) records of one batch."""
        n = len(columns)
        if n == 0:
            return
        index = len(self._buffers)
        data = columns.data
        self._buffers.append(pa.py_buffer(data))
        self._keys.add(data, columns.key_starts, columns.key_lengths, index)
        self._values.add(data, columns.value_starts, columns.value_lengths, index)
        self._offsets.append(columns.offsets)
        self._timestamps.append(columns.timestamps)
        self._ts_types.append(np.full(n, int(columns.timestamp_type), dtype=np.int32))
        if self.include_headers:
            if columns.headers is None:
                self._headers.extend([None] * n)
            else:
                self._headers.extend([list(h) if h else None for h in columns.headers])
        self.rows += n

    def flush(self) -> pa.RecordBatch | None:
        """The collected rows as one RecordBatch (None when empty); the builder starts over."""
        n = self.rows
        if n == 0:
            return None
        offsets = np.concatenate(self._offsets).astype(np.int64, copy=False)
        timestamps = np.concatenate(self._timestamps).astype(np.int64, copy=False) * 1000
        arrays = [
            self._keys.build(self._buffers, n),
            self._values.build(self._buffers, n),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(offsets),
            pa.array(timestamps, type=pa.int64()).view(pa.timestamp("us", tz="UTC")),
            pa.array(np.concatenate(self._ts_types)),
        ]
        if self.include_headers:
            arrays.append(pa.array(self._headers, type=self.schema.field("headers").type))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

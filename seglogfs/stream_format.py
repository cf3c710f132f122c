"""What a stream of a log's records looks like, a batch at a time: the ``records`` view (each value and
a newline) or the ``records.jsonl`` view (one JSON line a record, :mod:`seglogfs.jsonl`).

A :class:`StreamFormat` renders one batch's bytes and counts them;
:class:`~seglogfs.views.value_stream.ValueStream` counts every batch once (for sizes and positions)
and renders the batches it serves. Counting may be cheaper than rendering (the values view sums
lengths), never different.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from seglogfs.jsonl import columns_to_jsonl, jsonl_length
from seglogfs.records import (
    BatchHeader,
    RecordColumns,
    batch_plain_jsonl,
    batch_values,
    batch_values_size,
    decode_batch_columns,
)

_NEWLINE = 10


def _values(cols: RecordColumns) -> bytes:
    """The values of the records, each followed by a newline (a null value is an empty line); for
    legacy batches (v2 ones take ``batch_values``)."""
    n = len(cols)
    if n == 0:
        return b""
    lengths = np.maximum(cols.value_lengths, 0)
    sizes = lengths + 1
    ends = np.cumsum(sizes)
    total = int(ends[-1])
    data = np.append(cols.data, np.uint8(_NEWLINE))  # index len(data) is the newline
    index = np.repeat(cols.value_starts - (ends - sizes), sizes) + np.arange(total, dtype=np.int64)
    index[ends - 1] = data.shape[0] - 1
    return data[index].tobytes()


def _value_bytes(cols: RecordColumns) -> int:
    return int(np.maximum(cols.value_lengths, 0).sum()) + len(cols)


#: a whole batch's stream bytes (or their count) straight from its bytes, None when the batch needs
#: its columns decoded: (buf, header, path=, first_offset=)
BatchFn = Callable[..., "bytes | int | None"]


@dataclass(frozen=True, slots=True)
class StreamFormat:
    """How a batch's records become stream bytes: ``render`` them, or ``count`` what that gives.
    ``render_batch`` / ``count_batch``, when given, are tried first (the C scanner's fast paths)."""

    name: str
    render_columns: Callable[[RecordColumns], bytes]
    count_columns: Callable[[RecordColumns], int]
    render_batch: BatchFn | None = None
    count_batch: BatchFn | None = None

    @staticmethod
    def columns(
        buf: bytes | memoryview, header: BatchHeader, path: str | None, first_offset: int | None
    ) -> RecordColumns:
        """The user records of the batch in ``buf``, those below ``first_offset`` left out."""
        cols = decode_batch_columns(buf, header, path=path)
        if first_offset is not None and header.base_offset < first_offset:
            cols = cols.select(cols.offsets >= first_offset)
        return cols

    def render(
        self, buf: bytes | memoryview, header: BatchHeader, path: str | None = None,
        first_offset: int | None = None,
    ) -> bytes:
        """The stream bytes of the batch in ``buf`` (its records from ``first_offset`` on)."""
        if self.render_batch is not None:
            data = self.render_batch(buf, header, path=path, first_offset=first_offset)
            if isinstance(data, bytes):  # None: not a batch the fast path renders
                return data
        return self.render_columns(self.columns(buf, header, path, first_offset))

    def count(
        self, buf: bytes | memoryview, header: BatchHeader, path: str | None = None,
        first_offset: int | None = None,
    ) -> int:
        """``len(self.render(...))``."""
        if self.count_batch is not None:
            nbytes = self.count_batch(buf, header, path=path, first_offset=first_offset)
            if isinstance(nbytes, int):
                return nbytes
        return self.count_columns(self.columns(buf, header, path, first_offset))


#: ``records``, ``from/<n>``: every value followed by a newline
VALUES = StreamFormat("values", _values, _value_bytes, batch_values, batch_values_size)
#: ``records.jsonl``, ``from/<n>.jsonl``: one JSON object a line
JSON_LINES = StreamFormat(
    "jsonl",
    columns_to_jsonl,
    jsonl_length,
    batch_plain_jsonl,
    partial(batch_plain_jsonl, build=False),
)

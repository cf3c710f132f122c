"""Executor side: read one planned slice of one segment file into Arrow record batches.

A slice is ``[start_offset, end_offset)`` of one segment, with the byte position to begin scanning
at (found through the ``.index`` when planning). The file is opened read-only and read in chunks
with ``pread``: no lock, no mmap (a segment truncated under a mapping would fault with SIGBUS).
Only complete batches are seen (the codec stops at a torn tail), each is CRC-checked before it is
decoded, and control batches yield no rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from seglogfs.errors import CorruptRecordError
from seglogfs.records import decode_batch_columns, iter_batch_headers, validate_batch

from .arrow import BatchBuilder

log = logging.getLogger("seglogfs.spark")

CHUNK_BYTES = 8 << 20


class DataLossError(RuntimeError):
    """Records the query asked for are gone (retention) or unreadable (corruption)."""


@dataclass(frozen=True)
class SegmentSlice(InputPartition):
    """One read task: offsets ``[start_offset, end_offset)`` of the segment file ``log_path``.

    ``position`` is where scanning starts (a batch boundary at or before ``start_offset``);
    ``end_position`` bounds the bytes scanned (the file's size when planned).
    """

    log: str
    topic: str
    partition: int
    log_path: str
    base_offset: int
    position: int
    end_position: int
    start_offset: int
    end_offset: int

    @property
    def records_hint(self) -> int:
        """Upper bound of the records in the slice."""
        return self.end_offset - self.start_offset


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Raise DataLossError, or log a warning when the user chose ``failOnDataLoss=false``."""
    if fail_on_data_loss:
        raise DataLossError(
            message + ". Some data may have been lost (removed by retention, or corrupt). If you want "
            "the query to go on in that case, set the option failOnDataLoss to false."
        )
    log.warning("%s. Some data may have been lost; skipping it (failOnDataLoss=false).", message)


def _read_chunk(fd: int, position: int, size: int) -> bytes:
    parts = []
    while size > 0:
        data = os.pread(fd, size, position)
        if not data:
            break
        parts.append(data)
        position += len(data)
        size -= len(data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def iter_slice_columns(task: SegmentSlice, fail_on_data_loss: bool = True) -> Iterator:
    """The RecordColumns of every batch of the slice, filtered to its offset range."""
    path = task.log_path
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        report_data_loss(
            f"segment {path} (offsets {task.start_offset}..{task.end_offset - 1} of log {task.log}) "
            "no longer exists",
            fail_on_data_loss,
        )
        return
    try:
        position = task.position
        end = task.end_position
        chunk_size = CHUNK_BYTES
        while position < end:
            size = min(chunk_size, end - position)
            buf = _read_chunk(fd, position, size)
            if not buf:
                break
            consumed = 0
            done = False
            try:
                for header in iter_batch_headers(buf, 0, len(buf), path=path):
                    consumed = header.position + header.size
                    if header.last_offset < task.start_offset:
                        continue
                    # A legacy compressed wrapper carries its *last* offset: only v2 stops early.
                    if header.base_offset >= task.end_offset and header.magic >= 2:
                        done = True
                        break
                    try:
                        validate_batch(buf, header, path=path)
                        columns = decode_batch_columns(buf, header, path=path)
                    except CorruptRecordError as exc:
                        report_data_loss(f"corrupt batch: {exc.at(path, position)}", fail_on_data_loss)
                        continue
                    if len(columns) == 0:
                        if header.last_offset >= task.end_offset - 1:
                            done = True
                            break
                        continue
                    offsets = columns.offsets
                    if offsets[0] < task.start_offset or offsets[-1] >= task.end_offset:
                        columns = columns.select((offsets >= task.start_offset) & (offsets < task.end_offset))
                    yield columns
                    if header.last_offset >= task.end_offset - 1:
                        done = True
                        break
            except CorruptRecordError as exc:
                # An impossible size field: nothing after it in this segment can be located.
                report_data_loss(f"corrupt segment: {exc.at(path, position)}", fail_on_data_loss)
                return
            if done:
                return
            if consumed == 0:
                if size < chunk_size or position + size >= end:
                    return  # a torn tail at the end of the planned range
                chunk_size *= 2  # a batch larger than the chunk
                continue
            position += consumed
    finally:
        os.close(fd)


def read_slice(
    task: SegmentSlice | None,
    include_headers: bool = False,
    fail_on_data_loss: bool = True,
    max_rows: int = 65_536,
) -> Iterator:
    """Arrow RecordBatches (Spark's Kafka schema) of one slice; nothing for ``None``."""
    if task is None:
        return
    builder = BatchBuilder(task.topic, task.partition, include_headers)
    for columns in iter_slice_columns(task, fail_on_data_loss):
        builder.add(columns)
        if builder.rows >= max_rows:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch

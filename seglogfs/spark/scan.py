"""Executor side: read one planned slice of one segment file into Arrow record batches.

A slice is ``[start_offset, end_offset)`` of one segment, with the byte position to begin scanning
at (found through the ``.index`` when planning). The file is opened read-only and read in chunks
with ``pread``: no lock, no mmap (a segment truncated under a mapping would fault with SIGBUS).
Only complete batches are seen, each is CRC-checked before it is decoded, and control batches yield no
rows. A damaged batch is data loss (failOnDataLoss): raised, or skipped with a warning, the scan going on
with the next intact batch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.datasource import InputPartition

from seglogfs.errors import CorruptRecordError
from seglogfs.records import BatchHeader, decode_batch_columns, iter_batch_headers, validate_batch
from seglogfs.segment import Damage, LogSegment

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
        for header, buf, base in _slice_batches(fd, task, fail_on_data_loss):
            if header.last_offset < task.start_offset:
                continue
            # A legacy compressed wrapper carries its *last* offset: only v2 stops early.
            if header.base_offset >= task.end_offset and header.magic >= 2:
                return
            try:
                validate_batch(buf, header, path=path)
                columns = decode_batch_columns(buf, header, path=path)
            except CorruptRecordError as exc:
                report_data_loss(f"corrupt batch: {exc.at(path, base)}", fail_on_data_loss)
                continue
            if len(columns):
                offsets = columns.offsets
                if offsets[0] < task.start_offset or offsets[-1] >= task.end_offset:
                    columns = columns.select((offsets >= task.start_offset) & (offsets < task.end_offset))
                yield columns
            if header.last_offset >= task.end_offset - 1:
                return
    finally:
        os.close(fd)


def _slice_batches(
    fd: int, task: SegmentSlice, fail_on_data_loss: bool
) -> Iterator[tuple[BatchHeader, bytes, int]]:
    """(header, buffer, the buffer's position in the file) of every complete batch in the slice's
    bytes, the header's position relative to the buffer. The planned end is the segment's size then:
    complete batches only. So bytes before it that hold no complete batch (an impossible or damaged
    size field) hide where the next batch begins: data loss, raised, or with failOnDataLoss=false
    skipped by resynchronising on the next intact batch (the engine's careful survey)."""
    path = task.log_path
    position, end, chunk_size = task.position, task.end_position, CHUNK_BYTES
    while position < end:
        buf = _read_chunk(fd, position, min(chunk_size, end - position))
        if not buf:
            return
        consumed = 0
        try:
            for header in iter_batch_headers(buf, 0, len(buf), path=path):
                consumed = header.position + header.size
                yield header, buf, position
        except CorruptRecordError as exc:
            damage = exc.at(path, position)
        else:
            if consumed:
                position += consumed
                continue
            if position + len(buf) < end:
                chunk_size *= 2  # a batch larger than the chunk
                continue
            damage = CorruptRecordError("a batch runs past the end of the segment", path, position)
        if fail_on_data_loss:
            report_data_loss(f"corrupt segment: {damage}", fail_on_data_loss)
        yield from _resynced_batches(task, damage.position if damage.position is not None else position)
        return


def _resynced_batches(task: SegmentSlice, position: int) -> Iterator[tuple[BatchHeader, bytes, int]]:
    """:func:`_slice_batches` from a damaged ``position`` on, through the engine's resynchronising
    walk: each damaged stretch is reported (failOnDataLoss=false) and skipped."""

    def skip(damage: Damage) -> None:
        report_data_loss(
            f"corrupt segment: {damage.reason} in {task.log_path} at position {damage.position}", False
        )

    segment = LogSegment(Path(task.log_path).parent, task.base_offset, writable=False)
    try:
        for header, data in segment.iter_batches(position, task.end_position, sealed=True, on_damage=skip):
            yield header.at(0), data, header.position
    finally:
        segment.close()


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

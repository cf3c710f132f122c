"""Executor side: read one planned slice of one segment file into Arrow record batches.

A slice is ``[start_offset, end_offset)`` of one segment, with the byte position to begin scanning
at (found through the ``.index`` when planning). The segment is read through the engine
(:meth:`LogSegment.iter_batches`): opened read-only and read in chunks with ``pread``, no lock, no mmap
(a segment truncated under a mapping would fault with SIGBUS). Only complete batches are seen, each
is CRC-checked before it is decoded, and control batches yield no rows. A damaged batch is data loss
(failOnDataLoss): raised, or skipped with a warning, the scan going on with the next intact batch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from seglogfs.errors import CorruptRecordError
from seglogfs.read_committed import hidden_batches
from seglogfs.records import RecordColumns, decode_batch_columns, validate_batch
from seglogfs.segment import Damage, LogSegment
from seglogfs.transaction_index import AbortedTxn

from .arrow import BatchBuilder
from .schema import ReadColumns

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("seglogfs.spark")


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
    #: read_committed: the aborted transactions overlapping the slice (producer id, first offset, last
    #: offset, last stable offset); their batches are skipped
    aborted: tuple[tuple[int, int, int, int], ...] = ()

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


def iter_slice_columns(task: SegmentSlice, fail_on_data_loss: bool = True) -> Iterator[RecordColumns]:
    """The RecordColumns of every batch of the slice, filtered to its offset range."""
    # The segment (its size stat'ed now) before the descriptor: a file retention removes in between
    # is then "no longer exists", never an empty read.
    segment = LogSegment(Path(task.log_path).parent, task.base_offset, writable=False)
    try:
        fd = os.open(task.log_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        report_data_loss(
            f"segment {task.log_path} (offsets {task.start_offset}..{task.end_offset - 1} of log "
            f"{task.log}) no longer exists",
            fail_on_data_loss,
        )
        return
    try:
        yield from _slice_columns(segment, fd, task, fail_on_data_loss)
    except CorruptRecordError as exc:  # only failOnDataLoss=true walks without resynchronising
        report_data_loss(f"corrupt segment: {exc}", True)
    finally:
        os.close(fd)
        segment.close()


def _slice_columns(
    segment: LogSegment, fd: int, task: SegmentSlice, fail_on_data_loss: bool
) -> Iterator[RecordColumns]:
    """:func:`iter_slice_columns` over the engine's walk of the slice's bytes (read through ``fd``).

    The planned end is the segment's size then, so bytes before it that hold no complete batch (an
    impossible or damaged size field) hide where the next batch begins: data loss. failOnDataLoss=true
    lets the walk raise CorruptRecordError (the caller reports it) and CRC-checks each batch here;
    false hands the walk a callback, so the engine CRC-checks every batch, reports each damaged stretch
    and resumes at the next intact batch (its careful survey).
    """
    path = task.log_path

    def skip(damage: Damage) -> None:
        report_data_loss(f"corrupt segment: {damage.reason} in {path} at position {damage.position}", False)

    batches = segment.iter_batches(
        task.position, task.end_position, fd=fd, sealed=True, on_damage=None if fail_on_data_loss else skip
    )
    hidden = hidden_batches(AbortedTxn(*txn) for txn in task.aborted) if task.aborted else None
    for header, data in batches:
        if header.last_offset < task.start_offset or (hidden is not None and hidden(header)):
            continue
        # A legacy compressed wrapper carries its *last* offset: only v2 stops early.
        if header.base_offset >= task.end_offset and header.magic >= 2:
            return
        local = header.at(0)
        try:
            if fail_on_data_loss:
                validate_batch(data, local, path=path)
            columns = decode_batch_columns(data, local, path=path)
        except CorruptRecordError as exc:
            report_data_loss(f"corrupt batch: {exc.at(path, header.position)}", fail_on_data_loss)
            continue
        if len(columns):
            offsets = columns.offsets
            if offsets[0] < task.start_offset or offsets[-1] >= task.end_offset:
                columns = columns.select((offsets >= task.start_offset) & (offsets < task.end_offset))
            yield columns
        if header.last_offset >= task.end_offset - 1:
            return


def read_slice(
    task: SegmentSlice | None,
    columns: ReadColumns,
    fail_on_data_loss: bool = True,
    max_rows: int = 65_536,
) -> Iterator[pa.RecordBatch]:
    """Arrow RecordBatches of one slice holding ``columns``, of ``max_rows`` rows but the last;
    nothing for ``None``."""
    if task is None:
        return
    builder = BatchBuilder(task.topic, task.partition, columns, task.log)
    for decoded in iter_slice_columns(task, fail_on_data_loss):
        if not builder.fits(decoded):  # flush first: the joined bytes would pass Arrow's 2 GiB
            batch = builder.flush()
            if batch is not None:
                yield batch
            if not builder.fits(decoded):
                raise ValueError(
                    f"a batch of log {task.log} at offset {int(decoded.offsets[0])} ({task.log_path}) "
                    f"decodes to {decoded.data.shape[0]:,} bytes, over the 2 GiB a Spark binary column holds"
                )
        builder.add(decoded)
        if builder.rows >= max_rows or builder.full:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch

"""Streaming reads: the stream offsets are log offsets, ``{"<log name>": next_offset}``.

- A fresh query starts at ``startingOffsets`` (default ``latest``; ``earliest`` or JSON as for batch
  reads, or ``startingTimestamp``). A restart resumes from the checkpointed offsets exactly.
- Logs that appear later (a new directory in the data dir) start at their earliest offset.
- ``maxOffsetsPerTrigger`` caps each micro-batch, shared out across logs in proportion to their
  backlog without starving small ones (Spark's Kafka rule). ``Trigger.AvailableNow`` reads everything
  present when the query starts, in capped micro-batches, then stops.
- Offsets below a log's start offset (removed by retention) are data loss: an error, or a warning and
  a skip to the log start with ``failOnDataLoss=false``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .options import EARLIEST, LATEST, OptionError, ReadOptions, parse_offsets
from .planning import (
    log_names_by_topic,
    offset_for_timestamp,
    open_logs,
    readable_end,
    select_log_dirs,
    slices_for_range,
    snapshot_all,
    split_for_min_partitions,
)
from .scan import SegmentSlice, read_slice, report_data_loss

if TYPE_CHECKING:
    import pyarrow as pa


def rate_limit(start: dict[str, int], latest: dict[str, int], limit: int) -> dict[str, int]:
    """Spark's Kafka ``rateLimit``: share ``limit`` offsets across logs by backlog, never starving one."""
    sizes = {name: latest[name] - start.get(name, latest[name]) for name in latest}
    sizes = {name: size for name, size in sizes.items() if size > 0}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out = dict(latest)
    for name, size in sizes.items():
        begin = start[name]
        prorate = limit * (size / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[name] = min(latest[name], begin + step)
    return out


class SeglogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over every selected log of ``path``."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.opts = ReadOptions.parse(options)
        if not options.get("path"):
            raise OptionError("the seglog source needs a path: .load('<data dir or log dir>')")
        self.path = options["path"]
        self._available_now: dict[str, int] | None = None

    # ------------------------------------------------------------------ offsets

    def _bounds(self) -> dict[str, tuple[int, int]]:
        """(start offset, end offset) of every selected log, now."""
        return {
            ref.name: (ref.start_offset, ref.end_offset)
            for ref in snapshot_all(select_log_dirs(self.path, self.opts), self.opts.isolation)
        }

    def initialOffset(self) -> dict:
        dirs = select_log_dirs(self.path, self.opts)
        spec = parse_offsets(self.options, "startingoffsets", LATEST, log_names_by_topic(dirs))
        offsets = {}
        with open_logs(dirs) as logs:
            for lg in logs:
                log_end = readable_end(lg, self.opts.isolation)
                if self.opts.starting_timestamp is not None:
                    found = offset_for_timestamp(lg, self.opts.starting_timestamp, self.opts.isolation)
                    offsets[lg.name] = log_end if found is None else found
                    continue
                value = spec.for_log(lg.name)
                if value == EARLIEST:
                    value = lg.start_offset
                elif value == LATEST:
                    value = log_end
                offsets[lg.name] = value
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {name: end for name, (_, end) in self._bounds().items()}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        bounds = self._bounds()
        latest = {name: end for name, (_, end) in bounds.items()}
        if self._available_now is not None:
            # Logs created after the query started are not part of an AvailableNow run.
            latest = {
                name: min(end, self._available_now[name])
                for name, end in latest.items()
                if name in self._available_now
            }
        if start is None:
            return latest
        begin = {name: start.get(name, bounds[name][0]) for name in latest}
        # Never move backwards (a log end can only grow; a checkpoint may be ahead after data loss).
        latest = {name: max(end, begin[name]) for name, end in latest.items()}
        for name, value in start.items():
            latest.setdefault(name, value)
            begin.setdefault(name, value)
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return latest

    def reportLatestOffset(self) -> dict | None:
        return {name: end for name, (_, end) in self._bounds().items()}

    # ------------------------------------------------------------------ planning

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        tasks: list[SegmentSlice] = []
        dirs = [d for d in select_log_dirs(self.path, self.opts) if d.name in end]
        with open_logs(dirs) as logs:
            for lg in logs:
                name = lg.name
                log_start, log_end = lg.start_offset, readable_end(lg, self.opts.isolation)
                lo = start.get(name, log_start)
                hi = end[name]
                if lo >= hi:
                    continue
                if lo < log_start:
                    report_data_loss(
                        f"log {name}: offsets {lo}..{min(hi, log_start) - 1} were removed (log start is "
                        f"now {log_start})",
                        self.opts.fail_on_data_loss,
                    )
                    lo = log_start
                if hi > log_end:
                    report_data_loss(
                        f"log {name}: offsets up to {hi} were planned but the log now ends at {log_end}",
                        self.opts.fail_on_data_loss,
                    )
                    hi = log_end
                tasks.extend(slices_for_range(lg, lo, hi, self.opts.isolation))
            return list(split_for_min_partitions(logs, tasks, self.opts.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentSlice):
            return iter(())
        return read_slice(
            partition, self.opts.include_headers, self.opts.fail_on_data_loss, self.opts.max_batch_rows
        )

    def commit(self, end: dict) -> None:
        """Nothing to release: records stay in the log until its own retention removes them."""

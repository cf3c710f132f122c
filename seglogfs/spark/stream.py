"""Streaming reads: the stream offsets are log offsets, ``{"<log name>": next_offset}``.

- A fresh query starts at ``startingTimestamp``, else ``startingOffsetsByTimestamp``, else
  ``startingOffsets`` (default ``latest``; ``earliest`` or JSON as for batch reads). A restart resumes
  from the checkpointed offsets exactly. ``endingOffsets`` / ``endingOffsetsByTimestamp`` are refused
  (as Kafka: a stream has no end).
- Logs that appear later (a new directory in the data dir) start at their earliest offset; one that
  no longer starts at offset 0 (retention came first) is data loss, as Kafka's added partitions.
- ``maxOffsetsPerTrigger`` caps each micro-batch, shared out across logs in proportion to their
  backlog without starving small ones (Spark's Kafka rule). ``minOffsetsPerTrigger`` holds a trigger
  back until that many new offsets are there or ``maxTriggerDelay`` (default 15m) has passed since the
  last trigger that fired (the first trigger always fires, as Kafka's). ``Trigger.AvailableNow``
  reads everything present when the query starts, in micro-batches capped by ``maxOffsetsPerTrigger``
  and never held back, then stops.
- ``maxRecordsPerPartition`` / ``minPartitions`` split each micro-batch's tasks as for batch reads.
- Offsets below a log's start offset (removed by retention) are data loss: an error, or a warning and
  a skip to the log start with ``failOnDataLoss=false``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from seglogfs.log_files import find_log_dirs

from .options import OptionError, ReadOptions
from .planning import (
    log_names_by_topic,
    open_logs,
    parse_bounds,
    readable_end,
    select_log_dirs,
    slices_for_range,
    snapshot_all,
    split_tasks,
    start_offset,
)
from .scan import SegmentSlice, read_slice, report_data_loss
from .schema import ReadColumns

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


#: options Spark's Kafka source refuses in a streaming query (a stream has no end)
_BATCH_ONLY = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")


class SeglogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over every selected log of ``path``."""

    def __init__(self, options: dict[str, str], columns: ReadColumns | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``columns``: the Kafka-source columns to build (default: the source's schema)."""
        self.options = options
        self.opts = ReadOptions.parse(options)
        self.columns = columns or ReadColumns.full(self.opts.include_headers)
        if not options.get("path"):
            raise OptionError("the seglog source needs a path: .load('<data dir or log dir>')")
        for key in _BATCH_ONLY:
            if key.lower() in options:
                raise OptionError(f"option {key}: not valid in streaming queries (a stream has no end)")
        self.path = options["path"]
        self._available_now: dict[str, int] | None = None
        self._clock = clock  # seconds, monotonic; tests pass a fake one
        #: when the last trigger was let through (None: none yet, so the first one goes)
        self._last_trigger: float | None = None

    # ------------------------------------------------------------------ offsets

    def _bounds(self) -> dict[str, tuple[int, int]]:
        """(start offset, end offset) of every selected log, now."""
        return {
            ref.name: (ref.start_offset, ref.end_offset)
            for ref in snapshot_all(select_log_dirs(self.path, self.opts), self.opts.isolation)
        }

    def initialOffset(self) -> dict:
        dirs = select_log_dirs(self.path, self.opts, starting=True)
        bounds = parse_bounds(self.options, self.opts, log_names_by_topic(dirs), streaming=True)
        with open_logs(dirs) as logs:
            return {lg.name: start_offset(lg, self.opts, bounds) for lg in logs}

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit and its ReadMinRows carries no delay: with both options the
        # cap travels as ReadMaxRows and the minimum is applied from the options in latestOffset().
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
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
        # A log ending below ``start`` (recreated, truncated) was reported: with failOnDataLoss=false
        # the stream goes on from its new end, as Kafka's (its new records there are then read).
        on_disk = {d.name for d in find_log_dirs(self.path)}
        self._check_not_behind(start, bounds, on_disk)
        for name, value in start.items():
            # A log that is there but no longer selected (``logs`` / ``topics`` changed) keeps its
            # offset for a later query that selects it again; one that is gone (reported above) is
            # dropped, as Kafka's deleted partitions, so that its loss is reported once, not forever.
            if name in on_disk:
                latest.setdefault(name, value)
                begin.setdefault(name, value)
        # ReadAllAvailable (Trigger.Once) and AvailableNow read everything: holding back would end an
        # AvailableNow run before its target (ReadMinRows leaves that case to the source).
        waits = self._available_now is None and not isinstance(limit, ReadAllAvailable)
        if waits and self._hold_back(begin, latest):
            return dict(start)  # the same offsets: Spark starts no micro-batch
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return latest

    def _check_not_behind(self, start: dict, bounds: dict[str, tuple[int, int]], on_disk: set[str]) -> None:
        """Spark's Kafka rule: a log gone, or ending below the offsets already read (deleted and
        recreated, or truncated), is data loss: an error, or a warning with ``failOnDataLoss=false``
        (the stream then goes on from the log's new end, as Kafka's). A log still in ``on_disk`` but
        not selected is not gone."""
        for name, offset in start.items():
            if name not in bounds and name in on_disk:
                continue
            if name not in bounds:
                report_data_loss(f"log {name} is gone (the stream had read it up to offset {offset})",
                                 self.opts.fail_on_data_loss)
            elif bounds[name][1] < offset:
                report_data_loss(
                    f"log {name} ends at offset {bounds[name][1]}, below offset {offset} that the "
                    "stream had already read (deleted and recreated, or truncated); going on from "
                    f"offset {bounds[name][1]}",
                    self.opts.fail_on_data_loss,
                )

    def _check_start(self, name: str, lo: int | None, hi: int | None, log_start: int) -> None:
        """Data loss at the start of a micro-batch of log ``name`` from ``lo`` (None: a log the stream
        had not seen) to ``hi`` (None: not planned yet), the log now starting at ``log_start``."""
        if lo is None and log_start > 0:
            # Spark's Kafka rule: a partition found later is read from 0 ("Added partition starts from
            # N instead of 0")
            report_data_loss(
                f"log {name} appeared after the stream started but starts at offset {log_start}, "
                f"not 0: offsets 0..{log_start - 1} were removed before the stream read them",
                self.opts.fail_on_data_loss,
            )
        elif lo is not None and lo < log_start and (hi is None or lo < hi):
            last = log_start if hi is None else min(hi, log_start)
            report_data_loss(
                f"log {name}: offsets {lo}..{last - 1} were removed (log start is now {log_start})",
                self.opts.fail_on_data_loss,
            )

    def check_resume(self, start: dict) -> None:
        """The data-loss checks of a micro-batch from ``start`` (the offsets a checkpoint committed),
        made now on the driver: a job can report them before its query runs (from inside a query Spark
        logs them with two stack traces first)."""
        bounds = self._bounds()
        self._check_not_behind(start, bounds, {d.name for d in find_log_dirs(self.path)})
        for name, (log_start, _) in bounds.items():
            self._check_start(name, start.get(name), None, log_start)

    def _hold_back(self, begin: dict[str, int], latest: dict[str, int]) -> bool:
        """Spark's Kafka rule for ``minOffsetsPerTrigger`` / ``maxTriggerDelay``: hold this trigger
        back while fewer new offsets than the minimum are there, unless the delay has passed since the
        last trigger let through (the first trigger always goes)."""
        minimum = self.opts.min_offsets_per_trigger
        if not minimum:
            return False
        now = self._clock()
        last = self._last_trigger
        if last is None or (now - last) * 1000 >= self.opts.max_trigger_delay_ms:
            self._last_trigger = now
            return False
        if sum(max(latest[name] - begin[name], 0) for name in latest) < minimum:
            return True
        self._last_trigger = now
        return False

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
                self._check_start(name, start.get(name), hi, log_start)
                if lo > hi:  # Kafka's "offset was changed": the records in between were never read
                    report_data_loss(
                        f"log {name}: the batch starts at offset {lo}, after its end {hi} (the log was "
                        "recreated or truncated, or a first batch replayed after a restart started anew "
                        "at the latest offsets)",
                        self.opts.fail_on_data_loss,
                    )
                if lo >= hi:
                    continue
                lo = max(lo, log_start)
                if hi > log_end:
                    report_data_loss(
                        f"log {name}: offsets up to {hi} were planned but the log now ends at {log_end}",
                        self.opts.fail_on_data_loss,
                    )
                    hi = log_end
                tasks.extend(slices_for_range(lg, lo, hi, self.opts.isolation))
            return list(split_tasks(logs, tasks, self.opts))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentSlice):
            return iter(())
        return read_slice(partition, self.columns, self.opts.fail_on_data_loss, self.opts.max_batch_rows)

    def commit(self, end: dict) -> None:
        """Nothing to release: records stay in the log until its own retention removes them."""

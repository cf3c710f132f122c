"""Driver side: find the logs to read, resolve offset / timestamp bounds, cut them into read tasks.

Logs are opened through the engine, read-only (:func:`open_logs`): no lock, no file changed, index
files copied rather than mapped, so planning works while a daemon appends, rolls and trims. Bounds:

- offsets come from ``startingOffsets`` / ``endingOffsets`` (see :mod:`.options`) or from
  ``startingTimestamp`` / ``endingTimestamp``, which the engine resolves through each segment's
  ``.timeindex`` then ``.index`` (``Log.offset_for_timestamp``);
- each segment overlapping ``[start, end)`` becomes one task, whose first byte position is the
  engine's ``find_batch`` (``.index`` lookup plus a header scan), so a task reads only the bytes it
  needs;
- ``minPartitions`` splits large tasks further, at ``.index`` entries (batch boundaries), in
  proportion to their record counts (Spark's KafkaOffsetRangeCalculator rule).

Tasks carry picklable snapshots (:class:`~.scan.SegmentSlice`), never a ``Log``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from seglogfs.checkpoint import read_offset_checkpoint_or_empty
from seglogfs.errors import CorruptRecordError, TimestampNotFoundError
from seglogfs.log import Log
from seglogfs.log_files import LOG_START_OFFSET_CHECKPOINT, find_log_dirs, parse_log_dir_name
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED, Isolation
from seglogfs.segment import LogSegment
from seglogfs.transaction_index import AbortedTxn

from .options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadOptions, parse_offsets
from .scan import SegmentSlice, report_data_loss

log = logging.getLogger("seglogfs.spark")


@dataclass(frozen=True)
class SegmentRef:
    """One segment as seen when planning: offsets ``[base_offset, next_offset)``, ``size`` bytes."""

    base_offset: int
    log_path: str
    size: int
    next_offset: int


@dataclass(frozen=True)
class LogRef:
    """A picklable snapshot of one open log: its bounds and segments."""

    name: str
    topic: str
    partition: int
    dir: str
    start_offset: int
    end_offset: int
    segments: tuple[SegmentRef, ...]

    @classmethod
    def of(cls, lg: Log, isolation: Isolation = READ_UNCOMMITTED) -> LogRef:
        """``end_offset``: how far ``isolation`` lets a reader go (the LSO under read_committed)."""
        segments = lg.segments
        refs = tuple(
            SegmentRef(
                s.base_offset,
                str(s.log_path),
                s.size,
                segments[i + 1].base_offset if i + 1 < len(segments) else lg.end_offset,
            )
            for i, s in enumerate(segments)
        )
        end = readable_end(lg, isolation)
        return cls(lg.name, lg.topic, lg.partition, str(lg.dir), lg.start_offset, end, refs)


def readable_end(lg: Log, isolation: Isolation) -> int:
    """The end of what a reader with ``isolation`` sees: the log end, or under read_committed the last
    stable offset (Kafka's consumer: endOffsets and "latest" are the LSO)."""
    return lg.last_stable_offset if isolation == READ_COMMITTED else lg.end_offset


# ------------------------------------------------------------------------------------- discovery


def select_log_dirs(path: str, opts: ReadOptions) -> list[Path]:
    """The log dirs to read (the engine's :func:`find_log_dirs`), narrowed by the ``logs`` / ``topics``
    options."""
    dirs = find_log_dirs(path)
    if opts.logs is not None:
        by_name = {d.name: d for d in dirs}
        missing = [name for name in opts.logs if name not in by_name]
        if missing:
            raise OptionError(f"option logs: no log named {', '.join(missing)} under {path}")
        dirs = [by_name[name] for name in opts.logs]
    if opts.topics is not None:
        wanted = set(opts.topics)
        dirs = [d for d in dirs if parse_log_dir_name(d.name)[0] in wanted or d.name in wanted]
    return dirs


def log_names_by_topic(dirs: Sequence[Path]) -> dict[tuple[str, int], str]:
    """(topic, partition) -> log name, for offsets JSON keyed Kafka's way."""
    return {parse_log_dir_name(d.name): d.name for d in dirs}


# ------------------------------------------------------------------------------------ opening


@contextmanager
def open_logs(dirs: Sequence[Path]) -> Iterator[list[Log]]:
    """The engine's read-only ``Log`` of each dir (start offsets from the data dir's checkpoint),
    closed on exit. No lock is taken and no file changed: a daemon may own the logs."""
    checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
    logs: list[Log] = []
    try:
        for d in dirs:
            parent = Path(d).parent
            if parent not in checkpoints:
                checkpoints[parent] = read_offset_checkpoint_or_empty(
                    parent / LOG_START_OFFSET_CHECKPOINT, unreadable_is_empty=True
                )
            start = checkpoints[parent].get(parse_log_dir_name(Path(d).name), 0)
            logs.append(Log.open(d, read_only=True, log_start_offset=start))
        yield logs
    finally:
        for lg in logs:
            lg.close()


def snapshot_all(dirs: Sequence[Path], isolation: Isolation = READ_UNCOMMITTED) -> list[LogRef]:
    """Snapshots (bounds and segments) of several logs, now."""
    with open_logs(dirs) as logs:
        return [LogRef.of(lg, isolation) for lg in logs]


def offset_for_timestamp(lg: Log, timestamp_ms: int, isolation: Isolation = READ_UNCOMMITTED) -> int | None:
    """Kafka's offsetsForTimes through the engine: the first offset >= the log start whose record
    timestamp is >= ``timestamp_ms``, or None."""
    try:
        return lg.offset_for_timestamp(timestamp_ms, isolation=isolation)
    except TimestampNotFoundError:
        return None
    except CorruptRecordError as exc:
        report_data_loss(
            f"log {lg.name}: corrupt batch while looking up timestamp {timestamp_ms}: {exc}", True
        )
        raise  # report_data_loss raised already (fail_on_data_loss=True)


# ------------------------------------------------------------------------------------ bounds


def _resolve_bound(lg: Log, value: int, log_end: int) -> int:
    if value == EARLIEST:
        return lg.start_offset
    if value == LATEST:
        return log_end
    return value


def resolve_range(
    lg: Log,
    opts: ReadOptions,
    starting: OffsetSpec,
    ending: OffsetSpec,
    *,
    strategy: str = "error",
) -> tuple[int, int]:
    """``[start, end)`` of one log for a batch read, with Kafka's rules and data-loss handling."""
    log_start, log_end = lg.start_offset, readable_end(lg, opts.isolation)
    if opts.starting_timestamp is not None:
        found = offset_for_timestamp(lg, opts.starting_timestamp, opts.isolation)
        if found is not None:
            start = found
        else:
            if strategy == "latest":
                start = log_end
            else:
                raise OptionError(
                    f"startingTimestamp {opts.starting_timestamp}: log {lg.name} has no record at or after "
                    "it (set startingOffsetsByTimestampStrategy=latest to start at its end instead)"
                ) from None
    else:
        start = _resolve_bound(lg, starting.for_log(lg.name), log_end)
    if opts.ending_timestamp is not None:
        found = offset_for_timestamp(lg, opts.ending_timestamp, opts.isolation)
        end = log_end if found is None else found
    else:
        end = _resolve_bound(lg, ending.for_log(lg.name), log_end)
    if start < log_start:
        report_data_loss(
            f"log {lg.name}: starting offset {start} is before the log start offset {log_start}",
            opts.fail_on_data_loss,
        )
        start = log_start
    if end > log_end:
        log.warning(
            "log %s: ending offset %d is past the log end %d; reading to the end", lg.name, end, log_end
        )
        end = log_end
    if start > end:
        if opts.starting_timestamp is not None or opts.ending_timestamp is not None:
            return start, start  # a time window with no records in this log
        raise OptionError(f"log {lg.name}: starting offset {start} is after ending offset {end}")
    return start, end


# ------------------------------------------------------------------------------------ slicing


def slices_for_range(
    lg: Log, start: int, end: int, isolation: Isolation = READ_UNCOMMITTED
) -> list[SegmentSlice]:
    """One slice per segment overlapping ``[start, end)``, starting at the batch that holds ``start``;
    under read_committed each carries the aborted transactions overlapping it (``end``: at most the
    last stable offset, :func:`readable_end`)."""
    out = []
    segments = lg.segments
    aborted = lg.aborted_transactions(start, end) if isolation == READ_COMMITTED else []
    for i, seg in enumerate(segments):
        next_offset = segments[i + 1].base_offset if i + 1 < len(segments) else lg.end_offset
        lo, hi = max(start, seg.base_offset), min(end, next_offset)
        if lo >= hi:
            continue
        position = 0
        if lo > seg.base_offset:
            header = seg.find_batch(lo)
            if header is None:
                continue  # no batch holds offsets >= lo in this segment (an offset gap at its end)
            position = header.position
        out.append(
            SegmentSlice(
                lg.name,
                lg.topic,
                lg.partition,
                str(seg.log_path),
                seg.base_offset,
                position,
                seg.size,
                lo,
                hi,
                _overlapping(aborted, lo, hi),
            )
        )
    return out


def _overlapping(
    aborted: Sequence[AbortedTxn], start: int, end: int
) -> tuple[tuple[int, int, int, int], ...]:
    """The aborted transactions overlapping ``[start, end)`` as picklable tuples (producer id, first
    offset, last offset, last stable offset) for a read task."""
    return tuple(
        (t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
        for t in aborted
        if t.last_offset >= start and t.first_offset < end
    )


def _split(task: SegmentSlice, parts: int, seg: LogSegment) -> list[SegmentSlice]:
    """``task`` cut into up to ``parts`` pieces at .index entries (batch boundaries) of ``seg``."""
    if parts <= 1:
        return [task]
    offsets, positions = seg.offset_index.to_arrays()
    # A cut at o + 1 for an entry (o, p): the batch at p ends exactly at o.
    cuts_all = offsets + 1
    ok = (cuts_all > task.start_offset) & (cuts_all < task.end_offset)
    cuts_all, cut_pos = cuts_all[ok], positions[ok]
    span = task.end_offset - task.start_offset
    targets = task.start_offset + (np.arange(1, parts) * span) // parts
    if cuts_all.size >= parts - 1:
        slots = np.unique(np.clip(np.searchsorted(cuts_all, targets), 0, cuts_all.size - 1))
        cuts = cuts_all[slots]
        starts_pos = cut_pos[slots]
    else:
        # Too few index entries: cut at plain offsets; a boundary batch is then scanned twice.
        cuts = np.unique(targets[(targets > task.start_offset) & (targets < task.end_offset)])
        starts_pos = np.array([seg.offset_index.lookup(int(c))[1] for c in cuts], dtype=np.int64)
    pieces = []
    lo, lo_pos = task.start_offset, task.position
    for cut, pos in zip(cuts.tolist(), starts_pos.tolist(), strict=True):
        pieces.append(replace(task, position=lo_pos, start_offset=lo, end_offset=cut))
        lo, lo_pos = cut, max(pos, task.position)
    pieces.append(replace(task, position=lo_pos, start_offset=lo, end_offset=task.end_offset))
    return pieces


def split_for_min_partitions(
    logs: Sequence[Log], tasks: list[SegmentSlice], min_partitions: int | None
) -> list[SegmentSlice]:
    """Spark's Kafka rule: when fewer tasks than ``minPartitions``, split the large ones in proportion.

    ``logs`` are the open logs the tasks were planned from (their segments' indexes give the cuts).
    """
    if not min_partitions or len(tasks) >= min_partitions or not tasks:
        return tasks
    total = sum(t.records_hint for t in tasks)
    if total <= 0:
        return tasks
    segments = {(lg.name, s.base_offset): s for lg in logs for s in lg.segments}
    out = []
    for task in tasks:
        parts = max(round(task.records_hint / total * min_partitions), 1)
        out.extend(_split(task, min(parts, max(task.records_hint, 1)), segments[task.log, task.base_offset]))
    return out


# ------------------------------------------------------------------------------------ batch plan


@dataclass(frozen=True)
class BatchPlan:
    """Everything a batch read needs, computed once on the driver."""

    tasks: list[SegmentSlice]
    ranges: dict[str, tuple[int, int]]


def plan_batch(
    path: str,
    options: Mapping[str, str],
    opts: ReadOptions,
    offset_bounds: tuple[int | None, int | None] = (None, None),
) -> BatchPlan:
    """Tasks for a batch read of ``path`` with the given options.

    ``offset_bounds`` (from pushed-down ``offset`` filters) narrows every log's range to ``[lo, hi)``
    after its bounds are resolved; ``ranges`` keeps the resolved, un-narrowed ranges.
    """
    dirs = select_log_dirs(path, opts)
    names = log_names_by_topic(dirs)
    starting = parse_offsets(options, "startingoffsets", EARLIEST, names)
    ending = parse_offsets(options, "endingoffsets", LATEST, names)
    if starting.default == LATEST and not starting.per_log:
        raise OptionError("option startingOffsets: latest is not allowed for a batch query")
    if ending.default == EARLIEST and not ending.per_log:
        raise OptionError("option endingOffsets: earliest is not allowed for a batch query")
    strategy = str(options.get("startingoffsetsbytimestampstrategy", "error")).lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option startingOffsetsByTimestampStrategy={strategy!r}: expected error or latest")
    lo, hi = offset_bounds
    tasks: list[SegmentSlice] = []
    ranges: dict[str, tuple[int, int]] = {}
    with open_logs(dirs) as logs:
        for lg in logs:
            start, end = resolve_range(lg, opts, starting, ending, strategy=strategy)
            ranges[lg.name] = (start, end)
            start = start if lo is None else max(start, lo)
            end = end if hi is None else min(end, hi)
            tasks.extend(slices_for_range(lg, start, end, opts.isolation))
        return BatchPlan(split_for_min_partitions(logs, tasks, opts.min_partitions), ranges)

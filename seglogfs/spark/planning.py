"""Driver side: find the logs to read, resolve offset / timestamp bounds, cut them into read tasks.

Logs are opened through the engine, read-only (:func:`open_logs`): no lock, no file changed, index
files copied rather than mapped, so planning works while a daemon appends, rolls and trims. Bounds:

- offsets come, in Spark's Kafka order of precedence, from ``startingTimestamp`` (one time for every
  log), ``startingOffsetsByTimestamp`` (a time per log) or ``startingOffsets`` (likewise for the
  end); times are resolved by the engine through each segment's ``.timeindex`` then ``.index``
  (``Log.offset_for_timestamp``);
- each segment overlapping ``[start, end)`` becomes one task, whose first byte position is the
  engine's ``find_batch`` (``.index`` lookup plus a header scan), so a task reads only the bytes it
  needs;
- ``maxRecordsPerPartition`` cuts tasks at exact offsets so none spans more offsets than that (each
  piece starts scanning at the ``.index`` entry at or before its first offset); then
  ``minPartitions`` splits large tasks further, at ``.index`` entries (batch boundaries), in
  proportion to their record counts (the order Spark's Kafka source documents).

Tasks carry picklable snapshots (:class:`~.scan.SegmentSlice`), never a ``Log``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from seglogfs.checkpoint import read_offset_checkpoint_or_empty
from seglogfs.errors import CorruptRecordError, TimestampNotFoundError
from seglogfs.log import Log
from seglogfs.log_files import LOG_START_OFFSET_CHECKPOINT, find_log_dirs, is_log_dir, parse_log_dir_name
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED, Isolation
from seglogfs.segment import LogSegment
from seglogfs.transaction_index import AbortedTxn

from .options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    ReadOptions,
    TimestampSpec,
    parse_offsets,
    timestamp_bound,
)
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


def select_log_dirs(path: str, opts: ReadOptions, *, starting: bool = False) -> list[Path]:
    """The log dirs to read (the engine's :func:`find_log_dirs`), narrowed by the ``logs`` option and
    then by one of ``subscribe`` (``topics``), ``subscribePattern`` or ``assign``.

    ``starting`` (a batch read, or a stream's first offsets): a path that holds no log at all is an
    error unless ``failOnNoLogs=false`` (a mistyped path must not read as empty).
    """
    dirs = find_log_dirs(path)
    if starting and opts.fail_on_no_logs and not any(is_log_dir(d) for d in dirs):
        raise OptionError(
            f"path {path} holds no logs (no directory with a segment file): check the path, or set "
            "the option failOnNoLogs to false to read it as empty"
        )
    if opts.logs is not None:
        by_name = {d.name: d for d in dirs}
        missing = [name for name in opts.logs if name not in by_name]
        if missing:
            raise OptionError(f"option logs: no log named {', '.join(missing)} under {path}")
        dirs = [by_name[name] for name in opts.logs]
    if opts.topics is not None:
        wanted = set(opts.topics)
        dirs = [d for d in dirs if parse_log_dir_name(d.name)[0] in wanted or d.name in wanted]
    if opts.topic_pattern is not None:
        pattern = re.compile(opts.topic_pattern)
        dirs = [d for d in dirs if pattern.fullmatch(parse_log_dir_name(d.name)[0])]
    if opts.assign is not None:
        by_partition = {parse_log_dir_name(d.name): d for d in dirs}
        wanted_parts = [(topic, part) for topic, parts in opts.assign.items() for part in parts]
        missing = [f"{topic}-{part}" for topic, part in wanted_parts if (topic, part) not in by_partition]
        if missing:
            raise OptionError(f"option assign: no log for {', '.join(missing)} under {path}")
        dirs = [by_partition[key] for key in dict.fromkeys(wanted_parts)]
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


@dataclass(frozen=True)
class Bounds:
    """Where the options ask each log's read to start and end (timestamps win over offsets)."""

    starting: OffsetSpec
    ending: OffsetSpec
    start_times: TimestampSpec | None = None
    end_times: TimestampSpec | None = None


def parse_bounds(
    options: Mapping[str, str],
    opts: ReadOptions,
    log_names: Mapping[tuple[str, int], str],
    *,
    streaming: bool = False,
) -> Bounds:
    """The start and end options of a batch read (or the start of a stream), checked against the
    logs read; batch reads refuse a ``latest`` start and an ``earliest`` end, as Kafka does."""
    start_times = timestamp_bound(
        options, "startingTimestamp", opts.starting_timestamp, "startingOffsetsByTimestamp", log_names
    )
    if streaming:
        starting = parse_offsets(options, "startingoffsets", LATEST, log_names)
        return Bounds(starting, OffsetSpec(LATEST), start_times)
    starting = parse_offsets(options, "startingoffsets", EARLIEST, log_names)
    ending = parse_offsets(options, "endingoffsets", LATEST, log_names)
    if starting.default == LATEST and not starting.per_log and start_times is None:
        raise OptionError("option startingOffsets: latest is not allowed for a batch query")
    end_times = timestamp_bound(
        options, "endingTimestamp", opts.ending_timestamp, "endingOffsetsByTimestamp", log_names
    )
    if ending.default == EARLIEST and not ending.per_log and end_times is None:
        raise OptionError("option endingOffsets: earliest is not allowed for a batch query")
    if start_times is None:
        _refuse_in_batch(starting, "startingOffsets", LATEST, "latest (-1)")
    if end_times is None:
        _refuse_in_batch(ending, "endingOffsets", EARLIEST, "earliest (-2)")
    return Bounds(starting, ending, start_times, end_times)


def _refuse_in_batch(spec: OffsetSpec, option: str, value: int, text: str) -> None:
    """Kafka's validateBatchOptions: a log's JSON offset may not be ``value`` in a batch query."""
    for name, offset in sorted(spec.per_log.items()):
        if offset == value:
            raise OptionError(f"option {option}: {text} for log {name} is not allowed for a batch query")


def _resolve_bound(lg: Log, value: int, log_end: int) -> int:
    if value == EARLIEST:
        return lg.start_offset
    if value == LATEST:
        return log_end
    return value


def start_offset(lg: Log, opts: ReadOptions, bounds: Bounds) -> int:
    """Where a read of ``lg`` starts: the first record at or after its start time (through the time
    index), with ``startingOffsetsByTimestampStrategy`` deciding when there is none, else the
    starting offset."""
    log_end = readable_end(lg, opts.isolation)
    stamp = bounds.start_times.for_log(lg.name) if bounds.start_times else None
    if stamp is None:
        return _resolve_bound(lg, bounds.starting.for_log(lg.name), log_end)
    if stamp in (EARLIEST, LATEST):  # Kafka's ListOffsets: -2 / -1 as a time are earliest / latest
        return _resolve_bound(lg, stamp, log_end)
    found = offset_for_timestamp(lg, stamp, opts.isolation)
    if found is not None:
        return found
    if opts.timestamp_strategy == "latest":
        return log_end
    assert bounds.start_times is not None
    raise OptionError(
        f"option {bounds.start_times.option}: log {lg.name} has no record at or after timestamp {stamp} "
        "(set startingOffsetsByTimestampStrategy=latest to start at its end instead)"
    )


def end_offset(lg: Log, opts: ReadOptions, bounds: Bounds) -> int:
    """Where a batch read of ``lg`` ends: the first record at or after its end time (the log end when
    there is none, as Kafka), else the ending offset."""
    log_end = readable_end(lg, opts.isolation)
    stamp = bounds.end_times.for_log(lg.name) if bounds.end_times else None
    if stamp is None:
        return _resolve_bound(lg, bounds.ending.for_log(lg.name), log_end)
    if stamp in (EARLIEST, LATEST):
        return _resolve_bound(lg, stamp, log_end)
    found = offset_for_timestamp(lg, stamp, opts.isolation)
    return log_end if found is None else found


def resolve_range(lg: Log, opts: ReadOptions, bounds: Bounds) -> tuple[int, int]:
    """``[start, end)`` of one log for a batch read, with Kafka's rules and data-loss handling."""
    log_start, log_end = lg.start_offset, readable_end(lg, opts.isolation)
    start, end = start_offset(lg, opts, bounds), end_offset(lg, opts, bounds)
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
        if bounds.start_times is not None or bounds.end_times is not None:
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


def _split_every(task: SegmentSlice, limit: int, seg: LogSegment) -> list[SegmentSlice]:
    """``task`` cut at exact offsets into pieces of at most ``limit`` offsets; each piece starts
    scanning at the ``.index`` entry at or before its first offset (a batch straddling a cut is
    scanned by both pieces, each keeping only its own offsets)."""
    if task.records_hint <= limit:
        return [task]
    cuts = np.arange(task.start_offset + limit, task.end_offset, limit, dtype=np.int64)
    offsets, positions = seg.offset_index.to_arrays()
    slots = np.searchsorted(offsets, cuts, side="right") - 1
    starts = np.zeros(cuts.size, dtype=np.int64)
    found = slots >= 0
    starts[found] = positions[slots[found]]
    starts = np.maximum(starts, task.position)
    lows = [task.start_offset, *cuts.tolist()]
    highs = [*cuts.tolist(), task.end_offset]
    first_positions = [task.position, *starts.tolist()]
    return [
        replace(task, position=pos, start_offset=lo, end_offset=hi)
        for lo, hi, pos in zip(lows, highs, first_positions, strict=True)
    ]


def split_for_min_partitions(
    segments: Mapping[tuple[str, int], LogSegment], tasks: list[SegmentSlice], min_partitions: int | None
) -> list[SegmentSlice]:
    """Spark's Kafka rule: when fewer tasks than ``minPartitions``, split the large ones in proportion.

    ``segments``: (log name, base offset) -> the open segment each task was planned from (its index
    gives the cuts).
    """
    if not min_partitions or len(tasks) >= min_partitions or not tasks:
        return tasks
    total = sum(t.records_hint for t in tasks)
    if total <= 0:
        return tasks
    out = []
    for task in tasks:
        parts = max(round(task.records_hint / total * min_partitions), 1)
        out.extend(_split(task, min(parts, max(task.records_hint, 1)), segments[task.log, task.base_offset]))
    return out


def split_tasks(logs: Sequence[Log], tasks: list[SegmentSlice], opts: ReadOptions) -> list[SegmentSlice]:
    """``maxRecordsPerPartition`` first, then ``minPartitions`` over the result (Spark's Kafka order:
    the count is about the larger of total / maxRecordsPerPartition and minPartitions).

    ``logs`` are the open logs the tasks were planned from.
    """
    segments = {(lg.name, s.base_offset): s for lg in logs for s in lg.segments}
    limit = opts.max_records_per_partition
    if limit:
        tasks = [piece for t in tasks for piece in _split_every(t, limit, segments[t.log, t.base_offset])]
    return split_for_min_partitions(segments, tasks, opts.min_partitions)


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
    dirs = select_log_dirs(path, opts, starting=True)
    bounds = parse_bounds(options, opts, log_names_by_topic(dirs))
    lo, hi = offset_bounds
    tasks: list[SegmentSlice] = []
    ranges: dict[str, tuple[int, int]] = {}
    with open_logs(dirs) as logs:
        for lg in logs:
            start, end = resolve_range(lg, opts, bounds)
            ranges[lg.name] = (start, end)
            start = start if lo is None else max(start, lo)
            end = end if hi is None else min(end, hi)
            tasks.extend(slices_for_range(lg, start, end, opts.isolation))
        return BatchPlan(split_tasks(logs, tasks, opts), ranges)

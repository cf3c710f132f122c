"""Driver side: find the logs to read, resolve offset / timestamp bounds, cut them into read tasks.

Logs are read without the owner lock and without mmap (see :func:`snapshot`), so planning works
while a daemon appends. Bounds:

- offsets come from ``startingOffsets`` / ``endingOffsets`` (see :mod:`.options`) or from
  ``startingTimestamp`` / ``endingTimestamp``, which the engine resolves through each segment's
  ``.timeindex`` then ``.index`` (:func:`offset_for_timestamp`);
- each segment overlapping ``[start, end)`` becomes one task, whose first byte position comes from
  the segment's ``.index``, so a task reads only the bytes it needs;
- ``minPartitions`` splits large tasks further, at ``.index`` entries (batch boundaries), in
  proportion to their record counts (Spark's KafkaOffsetRangeCalculator rule).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from seglogfs.checkpoint import is_kafka_special_dir, parse_log_dir_name
from seglogfs.errors import InvalidLogNameError

from .options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadOptions, parse_offsets
from .scan import SegmentSlice, iter_slice_columns, report_data_loss

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
    """A picklable snapshot of one log: its bounds and segments."""

    name: str
    topic: str
    partition: int
    dir: str
    start_offset: int
    end_offset: int
    segments: tuple[SegmentRef, ...]


# ------------------------------------------------------------------------------------- discovery


def _is_log_dir(path: Path) -> bool:
    return any(path.glob("*.log")) or any(path.glob("*.log.deleted"))


def find_log_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """The log directories under ``path``: itself when it is a log dir, else its log subdirectories."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"seglog path {root} is not a directory")
    if _is_log_dir(root):
        return [root]
    found = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name.startswith(".") or is_kafka_special_dir(child.name):
            continue
        try:
            parse_log_dir_name(child.name)
        except InvalidLogNameError:
            continue
        found.append(child)
    return found


def select_log_dirs(path: str, opts: ReadOptions) -> list[Path]:
    """The log dirs to read, narrowed by the ``logs`` / ``topics`` options."""
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


def _log_start_checkpoint(data_dir: Path) -> dict[tuple[str, int], int]:
    from seglogfs.checkpoint import read_offset_checkpoint

    path = data_dir / "log-start-offset-checkpoint"
    try:
        return read_offset_checkpoint(path) if path.exists() else {}
    except Exception:  # a corrupt checkpoint counts as empty, as in Kafka
        return {}


def snapshot(
    log_dir: str | os.PathLike[str], start_checkpoint: Mapping[tuple[str, int], int] | None = None
) -> LogRef:
    """The bounds and segments of a log, read without a lock and without memory-mapping anything.

    The engine's read-only ``Log`` maps the active segment's indexes, which the owner may cut while
    rolling (SIGBUS in the reader), so planning reads the few bytes it needs with ``pread``.
    """
    from seglogfs.records import iter_batch_headers

    directory = Path(log_dir)
    name = directory.name
    topic, partition = parse_log_dir_name(name)
    bases = sorted(
        int(p.name[: -len(".log")])
        for p in directory.iterdir()
        if p.name.endswith(".log") and p.name[: -len(".log")].isdigit()
    )
    sizes = []
    for base in bases:
        try:
            sizes.append(os.stat(directory / f"{base:020d}.log").st_size)
        except FileNotFoundError:  # removed by retention while we looked
            sizes.append(-1)
    kept = [(b, s) for b, s in zip(bases, sizes, strict=True) if s >= 0]
    if not kept:
        return LogRef(name, topic, partition, str(directory), 0, 0, ())
    last_base, last_size = kept[-1]
    last_path = str(directory / f"{last_base:020d}.log")
    _, positions = _index_entries(SegmentRef(last_base, last_path, last_size, 0))
    position = int(positions[-1]) if positions.size else 0
    end = last_base
    with open(last_path, "rb") as f:
        f.seek(position)
        tail = f.read(max(last_size - position, 0))
    for header in iter_batch_headers(tail, 0, len(tail), path=last_path):
        end = header.next_offset
    refs = []
    for i, (base, size) in enumerate(kept):
        nxt = kept[i + 1][0] if i + 1 < len(kept) else end
        refs.append(SegmentRef(base, str(directory / f"{base:020d}.log"), size, nxt))
    start = kept[0][0]
    if start_checkpoint:
        start = max(start, start_checkpoint.get((topic, partition), 0))
    return LogRef(name, topic, partition, str(directory), min(start, end), end, tuple(refs))


def snapshot_all(dirs: Sequence[Path]) -> list[LogRef]:
    """Snapshots of several log dirs (one read of each data dir's log-start checkpoint)."""
    checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
    out = []
    for d in dirs:
        parent = d.parent
        if parent not in checkpoints:
            checkpoints[parent] = _log_start_checkpoint(parent)
        out.append(snapshot(d, checkpoints[parent]))
    return out


def log_names_by_topic(dirs: Sequence[Path]) -> dict[tuple[str, int], str]:
    """(topic, partition) -> log name, for offsets JSON keyed Kafka's way."""
    return {parse_log_dir_name(d.name): d.name for d in dirs}


# ------------------------------------------------------------------------------------ positions


def read_index_file(
    path: str | os.PathLike[str], kind: str, base_offset: int
) -> tuple[np.ndarray, np.ndarray]:
    """The entries of an ``.index`` (kind "offset": offsets, positions) or ``.timeindex`` (kind "time":
    timestamps, offsets) file, absolute offsets, without its zero-filled preallocated tail.

    The file is copied with one read rather than memory-mapped: the log's owner trims an active
    index when it rolls the segment, and a mapping over the cut pages would die with SIGBUS.
    A missing file has no entries.
    """
    from seglogfs.index import OffsetIndex, TimeIndex

    cls = OffsetIndex if kind == "offset" else TimeIndex
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raw = b""
    entries = np.frombuffer(raw, dtype=cls.DTYPE, count=len(raw) // cls.ENTRY_SIZE)
    rel = entries["rel"].astype(np.int64)
    # An active index is preallocated with zeros: entries end at the first later zero offset.
    zeros = np.flatnonzero(rel[1:] == 0)
    n = int(zeros[0]) + 1 if zeros.size else rel.size
    if kind == "offset":
        return rel[:n] + base_offset, entries["pos"][:n].astype(np.int64)
    return entries["ts"][:n].astype(np.int64), rel[:n] + base_offset


def _index_entries(seg: SegmentRef) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, positions) of the segment's .index entries that point inside its planned size."""
    offsets, positions = read_index_file(seg.log_path[: -len(".log")] + ".index", "offset", seg.base_offset)
    # Entries past the size planned (a concurrent append) are ignored: their batch may be unseen.
    keep = positions < seg.size
    return offsets[keep], positions[keep]


def _position_for(offsets: np.ndarray, positions: np.ndarray, target: int) -> int:
    """Byte position of the batch to start scanning at for ``target`` (largest entry <= target).

    An entry (o, p) pairs a batch's last offset o with its first byte p, so every record >= target
    lies at or after p.
    """
    slot = int(np.searchsorted(offsets, target, side="right")) - 1
    return int(positions[slot]) if slot >= 0 else 0


def _time_entries(seg: SegmentRef) -> tuple[np.ndarray, np.ndarray]:
    """(timestamps, offsets) of the segment's .timeindex entries."""
    return read_index_file(seg.log_path[: -len(".log")] + ".timeindex", "time", seg.base_offset)


def offset_for_timestamp(ref: LogRef, timestamp_ms: int) -> int | None:
    """Kafka's offsetsForTimes: the first offset >= log start whose record timestamp >= ``timestamp_ms``.

    Per segment: skip it when its .timeindex says its max timestamp is smaller; else look the
    timestamp up in the .timeindex, the offset in the .index, and scan batches from that byte.
    """
    for i, seg in enumerate(ref.segments):
        if seg.next_offset <= ref.start_offset or seg.size <= 0:
            continue
        stamps, toffsets = _time_entries(seg)
        last = i == len(ref.segments) - 1
        if stamps.size and stamps[-1] < timestamp_ms and not last:
            continue
        slot = int(np.searchsorted(stamps, timestamp_ms, side="right")) - 1
        from_offset = max(int(toffsets[slot]) if slot >= 0 else seg.base_offset, ref.start_offset)
        position = _position_for(*_index_entries(seg), from_offset)
        task = SegmentSlice(
            ref.name,
            ref.topic,
            ref.partition,
            seg.log_path,
            seg.base_offset,
            position,
            seg.size,
            from_offset,
            seg.next_offset,
        )
        for columns in iter_slice_columns(task):
            hits = np.flatnonzero(columns.timestamps >= timestamp_ms)
            if hits.size:
                return int(columns.offsets[hits[0]])
    return None


# ------------------------------------------------------------------------------------ bounds


def _resolve_bound(ref: LogRef, value: int) -> int:
    if value == EARLIEST:
        return ref.start_offset
    if value == LATEST:
        return ref.end_offset
    return value


def resolve_range(
    ref: LogRef,
    opts: ReadOptions,
    starting: OffsetSpec,
    ending: OffsetSpec,
    *,
    strategy: str = "error",
) -> tuple[int, int]:
    """``[start, end)`` of one log for a batch read, with Kafka's rules and data-loss handling."""
    if opts.starting_timestamp is not None:
        found = offset_for_timestamp(ref, opts.starting_timestamp)
        if found is not None:
            start = found
        else:
            if strategy == "latest":
                start = ref.end_offset
            else:
                raise OptionError(
                    f"startingTimestamp {opts.starting_timestamp}: log {ref.name} has no record at or after "
                    "it (set startingOffsetsByTimestampStrategy=latest to start at its end instead)"
                ) from None
    else:
        start = _resolve_bound(ref, starting.for_log(ref.name))
    if opts.ending_timestamp is not None:
        found = offset_for_timestamp(ref, opts.ending_timestamp)
        end = ref.end_offset if found is None else found
    else:
        end = _resolve_bound(ref, ending.for_log(ref.name))
    if start < ref.start_offset:
        report_data_loss(
            f"log {ref.name}: starting offset {start} is before the log start offset {ref.start_offset}",
            opts.fail_on_data_loss,
        )
        start = ref.start_offset
    if end > ref.end_offset:
        log.warning(
            "log %s: ending offset %d is past the log end %d; reading to the end",
            ref.name,
            end,
            ref.end_offset,
        )
        end = ref.end_offset
    if start > end:
        if opts.starting_timestamp is not None or opts.ending_timestamp is not None:
            return start, start  # a time window with no records in this log
        raise OptionError(f"log {ref.name}: starting offset {start} is after ending offset {end}")
    return start, end


# ------------------------------------------------------------------------------------ slicing


def slices_for_range(ref: LogRef, start: int, end: int) -> list[SegmentSlice]:
    """One slice per segment overlapping ``[start, end)``."""
    out = []
    for seg in ref.segments:
        lo, hi = max(start, seg.base_offset), min(end, seg.next_offset)
        if lo >= hi:
            continue
        position = 0
        if lo > seg.base_offset:
            offsets, positions = _index_entries(seg)
            position = _position_for(offsets, positions, lo)
        out.append(
            SegmentSlice(
                ref.name, ref.topic, ref.partition, seg.log_path, seg.base_offset, position, seg.size, lo, hi
            )
        )
    return out


def _split(task: SegmentSlice, parts: int) -> list[SegmentSlice]:
    """``task`` cut into up to ``parts`` pieces at .index entries (batch boundaries)."""
    if parts <= 1:
        return [task]
    seg = SegmentRef(task.base_offset, task.log_path, task.end_position, task.end_offset)
    offsets, positions = _index_entries(seg)
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
        starts_pos = np.array([_position_for(offsets, positions, int(c)) for c in cuts], dtype=np.int64)
    pieces = []
    lo, lo_pos = task.start_offset, task.position
    for cut, pos in zip(cuts.tolist(), starts_pos.tolist(), strict=True):
        pieces.append(replace(task, position=lo_pos, start_offset=lo, end_offset=cut))
        lo, lo_pos = cut, max(pos, task.position)
    pieces.append(replace(task, position=lo_pos, start_offset=lo, end_offset=task.end_offset))
    return pieces


def split_for_min_partitions(tasks: list[SegmentSlice], min_partitions: int | None) -> list[SegmentSlice]:
    """Spark's Kafka rule: when fewer tasks than ``minPartitions``, split the large ones in proportion."""
    if not min_partitions or len(tasks) >= min_partitions or not tasks:
        return tasks
    total = sum(t.records_hint for t in tasks)
    if total <= 0:
        return tasks
    out = []
    for task in tasks:
        parts = max(round(task.records_hint / total * min_partitions), 1)
        out.extend(_split(task, min(parts, max(task.records_hint, 1))))
    return out


# ------------------------------------------------------------------------------------ batch plan


@dataclass(frozen=True)
class BatchPlan:
    """Everything a batch read needs, computed once on the driver."""

    tasks: list[SegmentSlice]
    ranges: dict[str, tuple[int, int]]


def plan_batch(path: str, options: Mapping[str, str], opts: ReadOptions) -> BatchPlan:
    """Tasks for a batch read of ``path`` with the given options."""
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
    tasks: list[SegmentSlice] = []
    ranges: dict[str, tuple[int, int]] = {}
    for ref in snapshot_all(dirs):
        start, end = resolve_range(ref, opts, starting, ending, strategy=strategy)
        ranges[ref.name] = (start, end)
        tasks.extend(slices_for_range(ref, start, end))
    return BatchPlan(split_for_min_partitions(tasks, opts.min_partitions), ranges)

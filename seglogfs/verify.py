"""``seglogfs verify``: check every batch CRC and every index entry of data dirs, log dirs or segments.

A segment is sound when:

* every batch header is plausible and its CRC matches (CRC-32C for v2, CRC-32 for v0/v1), offsets
  increase from batch to batch, and no bytes trail the last complete batch; with ``decode_records``
  (the Spark ``verify`` job), every record of every CRC-valid batch also decodes;
* every ``.index`` entry (O, P) points at the start P of a batch whose lastOffset is O (Kafka's
  per-batch indexing rule, also what kafka-dump-log.sh checks), with offsets and positions increasing;
* every ``.timeindex`` entry (T, O) names the lastOffset O of a batch whose max timestamp is T, with
  timestamps increasing; in an inactive segment the last entry holds the segment's max timestamp
  (Kafka writes it on roll, and retention reads it);
* the index files exist, pass Kafka's sanity check, and are trimmed unless the segment is the active
  (last) one, which a running writer keeps preallocated;
* producer snapshots have a valid CRC-32C;
* every log dir still has its ``.log`` files.

Every finding names the file and the byte position in it. Findings are damage (records unreadable,
offsets or index entries wrong, a log without its ``.log`` files) or notes: conditions that recovery
repairs without loss, as a broker's crash or an older broker leaves them (a missing index, an untrimmed
index tail, no final time-index entry, an index left behind by a deleted segment). Reading needs no
lock: only complete batches are looked at.
"""

from __future__ import annotations

import sys
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
from crc32c import crc32c

from .dump import non_regular_kind, open_readonly
from .errors import CorruptIndexError, CorruptRecordError
from .index import OffsetIndex, TimeIndex
from .log_files import is_kafka_special_dir
from .records import decode_batch_columns, iter_batch_headers, validate_batch

__all__ = ["Problem", "Progress", "VerifyReport", "find_segments", "verify_paths", "verify_segment"]


@dataclass(frozen=True)
class Problem:
    """One defect: the file, the byte position in it (when there is one) and what is wrong."""

    path: Path
    position: int | None
    message: str
    note: bool = False  # recovery repairs it without loss: not damage

    def __str__(self) -> str:
        where = f"{self.path}: position {self.position}" if self.position is not None else str(self.path)
        return f"{where}: {'note: ' if self.note else ''}{self.message}"


@dataclass
class VerifyReport:
    """The outcome of a verification run."""

    logs: int = 0
    segments: int = 0
    batches: int = 0
    bytes: int = 0
    records: int = 0  # user records: decoded with ``decode_records``, else the batch headers' counts
    index_entries: int = 0  # .index entries in use
    time_index_entries: int = 0  # .timeindex entries in use
    problems: list[Problem] = field(default_factory=list)  # damage
    notes: list[Problem] = field(default_factory=list)  # repaired by recovery without loss

    @property
    def ok(self) -> bool:
        """No damage (notes allowed)."""
        return not self.problems

    def note(self, path: Path, position: int | None, message: str) -> None:
        """Record a condition that recovery repairs without loss."""
        self.notes.append(Problem(path, position, message, note=True))


class Progress:
    """A plain ``\\r`` progress bar over a byte total, drawn at most 10 times a second."""

    def __init__(self, total: int, stream: TextIO, width: int = 30) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.width = width
        self.done = 0
        self._last_draw = 0.0
        self._label = ""

    def start_file(self, label: str) -> None:
        self._label = label
        self._draw(force=True)

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        self._draw()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        frac = min(self.done / self.total, 1.0)
        filled = int(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        label = self._label[-40:]
        self.stream.write(
            f"\r[{bar}] {frac * 100:5.1f}% {_human(self.done)}/{_human(self.total)} {label:<40}"
        )
        self.stream.flush()

    def finish(self) -> None:
        self.done = self.total
        self._draw(force=True)
        self.stream.write("\n")
        self.stream.flush()


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _segment_logs(log_dir: Path) -> list[Path]:
    logs = [p for p in log_dir.glob("*.log") if p.is_file() and p.name.split(".")[0].isdigit()]
    return sorted(logs, key=lambda p: int(p.name.split(".")[0]))


_SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".txnindex")
_LOG_DIR_FILES = ("partition.metadata", "leader-epoch-checkpoint")


def _log_files(directory: Path) -> list[str]:
    """Names of the files in ``directory`` that only a log dir holds (segment files, per-log files)."""
    found = []
    for path in directory.iterdir():
        if path.name in _LOG_DIR_FILES or _is_segment_file_name(path.name):
            found.append(path.name)
    return sorted(found)


def _is_segment_file_name(name: str) -> bool:
    stem, dot, suffix = name.partition(".")
    return stem.isdigit() and bool(dot) and f".{suffix}" in _SEGMENT_SUFFIXES


def _not_regular(path: Path, kind: str) -> Problem:
    return Problem(path, None, f"{kind}, not a regular file: a segment's data cannot be read from it")


def _no_log_files(log_dir: Path, files: list[str]) -> Problem:
    shown = ", ".join(files[:5]) + (f", ... ({len(files)} files)" if len(files) > 5 else "")
    return Problem(log_dir, None, f"no .log files: the log's records are gone ({shown})")


def find_segments(paths: Iterable[str | Path]) -> tuple[list[list[Path]], list[Problem]]:
    """Group the ``.log`` files to check by log dir, oldest segment first.

    A path may be a data dir (its subdirectories holding segments), a log dir, or a segment file
    (``.log``, ``.index`` or ``.timeindex``: the whole segment is checked). A log dir that holds a
    log's other files but no ``.log`` is returned as a problem: its records are gone.
    """
    groups: dict[Path, set[Path]] = {}
    problems: list[Problem] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            stem = path.name.split(".")[0]
            if path.suffix in (".log", ".index", ".timeindex") and stem.isdigit():
                groups.setdefault(path.parent, set()).add(path.parent / f"{stem}.log")
            else:
                problems.append(Problem(path, None, "not a segment file (.log, .index or .timeindex)"))
        elif path.is_dir():
            # A log dir holds segment or per-log files; anything else is a data dir of log dirs.
            candidates = [path] if _log_files(path) else sorted(p for p in path.iterdir() if p.is_dir())
            for log_dir in candidates:
                logs = _segment_logs(log_dir)
                if logs:
                    groups.setdefault(log_dir, set()).update(logs)
                elif not is_kafka_special_dir(log_dir.name) and (files := _log_files(log_dir)):
                    problems.append(_no_log_files(log_dir, files))  # a "-delete" dir may be emptied
        elif (kind := non_regular_kind(path)) is not None:
            problems.append(_not_regular(path, kind))  # never opened: a FIFO would block forever
        else:
            problems.append(Problem(path, None, "no such file or directory"))
    ordered = [sorted(files, key=lambda p: int(p.name.split(".")[0])) for _, files in sorted(groups.items())]
    return ordered, problems


@dataclass
class _Batches:
    """Positions, last offsets and max timestamps of a segment's batches (compact int64 arrays)."""

    positions: array = field(default_factory=lambda: array("q"))
    last_offsets: array = field(default_factory=lambda: array("q"))
    max_timestamps: array = field(default_factory=lambda: array("q"))

    def numpy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.frombuffer(self.positions, dtype=np.int64) if self.positions else np.zeros(0, np.int64),
            np.frombuffer(self.last_offsets, dtype=np.int64) if self.last_offsets else np.zeros(0, np.int64),
            np.frombuffer(self.max_timestamps, dtype=np.int64)
            if self.max_timestamps
            else np.zeros(0, np.int64),
        )


def _scan_log(
    log_path: Path,
    base_offset: int,
    report: VerifyReport,
    progress: Progress | None,
    decode_records: bool = False,
) -> tuple[_Batches, int, int]:
    """CRC-check every batch (and decode its records with ``decode_records``); returns the batch
    table, the valid byte count and the file size."""
    batches = _Batches()
    problems = report.problems
    with open_readonly(log_path) as buf:
        size = len(buf)
        valid_end = 0
        next_offset = base_offset
        reported = 0
        try:
            for header in iter_batch_headers(buf, path=log_path):
                try:
                    validate_batch(buf, header, path=log_path)
                except CorruptRecordError as exc:
                    problems.append(Problem(log_path, header.position, f"corrupt batch: {_bare(exc)}"))
                else:
                    if header.is_control:
                        pass
                    elif not decode_records:
                        report.records += header.records_count
                    else:
                        try:
                            report.records += len(decode_batch_columns(buf, header, path=log_path))
                        except CorruptRecordError as exc:
                            problems.append(
                                Problem(log_path, header.position, f"corrupt records: {_bare(exc)}")
                            )
                if header.base_offset < next_offset:
                    problems.append(
                        Problem(
                            log_path,
                            header.position,
                            f"batch offsets {header.base_offset}..{header.last_offset} do not follow "
                            f"the previous batch (next offset {next_offset})",
                        )
                    )
                if header.last_offset < header.base_offset:
                    problems.append(
                        Problem(log_path, header.position, f"lastOffset {header.last_offset} < baseOffset")
                    )
                next_offset = max(next_offset, header.last_offset + 1)
                batches.positions.append(header.position)
                batches.last_offsets.append(header.last_offset)
                batches.max_timestamps.append(header.max_timestamp)
                valid_end = header.position + header.size
                report.batches += 1
                if progress is not None and valid_end - reported >= 1 << 20:
                    progress.advance(valid_end - reported)
                    reported = valid_end
        except CorruptRecordError as exc:
            problems.append(
                Problem(log_path, exc.position, f"corrupt batch: {_bare(exc)}; rest of file unread")
            )
            valid_end = size  # already reported: do not also call the rest "trailing bytes"
        if valid_end < size:
            problems.append(
                Problem(
                    log_path,
                    valid_end,
                    f"{size - valid_end} bytes after the last complete batch (trailing bytes of a torn "
                    "or partial write)",
                )
            )
        if progress is not None:
            progress.advance(size - reported)
        report.bytes += size
    return batches, valid_end, size


def _bare(exc: CorruptRecordError) -> str:
    """The message without its " in <path> at position <n>" suffix (the Problem says where)."""
    return str(exc).split(" in ", 1)[0] if exc.path else str(exc)


def _drop_zero_tail(index: OffsetIndex | TimeIndex, path: Path, active: bool, report: VerifyReport) -> int:
    """Limit ``index`` to its entries before a zero-filled tail, then run Kafka's sanity check.

    The active segment's index is preallocated while a writer runs, so its tail is expected; any
    other segment's index should be trimmed (a crash between a roll and the trim leaves the zeros,
    which recovery trims).
    """
    n = index.entries_before_zero_tail()
    if n < index.entries:
        if not active:
            report.note(
                path,
                n * index.ENTRY_SIZE,
                f"{index.entries - n} zero-filled entries after the last one "
                "(not trimmed; recovery trims it)",
            )
        index.limit_entries(n)
    try:
        index.sanity_check()
    except CorruptIndexError as exc:
        report.problems.append(Problem(path, None, f"fails Kafka's sanity check: {exc}"))
    return n


def _check_offset_index(path: Path, base: int, batches: _Batches, active: bool, report: VerifyReport) -> int:
    """Check the .index against the batch table; returns its entries in use."""
    problems = report.problems
    index = OffsetIndex(path, base, writable=False)
    try:
        n = _drop_zero_tail(index, path, active, report)
        offsets, positions = index.to_arrays()
    finally:
        index.close()
    if n == 0:
        return 0
    bad = np.flatnonzero((np.diff(offsets) <= 0) | (np.diff(positions) <= 0)) + 1
    for i in bad[:20]:
        problems.append(
            Problem(
                path,
                int(i) * 8,
                f"entry {i} (offset {offsets[i]}, position {positions[i]}) does not "
                f"increase on the entry before it (offset {offsets[i - 1]}, position {positions[i - 1]})",
            )
        )
    bpos, blast, _ = batches.numpy()
    if len(bpos):
        slot = np.searchsorted(bpos, positions)
        clipped = np.minimum(slot, len(bpos) - 1)
        at_start = (slot < len(bpos)) & (bpos[clipped] == positions)
        wrong = np.flatnonzero(~at_start | (blast[clipped] != offsets))
    else:
        clipped = np.zeros(n, np.int64)
        at_start = np.zeros(n, bool)
        wrong = np.arange(n)
    for i in wrong[:50]:
        pos, off = int(positions[i]), int(offsets[i])
        if not at_start[i]:
            why = "no batch starts there"
        else:
            why = f"the batch at position {pos} has lastOffset {int(blast[clipped[i]])}"
        problems.append(Problem(path, int(i) * 8, f"entry {i} (offset {off}, position {pos}): {why}"))
    if len(wrong) > 50:
        problems.append(Problem(path, None, f"... and {len(wrong) - 50} more wrong entries"))
    return n


def _check_time_index(path: Path, base: int, batches: _Batches, active: bool, report: VerifyReport) -> int:
    """Check the .timeindex against the batch table; returns its entries in use."""
    problems = report.problems
    index = TimeIndex(path, base, writable=False)
    try:
        n = _drop_zero_tail(index, path, active, report)
        stamps, offsets = index.to_arrays()
    finally:
        index.close()
    _, blast, bmax = batches.numpy()
    if n:
        bad = np.flatnonzero((np.diff(stamps) <= 0) | (np.diff(offsets) < 0)) + 1
        for i in bad[:20]:
            problems.append(
                Problem(
                    path,
                    int(i) * 12,
                    f"entry {i} (timestamp {stamps[i]}, offset {offsets[i]}) is out of "
                    f"order after (timestamp {stamps[i - 1]}, offset {offsets[i - 1]})",
                )
            )
        if len(blast):
            slot = np.searchsorted(blast, offsets)
            clipped = np.minimum(slot, len(blast) - 1)
            found = (slot < len(blast)) & (blast[clipped] == offsets)
            wrong = np.flatnonzero(~found | (bmax[clipped] != stamps))
        else:
            clipped = np.zeros(n, np.int64)
            found = np.zeros(n, bool)
            wrong = np.arange(n)
        for i in wrong[:50]:
            ts, off = int(stamps[i]), int(offsets[i])
            if not found[i]:
                why = f"no batch has lastOffset {off}"
            else:
                why = f"the batch with lastOffset {off} has max timestamp {int(bmax[clipped[i]])}"
            problems.append(Problem(path, int(i) * 12, f"entry {i} (timestamp {ts}, offset {off}): {why}"))
        if len(wrong) > 50:
            problems.append(Problem(path, None, f"... and {len(wrong) - 50} more wrong entries"))
    if not active and len(bmax):
        seg_max = int(bmax.max())
        last_ts = int(stamps[-1]) if n else -1
        if seg_max >= 0 and last_ts < seg_max:  # a larger one is a wrong entry, reported above
            report.note(
                path,
                max(n - 1, 0) * 12,
                f"last entry timestamp {last_ts} is not the segment's max timestamp {seg_max} "
                "(written on roll, retention reads it; recovery writes it again)",
            )
    return n


def verify_segment(
    log_path: Path,
    *,
    active: bool,
    report: VerifyReport,
    progress: Progress | None = None,
    decode_records: bool = False,
) -> int:
    """Check one segment (.log with its .index and .timeindex), adding problems to ``report``.

    ``active``: the log's last segment, whose indexes a running writer keeps preallocated.
    ``decode_records`` also decodes every record of every CRC-valid batch (slower; the CRC already
    covers the bytes, this catches a producer's malformed records). Returns the segment's next
    offset (last batch's lastOffset + 1, or its base when empty).
    """
    report.segments += 1
    base = int(log_path.name.split(".")[0])
    batches, _valid_end, size = _scan_log(log_path, base, report, progress, decode_records)
    next_offset = batches.last_offsets[-1] + 1 if batches.last_offsets else base
    stem = log_path.with_suffix("")
    for suffix, check in ((".index", _check_offset_index), (".timeindex", _check_time_index)):
        path = stem.with_name(stem.name + suffix)
        if non_regular_kind(path) is not None:
            continue  # reported by _check_log_dir; never opened (a FIFO would block forever)
        if not path.exists():
            if size > 0:
                report.note(path, None, "missing (recovery rebuilds it)")
            continue
        try:
            entries = check(path, base, batches, active, report)
            if suffix == ".index":
                report.index_entries += entries
            else:
                report.time_index_entries += entries
        except OSError as exc:
            report.problems.append(Problem(path, None, f"cannot read: {exc}"))
    return next_offset


def _check_log_dir(log_dir: Path, logs: list[Path], report: VerifyReport) -> None:
    """Segment-level checks of one log dir: segment files that are not regular files, orphan indexes,
    producer snapshots."""
    irregular = set()
    for entry in sorted(log_dir.iterdir()):
        if _is_segment_file_name(entry.name) and (kind := non_regular_kind(entry)) is not None:
            report.problems.append(_not_regular(entry, kind))
            irregular.add(entry)
    bases = {p.name.split(".")[0] for p in logs}
    first_base = min((int(b) for b in bases), default=0)
    for suffix in ("*.index", "*.timeindex"):
        for p in sorted(log_dir.glob(suffix)):
            stem = p.name.split(".")[0]
            if stem.isdigit() and stem not in bases and not (log_dir / f"{stem}.log").exists():
                if int(stem) < first_base:  # retention deleted the segment; a crash kept its index
                    report.note(p, None, "index without a .log, below the first segment (deleted at load)")
                else:
                    report.problems.append(
                        Problem(p, None, "index without a .log: that segment's records are gone")
                    )
    for snap in sorted(log_dir.glob("*.snapshot")):
        if snap in irregular:
            continue
        data = snap.read_bytes()
        if len(data) < 10 or int.from_bytes(data[2:6], "big") != crc32c(data[6:]):
            report.problems.append(Problem(snap, 2, "producer snapshot CRC-32C does not match"))


def verify_paths(
    paths: Sequence[str | Path], *, progress_stream: TextIO | None = None, decode_records: bool = False
) -> VerifyReport:
    """Verify data dirs, log dirs or segment files; draws a progress bar on ``progress_stream``.

    ``decode_records``: see :func:`verify_segment`.
    """
    report = VerifyReport()
    groups, problems = find_segments(paths)
    report.problems.extend(problems)
    total = sum(p.stat().st_size for group in groups for p in group if p.exists())
    progress = Progress(total, progress_stream) if progress_stream is not None else None
    for group in groups:
        report.logs += 1
        log_dir = group[0].parent
        all_logs = _segment_logs(log_dir)
        active = all_logs[-1] if all_logs else None
        prev: tuple[Path, int] | None = None
        for log_path in group:
            if progress is not None:
                progress.start_file(f"{log_dir.name}/{log_path.name}")
            if not log_path.exists():
                report.problems.append(Problem(log_path, None, "missing: the index files have no .log"))
                continue
            try:
                next_offset = verify_segment(
                    log_path,
                    active=log_path == active,
                    report=report,
                    progress=progress,
                    decode_records=decode_records,
                )
            except OSError as exc:
                report.problems.append(Problem(log_path, None, f"cannot read: {exc}"))
                continue
            base = int(log_path.name.split(".")[0])
            if prev is not None and base < prev[1]:
                report.problems.append(
                    Problem(
                        log_path,
                        0,
                        f"segment base offset {base} overlaps {prev[0].name}, which ends at "
                        f"offset {prev[1] - 1}",
                    )
                )
            prev = (log_path, next_offset)
        _check_log_dir(log_dir, group, report)
    if progress is not None:
        progress.finish()
    return report


def main(
    paths: Sequence[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr, *, strict: bool = False
) -> int:
    """Run ``seglogfs verify``: damage and notes on ``out``, progress and summary on ``err``.

    Exit 0 without damage, 1 with damage (or, when ``strict``, with notes too).
    """
    report = verify_paths(paths, progress_stream=err if err.isatty() else None)
    for finding in sorted(report.problems + report.notes, key=lambda p: (str(p.path), p.position or 0)):
        out.write(f"{finding}\n")
    out.flush()
    verdict = "OK" if report.ok else f"{len(report.problems)} problem(s)"
    if report.notes:
        verdict += f", {len(report.notes)} note(s)"
    err.write(
        f"verified {report.logs} log(s), {report.segments} segment(s), {report.batches} batch(es), "
        f"{report.bytes} bytes: {verdict}\n"
    )
    return 0 if report.ok and not (strict and report.notes) else 1

"""The verifier over files: finding the segments of the paths given, scanning each ``.log`` (every
batch CRC, offsets, trailing bytes), checking a log dir's own files, and the run over them all."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from seglogfs.errors import CorruptRecordError
from seglogfs.log_files import (
    INDEX_SUFFIX,
    LOG_DIR_FILES,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    is_kafka_special_dir,
    is_segment_file_name,
    parse_offset_file_name,
    sibling_path,
)
from seglogfs.records import BatchHeader, decode_batch_columns, iter_batch_headers, validate_batch
from seglogfs.records.types import ByteSource
from seglogfs.regular_files import non_regular_kind, open_readonly

from .indexes import check_offset_index, check_time_index
from .report import BatchTable, Problem, VerifyProgress, VerifyReport
from .transactions import TransactionCheck

#: the files a segment is checked through (a path naming any of them checks the whole segment)
_CHECKED_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def _offset(path: Path) -> int:
    """The offset a file of a segment is named by (the caller checked the name)."""
    parsed = parse_offset_file_name(path.name)
    assert parsed is not None
    return parsed[0]


def _segment_logs(log_dir: Path) -> list[Path]:
    """The ``<digits>.log`` files of ``log_dir``, oldest segment first."""
    logs = [p for p in log_dir.iterdir() if is_segment_file_name(p.name, (LOG_SUFFIX,)) and p.is_file()]
    return sorted(logs, key=_offset)


def _log_files(directory: Path) -> list[str]:
    """Names of the files in ``directory`` that only a log dir holds (segment files, per-log files)."""
    return sorted(
        p.name for p in directory.iterdir() if p.name in LOG_DIR_FILES or is_segment_file_name(p.name)
    )


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
            if is_segment_file_name(path.name, _CHECKED_SUFFIXES):
                groups.setdefault(path.parent, set()).add(path.parent / sibling_path(path, LOG_SUFFIX).name)
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
    ordered = [sorted(files, key=_offset) for _, files in sorted(groups.items())]
    return ordered, problems


# ------------------------------------------------------------------------------------ the .log


def _bare(exc: CorruptRecordError) -> str:
    """The message without its " in <path> at position <n>" suffix (the Problem says where)."""
    return str(exc).split(" in ", 1)[0] if exc.path else str(exc)


def _check_batch(
    buf: ByteSource, header: BatchHeader, log_path: Path, next_offset: int, report: VerifyReport, decode: bool
) -> bool:
    """One batch: its CRC (then its record count, or its records with ``decode``) and its offsets;
    whether the CRC matched."""
    problems = report.problems
    try:
        validate_batch(buf, header, path=log_path)
    except CorruptRecordError as exc:
        problems.append(Problem(log_path, header.position, f"corrupt batch: {_bare(exc)}"))
        crc_valid = False
    else:
        crc_valid = True
        if header.is_control:
            pass
        elif not decode:
            report.records += header.records_count
        else:
            try:
                columns = decode_batch_columns(buf, header, path=log_path)
            except CorruptRecordError as exc:
                problems.append(Problem(log_path, header.position, f"corrupt records: {_bare(exc)}"))
            else:
                report.records += len(columns)
                _check_record_offsets(columns.offsets, header, log_path, report)
    if header.magic >= 2 and header.records_count > header.last_offset - header.base_offset + 1:
        problems.append(
            Problem(
                log_path,
                header.position,
                f"{header.records_count} records cannot fit offsets "
                f"{header.base_offset}..{header.last_offset}",
            )
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
        problems.append(Problem(log_path, header.position, f"lastOffset {header.last_offset} < baseOffset"))
    return crc_valid


def _check_record_offsets(
    offsets: np.ndarray, header: BatchHeader, log_path: Path, report: VerifyReport
) -> None:
    """A v2 batch's record offsets strictly increase within [baseOffset, lastOffset]. Gaps are legal:
    compaction drops records and keeps the batch's offsets (its lastOffsetDelta too)."""
    if header.magic < 2 or offsets.shape[0] == 0:
        return
    first, last = int(offsets[0]), int(offsets[-1])
    if first < header.base_offset or last > header.last_offset or bool(np.any(np.diff(offsets) <= 0)):
        report.problems.append(
            Problem(
                log_path,
                header.position,
                f"record offsets {first}..{last} are not strictly increasing within the batch's "
                f"offsets {header.base_offset}..{header.last_offset}",
            )
        )


def _scan_log(
    log_path: Path,
    base_offset: int,
    report: VerifyReport,
    progress: VerifyProgress | None,
    decode_records: bool = False,
    transactions: TransactionCheck | None = None,
) -> tuple[BatchTable, int]:
    """CRC-check every batch (and decode its records with ``decode_records``), feeding each sound one
    to ``transactions``; returns the batch table and the file size."""
    batches = BatchTable()
    with open_readonly(log_path) as buf:
        size = len(buf)
        valid_end = reported = 0
        next_offset = base_offset
        try:
            for header in iter_batch_headers(buf, path=log_path):
                sound = _check_batch(buf, header, log_path, next_offset, report, decode_records)
                if sound and transactions is not None and header.base_offset >= next_offset:
                    transactions.batch(buf, header, log_path)
                next_offset = max(next_offset, header.last_offset + 1)
                batches.add(header)
                valid_end = header.position + header.size
                report.batches += 1
                if progress is not None and valid_end - reported >= 1 << 20:
                    progress.advance(valid_end - reported)
                    reported = valid_end
        except CorruptRecordError as exc:
            report.problems.append(
                Problem(log_path, exc.position, f"corrupt batch: {_bare(exc)}; rest of file unread")
            )
            valid_end = size  # already reported: do not also call the rest "trailing bytes"
        if valid_end < size:
            report.problems.append(
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
    return batches, size


# ------------------------------------------------------------------------------------ segments and logs


def verify_segment(
    log_path: Path,
    *,
    active: bool,
    report: VerifyReport,
    progress: VerifyProgress | None = None,
    decode_records: bool = False,
    transactions: TransactionCheck | None = None,
) -> int:
    """Check one segment (.log with its .index, .timeindex and .txnindex), adding problems to ``report``.

    ``active``: the log's last segment, whose indexes a running writer keeps preallocated.
    ``decode_records`` also decodes every record of every CRC-valid batch (slower; the CRC already
    covers the bytes, this catches a producer's malformed records). Returns the segment's next
    offset (last batch's lastOffset + 1, or its base when empty). ``transactions``: the log's
    transaction checks, fed the segment's batches (by default, checks of this segment alone).
    """
    report.segments += 1
    base = _offset(log_path)
    if transactions is None:
        transactions = TransactionCheck(log_path.parent, report, snapshots=False)
    try:
        batches, size = _scan_log(log_path, base, report, progress, decode_records, transactions)
    except OSError:
        transactions.lose_track()
        raise
    transactions.end_segment(log_path, base)
    next_offset = batches.last_offsets[-1] + 1 if batches.last_offsets else base
    for suffix, check in ((INDEX_SUFFIX, check_offset_index), (TIME_INDEX_SUFFIX, check_time_index)):
        path = log_path.parent / sibling_path(log_path, suffix).name
        if non_regular_kind(path) is not None:
            continue  # reported by _check_log_dir; never opened (a FIFO would block forever)
        if not path.exists():
            if size > 0:
                report.note(path, None, "missing (recovery rebuilds it)")
            continue
        try:
            entries = check(path, base, batches, active, report)
            if suffix == INDEX_SUFFIX:
                report.index_entries += entries
            else:
                report.time_index_entries += entries
        except OSError as exc:
            report.problems.append(Problem(path, None, f"cannot read: {exc}"))
    return next_offset


def _check_log_dir(log_dir: Path, logs: list[Path], report: VerifyReport) -> None:
    """Segment-level checks of one log dir: segment files that are not regular files, orphan indexes."""
    entries = sorted(log_dir.iterdir())
    for entry in entries:
        if is_segment_file_name(entry.name) and (kind := non_regular_kind(entry)) is not None:
            report.problems.append(_not_regular(entry, kind))
    log_names = {p.name for p in logs}
    first_base = min((_offset(p) for p in logs), default=0)
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        for p in entries:
            if not is_segment_file_name(p.name, (suffix,)):
                continue
            log_name = sibling_path(p, LOG_SUFFIX).name
            if log_name in log_names or (log_dir / log_name).exists():
                continue
            if _offset(p) < first_base:  # retention deleted the segment; a crash kept its index
                report.note(p, None, "index without a .log, below the first segment (deleted at load)")
            else:
                report.problems.append(
                    Problem(p, None, "index without a .log: that segment's records are gone")
                )


def _verify_log(
    group: list[Path], report: VerifyReport, progress: VerifyProgress | None, decode_records: bool
) -> None:
    """Check the segments ``group`` of one log dir (oldest first), then the log dir's own files."""
    report.logs += 1
    log_dir = group[0].parent
    all_logs = _segment_logs(log_dir)
    active = all_logs[-1] if all_logs else None
    prev: tuple[Path, int] | None = None
    transactions = TransactionCheck(log_dir, report, log_start=_offset(all_logs[0]) if all_logs else 0)
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
                transactions=transactions,
            )
        except OSError as exc:
            report.problems.append(Problem(log_path, None, f"cannot read: {exc}"))
            continue
        base = _offset(log_path)
        if prev is not None and base < prev[1]:
            report.problems.append(
                Problem(
                    log_path,
                    0,
                    f"segment base offset {base} overlaps {prev[0].name}, which ends at offset {prev[1] - 1}",
                )
            )
        prev = (log_path, next_offset)
    _check_log_dir(log_dir, group, report)
    transactions.finish()


def verify_paths(
    paths: Sequence[str | Path],
    *,
    progress: Callable[[int], VerifyProgress] | None = None,
    decode_records: bool = False,
) -> VerifyReport:
    """Verify data dirs, log dirs or segment files.

    ``progress``: called with the total bytes of the ``.log`` files to check, returns where progress
    goes (``seglogfs verify`` draws a bar). ``decode_records``: see :func:`verify_segment`.
    """
    report = VerifyReport()
    groups, problems = find_segments(paths)
    report.problems.extend(problems)
    sink = None
    if progress is not None:
        sink = progress(sum(p.stat().st_size for group in groups for p in group if p.exists()))
    for group in groups:
        _verify_log(group, report, sink, decode_records)
    if sink is not None:
        sink.finish()
    return report

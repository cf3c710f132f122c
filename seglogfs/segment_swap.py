"""The crash-safe replacement of segments by a cleaned one (Kafka's ``LocalLog.replaceSegments``;
docs/kafka-format.md section 6):

1. the cleaned segment is written as ``<base>.log.cleaned`` (+ ``.index``/``.timeindex``/``.txnindex``
   ``.cleaned``) and fsync'd (by the cleaner);
2. each ``.cleaned`` file is renamed ``.swap``;
3. the files of the replaced segments are renamed ``.deleted``;
4. each ``.swap`` file is renamed to its final name, and the directory is fsync'd.

The directory is fsync'd after steps 2 and 3 as well: a power loss then leaves the files as a kill
between two of the steps does (renames within a step may still reach the disk in any order).

A crash before the last rename of step 2 leaves a ``.cleaned`` file: the loader discards the clean
(pre-clean content). From then on the loader finishes the swap (post-clean content): it deletes the
segment files the ``.swap`` covers, ``.deleted`` ones included, and strips the suffix.

:func:`crash_point` marks each step for the kill -9 tests: with ``SEGLOGFS_CLEANER_CRASH_AT=<k>`` in
the environment, the process exits with status 137 (as after SIGKILL) at the k-th step it reaches.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from .durable_files import fsync_dir
from .log_files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file_name,
)
from .segment import LogSegment

__all__ = ["CRASH_AT_ENV", "cleaned_files", "crash_point", "replace_files", "txn_index_path"]

CRASH_AT_ENV = "SEGLOGFS_CLEANER_CRASH_AT"
# Called with each step's name (tests); the environment variable is checked as well.
crash_hook: Callable[[str], None] | None = None
_steps_reached = 0


def crash_point(step: str) -> None:
    """A step of the clean is done: the kill tests may end the process here."""
    global _steps_reached
    _steps_reached += 1
    if crash_hook is not None:
        crash_hook(step)
    target = os.environ.get(CRASH_AT_ENV)
    if target and _steps_reached == int(target):
        os._exit(137)


def txn_index_path(segment: LogSegment) -> Path:
    """The ``.txnindex`` beside a segment's ``.log`` (Kafka's aborted-transaction index)."""
    return segment.log_path.with_name(segment.log_path.name.replace(LOG_SUFFIX, TXN_INDEX_SUFFIX, 1))


def cleaned_files(directory: Path, base_offset: int) -> list[Path]:
    """The ``.cleaned`` files of the cleaned segment at ``base_offset`` that exist, ``.log`` first."""
    suffixes = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
    names = [segment_file_name(base_offset, suffix) + CLEANED_SUFFIX for suffix in suffixes]
    return [directory / name for name in names if (directory / name).exists()]


def replace_files(directory: Path, base_offset: int, old: Sequence[LogSegment]) -> None:
    """Steps 2 to 4 for the cleaned segment at ``base_offset`` replacing ``old`` (whose objects then
    refer to their ``.deleted`` files, readable until purged)."""
    swaps = []
    for path in cleaned_files(directory, base_offset):
        swap = path.with_name(path.name[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
        os.rename(path, swap)
        swaps.append(swap)
        crash_point(f"renamed {swap.name}")
    # Renames reach the disk in any order until the directory is fsync'd: without these two, a power
    # loss could keep a replaced .log's .deleted name and lose the .swap that stands in for it (the
    # load deletes .deleted files), or keep a final name beside a replaced segment not yet .deleted.
    fsync_dir(directory)
    for segment in old:
        for path in segment.rename_suffix(DELETED_SUFFIX):  # the .txnindex too, after the .log
            crash_point(f"renamed {path.name}")
    fsync_dir(directory)
    for swap in swaps:
        os.rename(swap, swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))
        crash_point(f"installed {swap.name}")
    fsync_dir(directory)
    crash_point("fsync'd the directory")

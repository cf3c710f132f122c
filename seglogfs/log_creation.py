"""Undoing a log's creation that failed half-way (EMFILE, ENOSPC): a log dir that is not whole must not
be found, and served, at the next start. Only what the create made is removed."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from .durable_files import fsync_dir
from .log_files import (
    LOG_DIR_FILES,
    LOG_LOCK_FILE,
    PRODUCER_SNAPSHOT_SUFFIX,
    SEGMENT_SUFFIXES,
    is_segment_file_name,
    segment_file_name,
)

log = logging.getLogger(__name__)

#: what creating a log writes in its new directory (each also as the ``.tmp`` of an atomic write)
_CREATED = (
    LOG_LOCK_FILE,
    *LOG_DIR_FILES,
    *(segment_file_name(0, suffix) for suffix in (*SEGMENT_SUFFIXES, PRODUCER_SNAPSHOT_SUFFIX)),
)


def _made_by_create(name: str) -> bool:
    stem = name.removesuffix(".tmp")
    return stem in _CREATED or is_segment_file_name(stem)


def remove_created_log_dir(directory: Path) -> None:
    """Remove ``directory``, which a create that then failed made: the regular files a create
    writes, then the directory. Anything else found in it is left, and so is the directory (logged).
    Never raises: the create's own error is the one to report."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return  # the create failed before making it
    except OSError:
        names = [*_CREATED, *(f"{name}.tmp" for name in _CREATED)]  # EMFILE: no descriptor to list with
    for name in names:
        if not _made_by_create(name):
            continue
        path = directory / name
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
    try:
        os.rmdir(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.error("could not remove %s after its creation failed: %s", directory, exc)
        return
    with contextlib.suppress(OSError):  # best effort: the name must not come back after a crash
        fsync_dir(directory.parent)

"""Files that survive a crash: the fsync of a directory (renames and creations in it) and the atomic
replace of a small file (``<name>.tmp`` written afresh, fsync'd, renamed over ``<name>``, the directory
fsync'd), as Kafka's ``Utils.atomicMoveWithFallback`` and ``CheckpointFile`` do."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["atomic_write", "create_new_file", "fsync_dir"]


def fsync_dir(path: str | Path) -> None:
    """fsync a directory so that renames and creations in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_new_file(path: str | Path) -> int:
    """A write descriptor on a new, empty regular file at ``path``, made by this call.

    A leftover at ``path`` (a crashed write's file, or a symlink planted there) is unlinked first, and
    the file is created with ``O_EXCL | O_NOFOLLOW``: a symlink is never followed, so nothing outside
    the directory is ever written. A directory in the way raises ``IsADirectoryError``.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def atomic_write(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write ``<path>.tmp``, fsync, rename over ``path``, fsync the dir."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = create_new_file(tmp)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)

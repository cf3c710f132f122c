"""Opening a data dir's files for inspection (``seglogfs dump``, the verifier): regular files only,
read-only, never blocking.

A segment file that is a directory, FIFO, socket or device is never read: opening a FIFO would block
the reader forever, so such a file is found by ``stat`` alone and reported.
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "FileBuffer",
    "NotRegularFileError",
    "non_regular_kind",
    "open_readonly",
    "require_regular_file",
]

#: a whole file as :func:`open_readonly` hands it out
FileBuffer = bytes | mmap.mmap

_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


class NotRegularFileError(OSError):
    """A segment file that is a directory, FIFO, socket or device: it is never read (opening a FIFO
    would block the reader forever)."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path = Path(path)
        self.kind = kind


def non_regular_kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is ("a FIFO", "a directory"...) when it exists but is not a regular file, else
    None (also when it does not exist: opening it then says so). Nothing is opened, only stat'ed."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return None
    return _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")


def require_regular_file(path: str | os.PathLike[str]) -> None:
    """``NotRegularFileError`` when ``path`` exists but is not a regular file."""
    kind = non_regular_kind(path)
    if kind is not None:
        raise NotRegularFileError(path, kind)


@contextmanager
def open_readonly(path: str | os.PathLike[str]) -> Iterator[FileBuffer]:
    """The whole file as a read-only buffer (mmap; ``b""`` for an empty file, which mmap refuses).

    Only a regular file is read: anything else is ``NotRegularFileError`` (the open never blocks).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(path, _FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file"))
        size = info.st_size
        if size == 0:
            yield b""
            return
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            mm.close()

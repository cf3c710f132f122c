"""The files of one log directory as a reader outside the engine sees them (the mount's ``segments/``).

A log dir may hold anything an operator or a crash left there: symlinks, FIFOs, subdirectories, hidden
files. :class:`LogDirFiles` shows its regular, non-hidden files only, never follows a symlink, and says
which of them can never change again (the files of sealed segments), so an adapter lists, stats and
opens them without knowing a single on-disk name.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from seglogfs.log import Log
from seglogfs.log_files import sealed_segment_file


class LogDirFiles:
    """The regular files of ``log``'s directory; FileNotFoundError for anything else."""

    __slots__ = ("log",)

    def __init__(self, log: Log) -> None:
        self.log = log

    def _path(self, name: str) -> Path:
        return Path(self.log.dir) / name

    def path(self, name: str) -> str:
        """Where ``name`` lies on disk (to tell whether the file an fd reads still holds that name)."""
        return str(self._path(name))

    def names(self) -> list[str]:
        """The regular, non-hidden files of the log dir, sorted (symlinks and other types left out)."""
        with os.scandir(self.log.dir) as it:
            names = sorted(e.name for e in it if e.is_file(follow_symlinks=False))
        return [name for name in names if not name.startswith(".")]

    def stat(self, name: str) -> os.stat_result:
        """lstat of ``name``: regular files only, a symlink is never followed (FileNotFoundError)."""
        st = os.lstat(self._path(name))
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(errno.ENOENT, "not a regular file", str(self._path(name)))
        return st

    def open(self, name: str) -> int:
        """A read-only fd on ``name``, a regular file, whatever replaced it since :meth:`stat`:
        O_NOFOLLOW refuses a symlink, O_NONBLOCK keeps a FIFO from blocking, fstat checks the rest.
        FileNotFoundError for anything that is not a regular file."""
        path = self._path(name)
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(path, flags)
        except NotADirectoryError:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path)) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FileNotFoundError(errno.ENOENT, "a symlink", str(path)) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise FileNotFoundError(errno.ENOENT, "not a regular file", str(path))
        return fd

    def is_sealed(self, name: str) -> bool:
        """True for the files of a segment older than the active one (they never change again)."""
        segments = self.log.segments  # a read-only log dir without a segment has no active one
        return bool(segments) and sealed_segment_file(name, segments[-1].base_offset)

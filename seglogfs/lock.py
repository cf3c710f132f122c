"""The owner lock of a log directory: one writer per log, across processes and within one process.

The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<log dir>/.seglogfs.lock``, held for the life of
the writer. flock locks belong to the open file description, so a second ``open`` of the same file in
the same process conflicts just like another process does, and the kernel drops the lock when the
holder dies (even by SIGKILL), so a crash never leaves a stale lock behind. The file holds the holder's
pid for the error message only; it is never deleted (unlinking a lock file lets two processes each lock
a different inode). Kafka ignores unknown files in partition directories, and the leading dot keeps it
out of the way of ``*.log`` globs.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from seglogfs.errors import LogLockedError

__all__ = ["LOCK_FILE", "LogLock", "read_lock_holder"]

LOCK_FILE = ".seglogfs.lock"


def read_lock_holder(log_dir: str | Path) -> int | None:
    """The pid recorded in the lock file of ``log_dir`` (None if absent or unreadable).

    The pid of the last holder stays in the file after release; only a failed ``acquire`` proves
    that it is still held.
    """
    try:
        text = (Path(log_dir) / LOCK_FILE).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class LogLock:
    """Exclusive, non-blocking owner lock of one log directory (usable as a context manager)."""

    def __init__(self, log_dir: str | Path):
        self.dir = Path(log_dir)
        self.path = self.dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def locked(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> LogLock:
        """Take the lock or raise ``LogLockedError`` naming the directory and the holder's pid.

        Acquiring a lock this object already holds does nothing.
        """
        if self._fd is not None:
            return self
        # No O_TRUNC: truncating before we hold the lock would wipe the holder's pid.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = read_lock_holder(self.dir)
            who = f"pid {holder}" if holder is not None else "another process"
            error = LogLockedError(f"log dir {self.dir} is locked for writing by {who} ({self.path})")
            error.path = str(self.dir)  # type: ignore[attr-defined]
            error.pid = holder  # type: ignore[attr-defined]
            raise error from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            os.close(fd)  # also releases the flock
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (a no-op when not held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file description releases the flock

    def __enter__(self) -> LogLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"LogLock({str(self.dir)!r}, locked={self.locked})"

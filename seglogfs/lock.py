"""Owner locks: one writer per log directory and per data dir, across processes and within one process.

A log's lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<log dir>/.seglogfs.lock``, held for the life of
the writer; a data dir's is the same on ``<data dir>/.lock``, the file a Kafka broker locks in each of
its ``log.dirs``, so no two seglogfs writers share a data dir. (A broker locks with ``fcntl`` record
locks, which Linux keeps apart from ``flock``: this does not keep a broker out.)

flock locks belong to the open file description, so a second ``open`` of the same file in the same
process conflicts just like another process does, and the kernel drops the lock when the holder dies
(even by SIGKILL), so a crash never leaves a stale lock behind. The file holds the holder's pid for the
error message only; it is never deleted (unlinking a lock file lets two processes each lock a different
inode). Kafka ignores unknown files in partition directories, and the leading dot keeps it out of the
way of ``*.log`` globs. The lock file is opened with ``O_NOFOLLOW``: a symlink planted in its place is
refused, never followed and truncated.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from seglogfs.errors import LogLockedError
from seglogfs.log_files import DATA_DIR_LOCK_FILE, LOG_LOCK_FILE

__all__ = ["LogLock", "data_dir_lock", "read_lock_holder"]



def read_lock_holder(log_dir: str | Path, file_name: str = LOG_LOCK_FILE) -> int | None:
    """The pid recorded in the lock file of ``log_dir`` (None if absent or unreadable).

    The pid of the last holder stays in the file after release; only a failed ``acquire`` proves
    that it is still held.
    """
    try:
        text = (Path(log_dir) / file_name).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class LogLock:
    """Exclusive, non-blocking owner lock of one directory (usable as a context manager).

    ``file_name`` and ``what`` (how the error names the directory) default to a log directory's;
    :func:`data_dir_lock` makes a data dir's.
    """

    def __init__(self, log_dir: str | Path, file_name: str = LOG_LOCK_FILE, what: str = "log dir"):
        self.dir = Path(log_dir)
        self.file_name = file_name
        self.what = what
        self.path = self.dir / file_name
        self._fd: int | None = None

    @property
    def locked(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> LogLock:
        """Take the lock or raise ``LogLockedError`` naming the directory and the holder's pid.

        A log dir's lock is also refused while the data dir holding it is locked (a daemon owns the
        data dir and all its logs, keeping no descriptor per log: see :meth:`probe`). Acquiring a
        lock this object already holds does nothing.
        """
        if self._fd is not None:
            return self
        self._acquire()
        if self.file_name == LOG_LOCK_FILE:
            try:
                _refuse_if_held(data_dir_lock(self.dir.parent), f"{self.what} {self.dir} is in a data dir")
            except BaseException:
                self.release()
                raise
        return self

    def probe(self) -> None:
        """Take the lock and let it go at once: ``LogLockedError`` when another writer holds it.

        For a log whose data dir lock the caller holds: that lock keeps every other writer out
        (their :meth:`acquire` checks it), so the log needs no descriptor of its own, and this
        probe refuses a log some writer took before the data dir was locked.
        """
        self._acquire(record_pid=False)
        self.release()

    def _acquire(self, *, record_pid: bool = True) -> None:
        # No O_TRUNC: truncating before we hold the lock would wipe the holder's pid.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise _locked_error(self, f"{self.what} {self.dir} is") from None
        try:
            if record_pid:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            os.close(fd)  # also releases the flock
            raise
        self._fd = fd

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
        return f"LogLock({str(self.path)!r}, locked={self.locked})"


def _refuse_if_held(lock: LogLock, what: str) -> None:
    """LogLockedError when ``lock`` (whose file exists) is held by another open file; the probe
    writes nothing to the file."""
    try:
        fd = os.open(lock.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        # Shared: writers of several logs of one data dir probe it at once without refusing each
        # other; only the exclusive lock of its owner refuses them.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        raise _locked_error(lock, what) from None
    finally:
        os.close(fd)  # also drops the probe's flock


def data_dir_lock(data_dir: str | Path) -> LogLock:
    """The (not yet acquired) owner lock of a data dir: ``<data dir>/.lock``."""
    return LogLock(data_dir, DATA_DIR_LOCK_FILE, "data dir")


def _locked_error(lock: LogLock, subject: str) -> LogLockedError:
    """LogLockedError: ``subject`` "locked for writing by" the holder's pid, naming the lock file;
    ``path`` and ``pid`` attributes for callers that report them."""
    holder = read_lock_holder(lock.dir, lock.file_name)
    who = f"pid {holder}" if holder is not None else "another process"
    error = LogLockedError(f"{subject} locked for writing by {who} ({lock.path})")
    error.path = str(lock.dir)
    error.pid = holder
    return error

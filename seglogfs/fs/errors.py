"""Exceptions -> errnos, in one place.

Every FUSE operation runs inside :func:`fuse_errors`; a handler never lets an exception reach libfuse,
so a bug shows up as EIO plus a logged traceback, never as a crashed or hung daemon.
"""

from __future__ import annotations

import errno
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from mfusepy import FuseOSError

from seglogfs.errors import (
    ConfigError,
    CorruptIndexError,
    CorruptRecordError,
    InvalidLogNameError,
    InvalidRecordError,
    LogLockedError,
    LogOfflineError,
    OffsetOutOfRangeError,
    ReadOnlyLogError,
    RecordTooLargeError,
    TimestampNotFoundError,
)

log = logging.getLogger("seglogfs.fs")

#: engine exception -> errno; the first matching class wins (order matters for subclasses)
ERRNO_OF: tuple[tuple[type[BaseException], int], ...] = (
    (OffsetOutOfRangeError, errno.ENOENT),
    (TimestampNotFoundError, errno.ENOENT),
    (RecordTooLargeError, errno.EFBIG),
    (ReadOnlyLogError, errno.EROFS),
    (InvalidRecordError, errno.EINVAL),
    (InvalidLogNameError, errno.EINVAL),
    (ConfigError, errno.EINVAL),
    # a batch that fails its CRC or an index that cannot be trusted: the data is there but unreadable
    (CorruptRecordError, errno.EIO),
    (CorruptIndexError, errno.EIO),
    # its files vanished under the daemon: logged once, when the log went offline
    (LogOfflineError, errno.EIO),
    (LogLockedError, errno.EBUSY),
)

_reported: set[tuple[str | None, int | None]] = set()
_reported_lock = threading.Lock()


def _report_corruption(exc: CorruptRecordError, op: str, path: str) -> None:
    """Log each corrupt (file, position) once, however often readers hit it."""
    key = (exc.path, exc.position)
    with _reported_lock:
        if key in _reported:
            return
        _reported.add(key)
    log.error("corrupt data behind %s (%s): %s", path, op, exc)


def errno_for(exc: BaseException, op: str = "?", path: str = "?") -> int:
    """The errno a FUSE operation returns for ``exc`` (logging the ones an operator must see)."""
    if isinstance(exc, OSError) and isinstance(exc.errno, int) and exc.errno > 0:
        return exc.errno  # FuseOSError and real I/O errors such as ENOSPC pass through
    for cls, code in ERRNO_OF:
        if isinstance(exc, cls):
            if isinstance(exc, CorruptRecordError):
                _report_corruption(exc, op, path)
            elif code == errno.EIO and not isinstance(exc, LogOfflineError):
                log.error("%s %s: %s", op, path, exc)
            return code
    log.exception("unexpected error in %s %s; returning EIO", op, path)
    return errno.EIO


F = TypeVar("F", bound=Callable[..., Any])


def fuse_errors(func: F) -> F:
    """Decorate a FUSE operation: any exception becomes a :class:`FuseOSError` with its errno."""

    @functools.wraps(func)
    def wrapper(self: Any, path: str, *args: Any) -> Any:  # no **kwargs: libfuse passes positions
        try:
            return func(self, path, *args)
        except FuseOSError:
            raise
        except Exception as exc:
            raise FuseOSError(errno_for(exc, func.__name__, path)) from exc

    return wrapper  # type: ignore[return-value]


def fail(code: int) -> FuseOSError:
    """``raise fail(errno.EROFS)``: shorthand used by the operations."""
    return FuseOSError(code)

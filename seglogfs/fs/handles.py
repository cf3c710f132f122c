"""Open files of the mount: what one FUSE file handle reads (or writes) until its release.

The kernel checks the open mode before it sends READ or WRITE, so a handle only ever gets the calls
its file was opened for; the defaults answer EBADF all the same. The append files' handles, which
write, are in :mod:`seglogfs.fs.appender`.
"""

from __future__ import annotations

import errno
import os

from seglogfs.fs.errors import fail
from seglogfs.views.value_stream import StreamReader


class OpenFile:
    """One open file: the base answers EBADF to reads and writes, and has nothing to sync or close."""

    __slots__ = ()

    def read(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset``."""
        raise fail(errno.EBADF)

    def write(self, data: bytes) -> None:
        """Take the bytes of one WRITE request (the offset is never used: every write is an append)."""
        raise fail(errno.EBADF)

    def fsync(self) -> None:
        """Make what was written durable."""

    @property
    def checks_at_close(self) -> bool:
        """Whether each close() of the file should reach :meth:`flush` (FLUSH costs close() a round
        trip, so files that have nothing to say at close open with noflush)."""
        return False

    def flush(self) -> None:
        """A close() of the file or of one of its dups: raise what that close() should report."""

    def release(self, why: str) -> None:
        """The last close of the file (``why``: "release"), or the mount going away ("unmount")."""


class SnapshotFile(OpenFile):
    """A value fixed at open: a ``by-offset/<n>`` record value, or an ``info`` snapshot."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, size: int, offset: int) -> bytes:
        return self.data[offset : offset + size]


class DescriptorFile(OpenFile):
    """A ``segments/<file>``: reads go straight to the fd opened on the log dir's file at ``path``.

    The kernel keeps one page cache per path, and the log cleaner swaps a cleaned file in under the
    same name. Once another file holds the path, bytes read through this fd would land in that cache
    beside the new file's pages (a later reader would get a mix no file holds): such reads fail
    with ESTALE. A file that left the path without a successor (retention) goes on being read."""

    __slots__ = ("fd", "identity", "path")

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)

    def read(self, size: int, offset: int) -> bytes:
        data = os.pread(self.fd, size, offset)
        try:
            st = os.lstat(self.path)  # after the read: a swap during it is seen
        except FileNotFoundError:
            return data
        if (st.st_dev, st.st_ino) != self.identity:
            raise fail(errno.ESTALE)
        return data

    def release(self, why: str) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class StreamFile(OpenFile):
    """The ``records`` view: one reader of the log's :class:`ValueStream`."""

    __slots__ = ("stream",)

    def __init__(self, stream: StreamReader) -> None:
        self.stream = stream

    def read(self, size: int, offset: int) -> bytes:
        return self.stream.read(offset, size)

    def release(self, why: str) -> None:
        self.stream.close()

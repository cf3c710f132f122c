"""The mfusepy ``Operations`` of a seglogfs mount: a thin, generic shell over the kinds of paths.

Paths are parsed in :mod:`seglogfs.fs.paths`; each kind of path behaves as its class in
:mod:`seglogfs.fs.files` says (open files: :mod:`seglogfs.fs.handles`, :mod:`seglogfs.fs.appender`);
exceptions become errnos in :mod:`seglogfs.fs.errors`. This module dispatches each call on the path's
kind or the open file, keeps the table of open files, and refuses what the mount never does.

The ``fi`` arguments are libfuse's ``struct fuse_file_info`` (the mount uses ``raw_fi=True``), a
ctypes structure: its fields (``flags``, ``fh``, ``direct_io``, ``keep_cache``, ``noflush``) exist
only at run time, so no type checker can say more about them.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
from collections.abc import Callable, Iterator

import mfusepy
from mfusepy import fuse_config, fuse_conn_info, fuse_file_info

from seglogfs.fs.access import Access
from seglogfs.fs.context import BLOCK_SIZE, MountContext
from seglogfs.fs.errors import fail, fuse_errors
from seglogfs.fs.files import DirEntry, file_kinds
from seglogfs.fs.handles import OpenFile
from seglogfs.fs.invalidation import Notifier, PathNotes, growing_kinds, libfuse_invalidator
from seglogfs.fs.mount_config import MountConfigs
from seglogfs.fs.paths import WRITABLE, node_of
from seglogfs.log_manager import LogManager

log = logging.getLogger("seglogfs.fs")

#: largest WRITE request we accept (fuse3 offers 1 MiB; the kernel splits bigger writes). One request
#: becomes one batch, and Kafka's default max.message.bytes (1 MiB + 12) limits a whole batch: 512 KiB
#: of lines plus per-record framing stays under it, so with default settings one request is one
#: batch, appended atomically. Measured, `cat` of 2M 100-byte lines: 0.86 s at 512 KiB, 2.09 s at
#: 1 MiB (batches over the limit get split and encoded twice), 7.7 s at 4 KiB (fuse2 w/o big_writes).
MAX_WRITE = 512 << 10
XATTR_PREFIX = "user.seglog."

#: called once libfuse has mounted, with what the kernel negotiated (the daemon starts its threads)
InitCallback = Callable[[fuse_conn_info | None, fuse_config | None], None]


class SeglogOperations(mfusepy.Operations):
    """FUSE operations over a :class:`LogManager` (mounted with ``raw_fi=True``)."""

    use_ns = True

    def __init__(
        self,
        manager: LogManager,
        *,
        read_only: bool = False,
        access: Access | None = None,
        on_init: InitCallback | None = None,
        configs: MountConfigs | None = None,
    ) -> None:
        """``configs``: each log's mount settings (the daemon updates them at a reload)."""
        self.manager = manager
        self.read_only = read_only
        self.on_init = on_init
        self.context = MountContext(
            manager, read_only=read_only, access=access if access is not None else Access.of_process(),
            configs=configs,
        )
        self._kinds = file_kinds(self.context)
        #: what getattr answered that may change: the notifier invalidates it when it does
        self.notes = PathNotes(growing_kinds(self._kinds))
        self._noted_kinds = self.notes.kinds
        self.notifier: Notifier | None = None
        self._handles: dict[int, OpenFile] = {}
        self._next_fh = itertools.count(1)

    def _refused(self) -> mfusepy.FuseOSError:
        """The errno of a change the mount never makes (rm, mv, chmod, ...): EROFS when read-only."""
        return fail(errno.EROFS if self.read_only else errno.EPERM)

    def _handle(self, fi: fuse_file_info) -> OpenFile:
        try:
            return self._handles[fi.fh]
        except KeyError:
            raise fail(errno.EBADF) from None

    # ---------------------------------------------------------------- lifecycle
    def init_with_config(self, conn: fuse_conn_info | None, config: fuse_config | None) -> None:
        """Log what the kernel negotiated and hand control to the daemon (READY=1)."""
        if conn is not None:
            conn.max_write = min(conn.max_write or MAX_WRITE, MAX_WRITE)
            conn.max_readahead = max(conn.max_readahead, 1 << 20)  # cold reads of segments/ in 1 MiB
            log.info(
                "FUSE connection: max_write=%d max_read=%d max_readahead=%d",
                conn.max_write,
                getattr(conn, "max_read", 0),
                conn.max_readahead,
            )
        # libfuse's init runs in a request: the only place that names the mount for invalidations
        configs = self.context.configs
        self.notifier = Notifier(self.manager, self.notes, libfuse_invalidator(),
                                 stream_rebases=self.context.views.rebases,
                                 isolation=lambda name: configs.of(name).isolation)
        self.notifier.start()
        if self.on_init is not None:
            self.on_init(conn, config)

    def loop_ended(self) -> None:
        """libfuse's loop returned: stop invalidating before libfuse frees what invalidations use."""
        if self.notifier is not None:
            self.notifier.stop()

    def destroy(self, path: str) -> None:
        """Stop invalidating (if the loop's end did not) and commit what writers left behind when the
        mount goes away."""
        self.loop_ended()
        for fh in list(self._handles):
            handle = self._handles.pop(fh, None)
            if handle is not None:
                handle.release("unmount")

    # ---------------------------------------------------------------- metadata
    @fuse_errors
    def getattr(self, path: str, fi: fuse_file_info | None = None) -> dict[str, int]:
        node = node_of(path)
        if node.kind not in self._noted_kinds:
            return self._kinds[node.kind].getattr(node)
        # the kernel keeps this answer for an hour unless told: note the path, and number the request
        # so that the notifier knows when every answer computed before a change has reached the kernel
        ticket = self.notes.begin()
        try:
            attrs = self._kinds[node.kind].getattr(node)
            self.notes.note(node, path)
        finally:
            self.notes.end(ticket)
        return attrs

    @fuse_errors
    def readdir(self, path: str, fh: int) -> Iterator[DirEntry]:
        node = node_of(path)
        return iter(self._kinds[node.kind].readdir(node))

    @fuse_errors
    def readlink(self, path: str) -> str:
        node = node_of(path)
        return self._kinds[node.kind].readlink(node)

    # No ioctl(): Python's buffered open() asks isatty() (TCGETS) of every file. Without the operation
    # libfuse answers ENOSYS in C, without a Python callback, and the kernel hands the caller ENOTTY
    # (it turns a daemon's ENOSYS for IOCTL into ENOTTY, and keeps asking: measured on 6.18; no answer
    # stops the kernel from sending one IOCTL per open), so isatty() and every other ioctl see ENOTTY,
    # the errno of a file that is no terminal.

    @fuse_errors
    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.manager.data_dir)
        return {
            "f_bsize": BLOCK_SIZE,
            "f_frsize": st.f_frsize,
            "f_blocks": st.f_blocks,
            "f_bfree": st.f_bfree,
            "f_bavail": st.f_bavail,
            "f_files": st.f_files,
            "f_ffree": st.f_ffree,
            "f_favail": st.f_favail,
            "f_namemax": 255,
        }

    # ---------------------------------------------------------------- xattrs
    def _xattrs(self, path: str) -> dict[str, bytes]:
        node = node_of(path)
        return self._kinds[node.kind].xattrs(node)

    @fuse_errors
    def getxattr(self, path: str, name: str, position: int = 0) -> bytes:
        # ENODATA for anything we do not have, never ENOSYS: libfuse would switch xattrs off for good.
        if not name.startswith(XATTR_PREFIX):
            raise fail(errno.ENODATA)
        value = self._xattrs(path).get(name[len(XATTR_PREFIX) :])
        if value is None:
            raise fail(errno.ENODATA)
        return value

    @fuse_errors
    def listxattr(self, path: str) -> list[str]:
        return [XATTR_PREFIX + name for name in self._xattrs(path)]

    @fuse_errors
    def setxattr(self, path: str, name: str, value: bytes, options: int, position: int = 0) -> int:
        raise fail(errno.EROFS if self.read_only else errno.ENOTSUP)

    @fuse_errors
    def removexattr(self, path: str, name: str) -> int:
        raise fail(errno.EROFS if self.read_only else errno.ENOTSUP)

    # ---------------------------------------------------------------- namespace changes
    @fuse_errors
    def mkdir(self, path: str, mode: int) -> int:
        parts = [p for p in path.split("/") if p]
        if self.read_only:
            raise fail(errno.EROFS)
        if len(parts) != 1:
            raise fail(errno.EPERM)  # the layout inside a log is fixed
        self.manager.create_log(parts[0])  # InvalidLogNameError -> EINVAL
        if self.notifier is not None:
            self.notifier.poke()  # the root's link count changed
        return 0

    # Records and logs are never removed through the mount (retention does that): EPERM, not EROFS,
    # because the filesystem is writable, just not in this way.
    @fuse_errors
    def unlink(self, path: str) -> int:
        raise self._refused()

    @fuse_errors
    def rmdir(self, path: str) -> int:
        raise self._refused()

    @fuse_errors
    def rename(self, old: str, new: str) -> int:
        raise self._refused()

    @fuse_errors
    def symlink(self, target: str, source: str) -> int:
        raise self._refused()

    @fuse_errors
    def link(self, target: str, source: str) -> int:
        raise self._refused()

    @fuse_errors
    def mknod(self, path: str, mode: int, dev: int) -> int:
        raise self._refused()

    @fuse_errors
    def truncate(self, path: str, length: int, fi: fuse_file_info | None = None) -> int:
        node = node_of(path)
        if node.kind in WRITABLE and not self.read_only:
            self.context.log(node)
            return 0  # `cat f > append` opens with O_TRUNC: nothing is ever truncated
        raise fail(errno.EROFS)

    # The layout's owners and modes come from the config (`fuse:`), and the kernel enforces them.
    @fuse_errors
    def chmod(self, path: str, mode: int) -> int:
        raise self._refused()

    @fuse_errors
    def chown(self, path: str, uid: int, gid: int) -> int:
        raise self._refused()

    @fuse_errors
    def fallocate(self, path: str, mode: int, offset: int, size: int, fi: fuse_file_info) -> int:
        # Never EOPNOTSUPP (nor ENOSYS, which the kernel turns into EOPNOTSUPP for good): on that
        # one errno glibc's posix_fallocate falls back to writing a zero byte per block, and those
        # NULs would land in the log as record bytes. Every other errno is returned to the caller
        # as is. EPERM, as for a file marked append-only: space is never reserved in a log by hand.
        # (Only the append files get here: the kernel answers EBADF for files opened read-only.)
        raise self._refused()

    @fuse_errors
    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        node = node_of(path)
        if node.kind in WRITABLE and not self.read_only:
            return 0  # lets `touch append` succeed
        raise fail(errno.EROFS)

    # ---------------------------------------------------------------- open / close
    @fuse_errors
    def create(self, path: str, mode: int, fi: fuse_file_info) -> int:
        if self.read_only:
            raise fail(errno.EROFS)
        try:
            node = node_of(path)
        except OSError:
            node = None
        if node is not None and node.kind in WRITABLE:
            return self.open(path, fi)
        parent = node_of(path.rsplit("/", 1)[0] or "/")
        if parent.log is not None:
            self.context.log(parent)  # ENOENT inside a log that does not exist
        raise fail(errno.EPERM)  # the layout is fixed: no new files anywhere

    @fuse_errors
    def open(self, path: str, fi: fuse_file_info) -> int:
        node = node_of(path)
        handle = self._kinds[node.kind].open(node, fi)
        # FLUSH comes at each close() of each dup: spare close() the round trip unless the file has
        # something to report there (seglogfs.fs.appender)
        fi.noflush = 0 if handle.checks_at_close else 1
        fh = next(self._next_fh)
        self._handles[fh] = handle
        fi.fh = fh
        return 0

    @fuse_errors
    def read(self, path: str, size: int, offset: int, fi: fuse_file_info) -> bytes:
        handle = self._handles.get(fi.fh)
        if handle is None:
            raise fail(errno.EBADF)
        return handle.read(size, offset)

    @fuse_errors
    def write(self, path: str, data: bytes, offset: int, fi: fuse_file_info) -> int:
        # offset is ignored throughout: every write is an append
        self._handle(fi).write(data)
        return len(data)

    @fuse_errors
    def flush(self, path: str, fi: fuse_file_info) -> int:
        # Only files that open without noflush get here; what a writer left unfinished is still
        # committed at RELEASE (see seglogfs.fs.appender).
        handle = self._handles.get(fi.fh)
        if handle is not None:
            handle.flush()
        return 0

    @fuse_errors
    def release(self, path: str, fi: fuse_file_info) -> int:
        handle = self._handles.pop(fi.fh, None)
        if handle is not None:
            handle.release("release")
        return 0

    @fuse_errors
    def fsync(self, path: str, datasync: int, fi: fuse_file_info) -> int:
        handle = self._handles.get(fi.fh)
        if handle is not None:
            handle.fsync()
        return 0

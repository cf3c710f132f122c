"""The mfusepy ``Operations`` of a seglogfs mount: a thin shell over :class:`LogManager`.

Paths are parsed in :mod:`seglogfs.fs.paths`, exceptions become errnos in :mod:`seglogfs.fs.errors`;
this module only routes each call to the engine. It never looks inside record bytes: values come
from ``Log.read``, the ``records`` view from :class:`ValueStream`, JSON lines from :mod:`seglogfs.jsonl`.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mfusepy

from seglogfs.errors import RecordTooLargeError
from seglogfs.fs.access import Access
from seglogfs.fs.errors import fail, fuse_errors
from seglogfs.fs.paths import DIRECTORIES, LOG_ENTRIES, WRITABLE, Kind, Node, parse_path
from seglogfs.jsonl import headers_to_json, parse_jsonl_line
from seglogfs.records import ProducerRecord, Record
from seglogfs.value_stream import StreamReader, ValueStream

log = logging.getLogger("seglogfs.fs")

#: st_blksize of every file: `cat`, `cp` and Python size their buffers from it (cpython#117151), so
#: they read and write 1 MiB at a time instead of 128 KiB.
BLOCK_SIZE = 1 << 20
#: largest WRITE request we accept (fuse3 offers 1 MiB; the kernel splits bigger writes). One request
#: becomes one batch, and Kafka's default max.message.bytes (1 MiB + 12) limits a whole batch: 512 KiB
#: of lines plus per-record framing stays under it, so with default settings one request is one
#: batch, appended atomically. Measured, `cat` of 2M 100-byte lines: 0.86 s at 512 KiB, 2.09 s at
#: 1 MiB (batches over the limit get split and encoded twice), 7.7 s at 4 KiB (fuse2 w/o big_writes).
MAX_WRITE = 512 << 10
XATTR_PREFIX = "user.seglog."
_RECORD_CACHE_SIZE = 1024


@dataclass(slots=True, eq=False)
class Handle:
    """One open file: what it is, and what a writer has not committed yet."""

    node: Node
    log: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: bytearray = field(default_factory=bytearray)  # partial line, or the append.raw body
    written: bool = False  # append.raw: a record is due at close even if empty
    discarding: bool = False  # the line / append.raw record being written is over the limit: dropped
    refused: bytes = b""  # a refused write's bytes through its first newline: see _write_lines
    data: bytes = b""  # by-offset value / info snapshot
    fd: int = -1  # segments/<file>
    stream: StreamReader | None = None  # records


class SeglogOperations(mfusepy.Operations):
    """FUSE operations over a :class:`seglogfs.log_manager.LogManager` (mounted with ``raw_fi=True``)."""

    use_ns = True

    def __init__(
        self,
        manager: Any,
        *,
        read_only: bool = False,
        access: Access | None = None,
        on_init: Callable[[Any, Any], None] | None = None,
    ) -> None:
        self.manager = manager
        self.read_only = read_only
        self.on_init = on_init
        access = access if access is not None else Access.of_process()
        self.uid, self.gid = access.uid, access.gid
        # modes by kind of path, computed once: getattr is the hottest call of a mount
        self._dir_mode = stat.S_IFDIR | access.dir_mode(writable=not read_only)
        self._listing_mode = stat.S_IFDIR | access.listing_mode()
        self._file_mode = stat.S_IFREG | access.file_mode()
        self._append_mode = stat.S_IFREG | access.append_mode(writable=not read_only)
        self.started_ns = time.time_ns()
        self._handles: dict[int, Handle] = {}
        self._next_fh = itertools.count(1)
        self._streams: dict[str, ValueStream] = {}
        self._streams_lock = threading.Lock()
        self._records: OrderedDict[tuple[str, int], Record] = OrderedDict()
        self._records_lock = threading.Lock()

    # ---------------------------------------------------------------- helpers
    def _log(self, node: Node) -> Any:
        try:
            return self.manager.get(node.log)
        except KeyError:
            if node.log in self.manager.offline:
                raise fail(errno.EIO) from None  # of an offline log only `info` answers
            raise fail(errno.ENOENT) from None

    def _offline_info(self, name: str | None) -> bytes | None:
        """The `info` of an offline log (its name and why it is offline), None for any other name."""
        reason = self.manager.offline.get(name) if name is not None else None
        if reason is None:
            return None
        return (json.dumps({"name": name, "offline": True, "reason": reason}, indent=2) + "\n").encode()

    def _record(self, lg: Any, offset: int) -> Record:
        """``Log.read`` behind a small LRU: a lookup, open and getxattr of one offset read it once."""
        key = (lg.name, offset)
        with self._records_lock:
            record = self._records.get(key)
            if record is not None:
                self._records.move_to_end(key)
                return record
        record = lg.read(offset)
        with self._records_lock:
            self._records[key] = record
            if len(self._records) > _RECORD_CACHE_SIZE:
                self._records.popitem(last=False)
        return record

    def _stream(self, lg: Any) -> ValueStream:
        with self._streams_lock:
            stream = self._streams.get(lg.name)
            if stream is None or stream.log is not lg:
                stream = self._streams[lg.name] = ValueStream(lg)
            return stream

    def _info(self, lg: Any) -> bytes:
        info = {"name": lg.name, "topic": lg.topic, "partition": lg.partition, **lg.info()}
        return (json.dumps(info, indent=2, sort_keys=False, default=str) + "\n").encode()

    @staticmethod
    def _segment_stat(lg: Any, name: str) -> os.stat_result:
        """lstat of ``segments/<name>``: regular files only, a symlink is never followed (ENOENT)."""
        try:
            st = os.lstat(Path(lg.dir) / name)
        except FileNotFoundError:
            raise fail(errno.ENOENT) from None
        if not stat.S_ISREG(st.st_mode):
            raise fail(errno.ENOENT)
        return st

    @staticmethod
    def _open_segment_file(lg: Any, name: str) -> int:
        """A read-only fd on ``segments/<name>``, a regular file, whatever replaced it since lstat:
        O_NOFOLLOW refuses a symlink, O_NONBLOCK keeps a FIFO from blocking, fstat checks the rest."""
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(Path(lg.dir) / name, flags)
        except (FileNotFoundError, NotADirectoryError):
            raise fail(errno.ENOENT) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise fail(errno.ENOENT) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise fail(errno.ENOENT)
        return fd

    @staticmethod
    def _sealed(lg: Any, name: str) -> bool:
        """True for the files of a segment older than the active one (they never change again)."""
        stem, _, suffix = name.partition(".")
        if suffix not in ("log", "index", "timeindex") or len(stem) != 20 or not stem.isdigit():
            return False
        segments = lg.segments
        return bool(segments) and int(stem) < segments[-1].base_offset

    def _attrs(self, mode: int, size: int = 0, mtime_ns: int | None = None, nlink: int = 1) -> dict[str, int]:
        t = self.started_ns if mtime_ns is None else mtime_ns
        return {
            "st_mode": mode,
            "st_nlink": nlink,
            "st_size": size,
            "st_uid": self.uid,
            "st_gid": self.gid,
            "st_atime": t,
            "st_mtime": t,
            "st_ctime": t,
            "st_blksize": BLOCK_SIZE,
            "st_blocks": (size + 511) // 512,
        }

    def _resolve_time(self, lg: Any, node: Node) -> str:
        return f"../by-offset/{lg.offset_for_timestamp(node.number)}"

    def _refused(self) -> mfusepy.FuseOSError:
        """The errno of a change the mount never makes (rm, mv, chmod, ...): EROFS when read-only."""
        return fail(errno.EROFS if self.read_only else errno.EPERM)

    def _handle(self, fi: Any) -> Handle:
        try:
            return self._handles[fi.fh]
        except KeyError:
            raise fail(errno.EBADF) from None

    # ---------------------------------------------------------------- lifecycle
    def init_with_config(self, conn: Any, config: Any) -> None:
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
        if self.on_init is not None:
            self.on_init(conn, config)

    def destroy(self, path: str) -> None:
        """Commit what writers left behind when the mount goes away."""
        for fh in list(self._handles):
            handle = self._handles.pop(fh, None)
            if handle is not None:
                self._finish(handle, "unmount")

    # ---------------------------------------------------------------- metadata
    @fuse_errors
    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        node = parse_path(path)
        kind = node.kind
        if kind is Kind.ROOT:
            return self._attrs(self._dir_mode, nlink=2 + len(self.manager.logs))
        if kind in (Kind.LOG, Kind.INFO) and (offline := self._offline_info(node.log)) is not None:
            if kind is Kind.LOG:
                return self._attrs(self._listing_mode, nlink=2)
            return self._attrs(self._file_mode, len(offline), time.time_ns())
        lg = self._log(node)
        if kind is Kind.LOG:
            return self._attrs(self._dir_mode, nlink=5)
        if kind in DIRECTORIES:
            return self._attrs(self._listing_mode, nlink=2)
        if kind in WRITABLE:
            return self._attrs(self._append_mode)
        if kind is Kind.BY_OFFSET:
            record = self._record(lg, node.number)
            size = 0 if record.value is None else len(record.value)
            return self._attrs(self._file_mode, size, max(record.timestamp, 0) * 1_000_000)
        if kind is Kind.BY_TIME:
            return self._attrs(stat.S_IFLNK | 0o777, len(self._resolve_time(lg, node)))
        if kind is Kind.RECORDS:
            last = lg.last_timestamp
            mtime = None if last is None else last * 1_000_000
            return self._attrs(self._file_mode, self._stream(lg).size(), mtime)
        if kind is Kind.INFO:
            return self._attrs(self._file_mode, len(self._info(lg)), time.time_ns())
        st = self._segment_stat(lg, node.name)
        return self._attrs(self._file_mode, st.st_size, st.st_mtime_ns)

    @fuse_errors
    def readdir(self, path: str, fh: int) -> Iterator[tuple[str, int, int]]:
        node = parse_path(path)
        entries: list[tuple[str, int, int]] = [(".", stat.S_IFDIR, 0), ("..", stat.S_IFDIR, 0)]
        if node.kind is Kind.ROOT:
            names = sorted({*self.manager.logs, *self.manager.offline})
            entries += [(name, stat.S_IFDIR, 0) for name in names]
            return iter(entries)
        if node.kind is Kind.LOG and node.log in self.manager.offline:
            return iter([*entries, ("info", stat.S_IFREG, 0)])
        lg = self._log(node)
        if node.kind is Kind.LOG:
            for name, kind in LOG_ENTRIES.items():
                entries.append((name, stat.S_IFDIR if kind in DIRECTORIES else stat.S_IFREG, 0))
        elif node.kind is Kind.BY_OFFSET_DIR:
            end = lg.end_offset
            limit = lg.config.fs_listing_limit
            first = max(lg.start_offset, end - limit)
            entries += [(str(n), stat.S_IFREG, 0) for n in range(first, end)]
        elif node.kind is Kind.SEGMENTS_DIR:
            with os.scandir(lg.dir) as it:
                names = sorted(e.name for e in it if e.is_file(follow_symlinks=False))
            entries += [(name, stat.S_IFREG, 0) for name in names if not name.startswith(".")]
        elif node.kind is not Kind.BY_TIME_DIR:  # by-time/ is listed empty: any timestamp resolves
            raise fail(errno.ENOTDIR)
        return iter(entries)

    @fuse_errors
    def readlink(self, path: str) -> str:
        node = parse_path(path)
        if node.kind is not Kind.BY_TIME:
            raise fail(errno.EINVAL)
        return self._resolve_time(self._log(node), node)

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
        node = parse_path(path)
        if node.kind is not Kind.BY_OFFSET:
            return {}
        record = self._record(self._log(node), node.number)
        attrs = {
            "offset": str(record.offset).encode(),
            "timestamp": str(record.timestamp).encode(),
            "timestamp_type": record.timestamp_type.kafka_name.encode(),
        }
        if record.key is not None:
            attrs["key"] = record.key
        if record.headers:
            attrs["headers"] = json.dumps(headers_to_json(record.headers), ensure_ascii=False).encode()
        return attrs

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
    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        node = parse_path(path)
        if node.kind in WRITABLE and not self.read_only:
            self._log(node)
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
    def fallocate(self, path: str, mode: int, offset: int, size: int, fi: Any) -> int:
        # Never EOPNOTSUPP (nor ENOSYS, which the kernel turns into EOPNOTSUPP for good): on that
        # one errno glibc's posix_fallocate falls back to writing a zero byte per block, and those
        # NULs would land in the log as record bytes. Every other errno is returned to the caller
        # as is. EPERM, as for a file marked append-only: space is never reserved in a log by hand.
        # (Only the append files get here: the kernel answers EBADF for files opened read-only.)
        raise self._refused()

    @fuse_errors
    def utimens(self, path: str, times: Any = None) -> int:
        node = parse_path(path)
        if node.kind in WRITABLE and not self.read_only:
            return 0  # lets `touch append` succeed
        raise fail(errno.EROFS)

    # ---------------------------------------------------------------- open / close
    @fuse_errors
    def create(self, path: str, mode: int, fi: Any) -> int:
        if self.read_only:
            raise fail(errno.EROFS)
        try:
            node = parse_path(path)
        except OSError:
            node = None
        if node is not None and node.kind in WRITABLE:
            return self.open(path, fi)
        parent = parse_path(path.rsplit("/", 1)[0] or "/")
        if parent.log is not None:
            self._log(parent)  # ENOENT inside a log that does not exist
        raise fail(errno.EPERM)  # the layout is fixed: no new files anywhere

    @fuse_errors
    def open(self, path: str, fi: Any) -> int:
        node = parse_path(path)
        if node.kind in DIRECTORIES:
            raise fail(errno.EISDIR)
        offline = self._offline_info(node.log) if node.kind is Kind.INFO else None
        lg = None if offline is not None else self._log(node)
        accmode = fi.flags & os.O_ACCMODE
        handle = Handle(node, lg)
        if node.kind in WRITABLE:
            if self.read_only:
                raise fail(errno.EROFS)
            if accmode != os.O_WRONLY:
                raise fail(errno.EACCES)  # append files are write-only
            fi.direct_io = 1  # no page cache: every write reaches us, st_size stays 0
        else:
            if accmode != os.O_RDONLY:
                raise fail(errno.EROFS)
            if node.kind is Kind.BY_OFFSET:
                record = self._record(lg, node.number)
                handle.data = record.value or b""
                fi.keep_cache = 1  # a record never changes: let the kernel keep its pages
            elif node.kind is Kind.RECORDS:
                handle.stream = self._stream(lg).reader()
                fi.direct_io = 1  # grows: read whatever is there now, whatever st_size said
            elif node.kind is Kind.INFO:
                handle.data = offline if offline is not None else self._info(lg)
                fi.direct_io = 1
            elif node.kind is Kind.SEGMENT_FILE:
                handle.fd = self._open_segment_file(lg, node.name)
                # Page cache either way, so tools can mmap these files (dump does; direct_io forbids
                # shared mmap). Sealed segments never change: keep_cache keeps their pages across
                # opens. The active segment and its indexes change in place: without keep_cache every
                # open drops the cached pages, so each open sees the file as it is then.
                fi.keep_cache = int(self._sealed(lg, node.name))
            else:
                raise fail(errno.EINVAL)
        fi.noflush = 1  # nothing happens at FLUSH (each close of a dup): spare close() the round trip
        fh = next(self._next_fh)
        self._handles[fh] = handle
        fi.fh = fh
        return 0

    @fuse_errors
    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        handle = self._handle(fi)
        if handle.fd >= 0:
            return os.pread(handle.fd, size, offset)
        if handle.stream is not None:
            return handle.stream.read(offset, size)
        if handle.node.kind in WRITABLE:
            raise fail(errno.EBADF)
        return handle.data[offset : offset + size]

    @fuse_errors
    def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
        # offset is ignored throughout: every write is an append
        handle = self._handle(fi)
        with handle.lock:
            if handle.node.kind is Kind.APPEND_RAW:
                self._write_raw(handle, data)
            else:
                self._write_lines(handle, data)
            return len(data)

    def _write_raw(self, handle: Handle, data: bytes) -> None:
        """Collect the ``append.raw`` body; once it cannot fit a batch of its own it is gone for good."""
        limit = handle.log.max_value_bytes()
        if handle.discarding or len(handle.pending) + len(data) > limit:
            handle.pending, handle.written, handle.discarding = bytearray(), False, True
            raise RecordTooLargeError(
                f"append.raw record over {limit} bytes (max.message.bytes="
                f"{handle.log.config.max_message_bytes}): discarded"
            )
        handle.pending += data
        handle.written = True

    def _write_lines(self, handle: Handle, data: bytes) -> None:
        """Append the complete lines that ``data`` ends, keep its trailing partial line.

        A write fails as a whole: nothing of it is appended. On EFBIG, which no retry can cure, every
        line the write touches is discarded whole, so that a writer that goes on never gets a
        fragment or a splice: the line begun in earlier writes, and the line it leaves unfinished,
        whose later bytes fail with EFBIG too, up to and including the write with its newline.

        The write after that starts a new line, with one exception: the kernel splits a large
        write(2) into requests, and after a short count the writer (cat) sends the refused request
        again. When the refused write continued a partial line, a write that begins with the same
        bytes through its first newline is taken for that retry and fails with EFBIG too; appending
        it would append the discarded line's tail as a record.
        """
        if handle.discarding or (handle.refused and data.startswith(handle.refused)):
            handle.discarding = not data.endswith(b"\n")  # the line it leaves unfinished goes as well
            raise RecordTooLargeError("the rest of a line over max.message.bytes: discarded")
        handle.refused = b""
        try:
            limit = self._line_limit(handle)
            first_newline, last_newline = data.find(b"\n"), data.rfind(b"\n")
            first_line = len(handle.pending) + (first_newline if first_newline >= 0 else len(data))
            if first_line > limit or len(data) - last_newline - 1 > limit:  # can never fit a batch
                limit_name = f"max.message.bytes={handle.log.config.max_message_bytes}"
                raise RecordTooLargeError(f"line longer than {limit} bytes ({limit_name})")
            if last_newline < 0:
                handle.pending += data  # no complete line yet
                return
            head = bytes(handle.pending)
            self._commit_lines(handle, head + data[:last_newline] if head else data[:last_newline])
        except RecordTooLargeError:
            handle.discarding = not data.endswith(b"\n")
            if handle.pending and not handle.discarding:
                handle.refused = data[: first_newline + 1]
            handle.pending = bytearray()
            raise
        handle.pending = bytearray(data[last_newline + 1 :])

    @staticmethod
    def _line_limit(handle: Handle) -> int:
        """The longest line worth buffering. ``append``: the largest value a batch of its own can hold
        (``Log.max_value_bytes``). ``append.jsonl``: a record's key, value and headers together are
        under max.message.bytes, and JSON may spell one byte of them as six (``\\u00ff``); its exact
        size is known only once the line is parsed, at its newline."""
        if handle.node.kind is Kind.APPEND:
            return handle.log.max_value_bytes()
        return 6 * handle.log.config.max_message_bytes

    def _commit_lines(self, handle: Handle, complete: bytes) -> None:
        """Append the lines of ``complete`` (no trailing newline): one batch, or several when together
        they exceed max.message.bytes (``Log.append_split``); nothing when a line alone is too large."""
        lines = complete.split(b"\n")
        if handle.node.kind is Kind.APPEND:
            handle.log.append_split(lines)
            return
        records = [parse_jsonl_line(line) for line in lines if line.strip()]
        if records:
            handle.log.append_split(records)

    def _commit_pending(self, handle: Handle) -> None:
        """At the last close: the trailing partial line, or the whole append.raw body, becomes a record."""
        with handle.lock:
            if handle.node.kind is Kind.APPEND_RAW:
                if not handle.written:
                    return
                body, handle.pending, handle.written = bytes(handle.pending), bytearray(), False
                handle.log.append([ProducerRecord(value=body)])
            elif handle.pending:
                body, handle.pending = bytes(handle.pending), bytearray()
                self._commit_lines(handle, body)

    def _finish(self, handle: Handle, why: str) -> None:
        try:
            if handle.node.kind in WRITABLE:
                self._commit_pending(handle)
        except Exception as exc:  # nobody is left to tell; the close() that could have is gone
            log.error(
                "%s of %s/%s: dropped pending data: %s", why, handle.node.log, handle.node.kind.value, exc
            )
        finally:
            if handle.fd >= 0:
                os.close(handle.fd)
                handle.fd = -1
            if handle.stream is not None:
                handle.stream.close()

    # No flush(): every open sets noflush. FLUSH comes at each close() of each dup of a descriptor
    # (`{ printf 'a'; echo b; } > append` closes three), so the partial line and the append.raw body
    # are committed at RELEASE, the last close of the open file. The kernel sends RELEASE without
    # waiting for it, just after that close() returns: a reader may see the record a moment later.

    @fuse_errors
    def release(self, path: str, fi: Any) -> int:
        handle = self._handles.pop(fi.fh, None)
        if handle is not None:
            self._finish(handle, "release")
        return 0

    @fuse_errors
    def fsync(self, path: str, datasync: int, fi: Any) -> int:
        handle = self._handles.get(fi.fh)
        if handle is not None and handle.node.kind in WRITABLE:
            handle.log.flush()
        return 0

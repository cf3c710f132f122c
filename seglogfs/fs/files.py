"""Each kind of path in the mount and how it behaves: one class per kind (layout: :mod:`seglogfs.fs.paths`).

A :class:`FileKind` answers getattr, readdir, readlink, open and the xattrs of the paths of its kind;
:func:`file_kinds` gives the FUSE operations one instance per :class:`Kind` to dispatch to. Open files
are :mod:`seglogfs.fs.handles` (read) and :mod:`seglogfs.fs.appender` (write). Every path below the
root first finds its log (ENOENT when there is none, EIO when it is offline); only a log's directory
and its ``info`` answer for an offline log.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import time
from typing import ClassVar

from mfusepy import fuse_file_info

from seglogfs.fs.appender import Appender, JsonLineAppender, LineAppender, RawAppender
from seglogfs.fs.context import MountContext
from seglogfs.fs.errors import fail
from seglogfs.fs.handles import DescriptorFile, OpenFile, SnapshotFile, StreamFile
from seglogfs.fs.paths import DIRECTORIES, LOG_ENTRIES, Kind, Node
from seglogfs.jsonl import headers_to_json
from seglogfs.log import Log
from seglogfs.stream_format import JSON_LINES, VALUES, StreamFormat
from seglogfs.views.log_dir_files import LogDirFiles
from seglogfs.views.offset_listing import newest_offsets

#: one readdir entry: name, st_mode type bits, offset (0: the whole listing at once)
DirEntry = tuple[str, int, int]
_DOTS: tuple[DirEntry, ...] = ((".", stat.S_IFDIR, 0), ("..", stat.S_IFDIR, 0))
_LOG_DIR_ENTRIES: tuple[DirEntry, ...] = tuple(
    (name, stat.S_IFDIR if kind in DIRECTORIES else stat.S_IFREG, 0) for name, kind in LOG_ENTRIES.items()
)
_LOG_DIR_NLINK = 2 + sum(kind in DIRECTORIES for kind in LOG_ENTRIES.values())  # ".", its entry, subdirs


class FileKind:
    """How the paths of one kind behave. The defaults: no listing, no link, no xattrs."""

    __slots__ = ("ctx",)
    #: its size or content changes as the log does: the mount invalidates what the kernel cached
    grows: ClassVar[bool] = False

    def __init__(self, ctx: MountContext) -> None:
        self.ctx = ctx

    def getattr(self, node: Node) -> dict[str, int]:
        """The stat of ``node``."""
        raise NotImplementedError

    def readdir(self, node: Node) -> list[DirEntry]:
        """The entries of a directory: ENOTDIR here."""
        self.ctx.log(node)
        raise fail(errno.ENOTDIR)

    def readlink(self, node: Node) -> str:
        """The target of a symlink: EINVAL here."""
        raise fail(errno.EINVAL)

    def open(self, node: Node, fi: fuse_file_info) -> OpenFile:
        """An open file for ``node``, setting the caching flags in ``fi``."""
        raise NotImplementedError

    def xattrs(self, node: Node) -> dict[str, bytes]:
        """The ``user.seglog.*`` attributes of ``node``, by name without the prefix."""
        return {}


# ---------------------------------------------------------------- directories
class Directory(FileKind):
    """A directory: EISDIR to open."""

    __slots__ = ()

    def open(self, node: Node, fi: fuse_file_info) -> OpenFile:
        raise fail(errno.EISDIR)


class RootDir(Directory):
    """``/``: a directory per log, offline ones included (so their names are not reused)."""

    __slots__ = ()

    def getattr(self, node: Node) -> dict[str, int]:
        return self.ctx.attrs(self.ctx.dir_mode, nlink=2 + len(self.ctx.manager.logs))

    def readdir(self, node: Node) -> list[DirEntry]:
        manager = self.ctx.manager
        names = sorted({*manager.logs, *manager.offline})
        return [*_DOTS, *((name, stat.S_IFDIR, 0) for name in names)]


class LogDir(Directory):
    """``/<log>``: the fixed layout of :data:`LOG_ENTRIES`; only ``info`` for an offline log."""

    __slots__ = ()

    def getattr(self, node: Node) -> dict[str, int]:
        if node.log in self.ctx.manager.offline:
            return self.ctx.attrs(self.ctx.listing_mode, nlink=2)
        self.ctx.log(node)
        return self.ctx.attrs(self.ctx.dir_mode, nlink=_LOG_DIR_NLINK)

    def readdir(self, node: Node) -> list[DirEntry]:
        if node.log in self.ctx.manager.offline:
            return [*_DOTS, ("info", stat.S_IFREG, 0)]
        self.ctx.log(node)
        return [*_DOTS, *_LOG_DIR_ENTRIES]


class Listing(Directory):
    """A fixed listing inside a log (``by-offset/``, ``by-time/``, ``segments/``): never written."""

    __slots__ = ()

    def getattr(self, node: Node) -> dict[str, int]:
        self.ctx.log(node)
        return self.ctx.attrs(self.ctx.listing_mode, nlink=2)

    def readdir(self, node: Node) -> list[DirEntry]:
        self.ctx.log(node)
        return list(_DOTS)  # by-time/ is listed empty: any timestamp resolves


class ByOffsetDir(Listing):
    """``by-offset/``: the newest ``fs.listing.limit`` offsets that hold a record (a compacted log's
    gaps are not listed); any offset still readable opens."""

    __slots__ = ()

    def readdir(self, node: Node) -> list[DirEntry]:
        lg = self.ctx.log(node)
        config = self.ctx.configs.of(lg.name)
        runs = newest_offsets(lg, config.listing_limit, isolation=config.isolation)
        return [*_DOTS, *((str(n), stat.S_IFREG, 0) for run in runs for n in run)]


class SegmentsDir(Listing):
    """``segments/``: the regular files of the log dir (:class:`LogDirFiles`)."""

    __slots__ = ()

    def readdir(self, node: Node) -> list[DirEntry]:
        names = LogDirFiles(self.ctx.log(node)).names()
        return [*_DOTS, *((name, stat.S_IFREG, 0) for name in names)]


# ---------------------------------------------------------------- append files
class AppendFile(FileKind):
    """``append``, ``append.jsonl``, ``append.raw``: write-only, st_size 0, each open an :class:`Appender`."""

    __slots__ = ("appender",)

    def __init__(self, ctx: MountContext, appender: type[Appender]) -> None:
        super().__init__(ctx)
        self.appender = appender

    def getattr(self, node: Node) -> dict[str, int]:
        self.ctx.log(node)
        return self.ctx.attrs(self.ctx.append_mode)

    def open(self, node: Node, fi: fuse_file_info) -> OpenFile:
        lg = self.ctx.log(node)
        if self.ctx.read_only:
            raise fail(errno.EROFS)
        if fi.flags & os.O_ACCMODE != os.O_WRONLY:
            raise fail(errno.EACCES)  # append files are write-only
        fi.direct_io = 1  # no page cache: every write reaches us, st_size stays 0
        return self.appender(node, lg, self.ctx.configs)


# ---------------------------------------------------------------- read-only files
class ReadOnlyFile(FileKind):
    """A file opened for reading only (EROFS for any other mode), once its log is found."""

    __slots__ = ()

    def open(self, node: Node, fi: fuse_file_info) -> OpenFile:
        lg = self.ctx.log(node)
        _check_read_only(fi)
        return self.open_log_file(lg, node, fi)

    def open_log_file(self, lg: Log, node: Node, fi: fuse_file_info) -> OpenFile:
        """The open file of ``node`` in ``lg`` (the open mode already checked)."""
        raise fail(errno.EINVAL)


def _check_read_only(fi: fuse_file_info) -> None:
    if fi.flags & os.O_ACCMODE != os.O_RDONLY:
        raise fail(errno.EROFS)


class RecordFile(ReadOnlyFile):
    """``by-offset/<n>``: the value of record n; key, timestamp and headers as xattrs."""

    __slots__ = ()

    def getattr(self, node: Node) -> dict[str, int]:
        record = self.ctx.record(self.ctx.log(node), _number(node))
        size = 0 if record.value is None else len(record.value)
        return self.ctx.attrs(self.ctx.file_mode, size, max(record.timestamp, 0) * 1_000_000)

    def open_log_file(self, lg: Log, node: Node, fi: fuse_file_info) -> OpenFile:
        record = self.ctx.record(lg, _number(node))
        fi.keep_cache = 1  # a record never changes: let the kernel keep its pages
        return SnapshotFile(record.value or b"")

    def xattrs(self, node: Node) -> dict[str, bytes]:
        record = self.ctx.record(self.ctx.log(node), _number(node))
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


class TimeLink(ReadOnlyFile):
    """``by-time/<ts>``: a symlink to ``../by-offset/<first offset with timestamp >= ts>``."""

    __slots__ = ()

    def getattr(self, node: Node) -> dict[str, int]:
        return self.ctx.attrs(stat.S_IFLNK | 0o777, len(self._target(self.ctx.log(node), node)))

    def readlink(self, node: Node) -> str:
        return self._target(self.ctx.log(node), node)

    def _target(self, lg: Log, node: Node) -> str:
        offset = lg.offset_for_timestamp(_number(node), isolation=self.ctx.configs.of(lg.name).isolation)
        return f"../by-offset/{offset}"


class InfoFile(ReadOnlyFile):
    """``info``: the log's offsets, segments and config as JSON (for an offline log: why it is).

    Its times are those of the last change of its content seen by a getattr (the first one seen: the
    mount's start), so that a backup (``tar``) finds it unchanged while the log is idle."""

    __slots__ = ("_changed",)
    grows = True

    def __init__(self, ctx: MountContext) -> None:
        super().__init__(ctx)
        #: log name -> (digest of the content last shown, when it was first shown)
        self._changed: dict[str, tuple[bytes, int]] = {}

    def getattr(self, node: Node) -> dict[str, int]:
        data = self.ctx.offline_info(node.log)
        if data is None:
            data = self._info(self.ctx.log(node))
        return self.ctx.attrs(self.ctx.file_mode, len(data), self._changed_at(node.log or "", data))

    def _changed_at(self, name: str, data: bytes) -> int:
        """When ``name``'s info last changed to ``data`` (now, for content not seen before)."""
        digest = hashlib.blake2b(data, digest_size=16).digest()
        seen = self._changed.get(name)
        if seen is not None and seen[0] == digest:
            return seen[1]
        changed = self.ctx.started_ns if seen is None else max(time.time_ns(), seen[1] + 1)
        self._changed[name] = (digest, changed)
        return changed

    def open(self, node: Node, fi: fuse_file_info) -> OpenFile:
        offline = self.ctx.offline_info(node.log)
        lg = None if offline is not None else self.ctx.log(node)
        _check_read_only(fi)
        fi.direct_io = 1
        return SnapshotFile(self._info(lg) if lg is not None else offline or b"")

    def _info(self, lg: Log) -> bytes:
        info = {"name": lg.name, "topic": lg.topic, "partition": lg.partition, **lg.info()}
        info["config"] = {**info["config"], **self.ctx.configs.of(lg.name).to_dict()}  # the mount's own
        with contextlib.suppress(KeyError):  # the log went away since it was found: nothing to add
            info["cleaner"] = self.ctx.manager.cleaner_state(lg.name)
        return (json.dumps(info, indent=2, sort_keys=False, default=str) + "\n").encode()


class SegmentFile(ReadOnlyFile):
    """``segments/<file>``: a regular file of the log dir, read as it is on disk."""

    __slots__ = ()

    def getattr(self, node: Node) -> dict[str, int]:
        st = LogDirFiles(self.ctx.log(node)).stat(_name(node))
        return self.ctx.attrs(self.ctx.file_mode, st.st_size, st.st_mtime_ns)

    def open_log_file(self, lg: Log, node: Node, fi: fuse_file_info) -> OpenFile:
        files = LogDirFiles(lg)
        name = _name(node)
        handle = DescriptorFile(files.open(name), files.path(name))
        # Page cache either way, so tools can mmap these files (dump does; direct_io forbids
        # shared mmap). Sealed segments never change: keep_cache keeps their pages across
        # opens. The active segment and its indexes change in place: without keep_cache every
        # open drops the cached pages, so each open sees the file as it is then.
        fi.keep_cache = int(files.is_sealed(name))
        return handle


class StreamView(ReadOnlyFile):
    """``records``, ``records.jsonl``, ``from/<n>``, ``from/<n>.jsonl``: a :class:`ValueStream` of the
    log in a format, from the log start or from offset n (``node.number``); grows as the log does.

    ``from/<n>`` below the log start offset is ENOENT (retention removed it, as ``by-offset/<n>``); at
    or past the end it is an empty file that grows from record n on."""

    __slots__ = ("fmt", "views")
    grows = True

    def __init__(self, ctx: MountContext, fmt: StreamFormat) -> None:
        super().__init__(ctx)
        self.views = ctx.views
        self.fmt = fmt

    @staticmethod
    def _held_only(lg: Log, node: Node) -> bool:
        """``from/<n>`` below the log start: gone for new readers, but a reader that has it open keeps
        following it, as one of ``records`` does (``tail -f`` polls with fstat, whose GETATTR carries
        no file handle)."""
        return node.number is not None and node.number < lg.start_offset

    def _gone(self, lg: Log, node: Node) -> OSError:
        self.views.forget(lg, node.number)  # type: ignore[arg-type]
        return fail(errno.ENOENT)

    def getattr(self, node: Node) -> dict[str, int]:
        lg = self.ctx.log(node)
        size = self.views.size(lg, node.number, self.fmt, held_only=self._held_only(lg, node))
        if size is None:
            raise self._gone(lg, node)
        last = lg.last_timestamp
        return self.ctx.attrs(self.ctx.file_mode, size, None if last is None else last * 1_000_000)

    def open_log_file(self, lg: Log, node: Node, fi: fuse_file_info) -> OpenFile:
        reader = self.views.reader(lg, node.number, self.fmt, held_only=self._held_only(lg, node))
        if reader is None:
            raise self._gone(lg, node)
        fi.direct_io = 1  # grows: read whatever is there now, whatever st_size said
        return StreamFile(reader)


def file_kinds(ctx: MountContext) -> dict[Kind, FileKind]:
    """One behaviour per :class:`Kind`, sharing ``ctx``."""
    return {
        Kind.ROOT: RootDir(ctx),
        Kind.LOG: LogDir(ctx),
        Kind.APPEND: AppendFile(ctx, LineAppender),
        Kind.APPEND_JSONL: AppendFile(ctx, JsonLineAppender),
        Kind.APPEND_RAW: AppendFile(ctx, RawAppender),
        Kind.RECORDS: StreamView(ctx, VALUES),
        Kind.RECORDS_JSONL: StreamView(ctx, JSON_LINES),
        Kind.FROM_DIR: Listing(ctx),  # listed empty, as by-time/: any offset opens
        Kind.FROM: StreamView(ctx, VALUES),
        Kind.FROM_JSONL: StreamView(ctx, JSON_LINES),
        Kind.INFO: InfoFile(ctx),
        Kind.BY_OFFSET_DIR: ByOffsetDir(ctx),
        Kind.BY_TIME_DIR: Listing(ctx),
        Kind.SEGMENTS_DIR: SegmentsDir(ctx),
        Kind.BY_OFFSET: RecordFile(ctx),
        Kind.BY_TIME: TimeLink(ctx),
        Kind.SEGMENT_FILE: SegmentFile(ctx),
    }


def _number(node: Node) -> int:
    """The offset or timestamp of a ``by-offset``/``by-time`` node (the path parser always sets it)."""
    if node.number is None:
        raise fail(errno.ENOENT)
    return node.number


def _name(node: Node) -> str:
    """The file name of a ``segments/`` node (the path parser always sets it)."""
    if node.name is None:
        raise fail(errno.ENOENT)
    return node.name

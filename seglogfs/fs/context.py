"""What every kind of file in the mount shares: the engine, the modes getattr shows, and two caches."""

from __future__ import annotations

import errno
import json
import stat
import threading
import time
from collections import OrderedDict

from seglogfs.fs.access import Access
from seglogfs.fs.errors import fail
from seglogfs.fs.mount_config import MountConfigs
from seglogfs.fs.paths import Node
from seglogfs.fs.stream_views import StreamViews
from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.records import Record

#: st_blksize of every file: `cat`, `cp` and Python size their buffers from it (cpython#117151), so
#: they read and write 1 MiB at a time instead of 128 KiB.
BLOCK_SIZE = 1 << 20
#: bytes of recently read records the mount keeps (values, keys, plus ~200 bytes of object a record):
#: the kernel keeps a by-offset file's pages, but each open still asks for its record, so a script
#: re-reading ~100,000 small records opens them without going back to the segments (at 8 MiB, the
#: 40,000 files of bench/fuse.py's cold rows pushed out half of the ones it opens again)
RECORD_CACHE_BYTES = 32 << 20
_RECORD_OVERHEAD = 200


class MountContext:
    """The :class:`LogManager` behind a mount, how its paths look (owner, modes), and the caches
    that spare the engine repeated work: the last records read, the stream views (:class:`StreamViews`)."""

    def __init__(
        self, manager: LogManager, *, read_only: bool, access: Access, configs: MountConfigs | None = None
    ) -> None:
        self.manager = manager
        #: each log's mount settings (fs.listing.limit, fs.append.key.separator, fs.isolation.level)
        self.configs = configs if configs is not None else MountConfigs()
        self.read_only = read_only
        self.uid, self.gid = access.uid, access.gid
        # modes by kind of path, computed once: getattr is the hottest call of a mount
        self.dir_mode = stat.S_IFDIR | access.dir_mode(writable=not read_only)
        self.listing_mode = stat.S_IFDIR | access.listing_mode()
        self.file_mode = stat.S_IFREG | access.file_mode()
        self.append_mode = stat.S_IFREG | access.append_mode(writable=not read_only)
        self.started_ns = time.time_ns()
        #: every stream view of every log (records, records.jsonl, from/<n>...)
        self.views = StreamViews(self.configs)
        #: (the log's uid, offset, isolation level) -> (the log's removals when read, record, its weight)
        self._records: OrderedDict[tuple[int, int, str], tuple[int, Record, int]] = OrderedDict()
        self._records_bytes = 0
        self._records_lock = threading.Lock()

    def attrs(self, mode: int, size: int = 0, mtime_ns: int | None = None, nlink: int = 1) -> dict[str, int]:
        """The getattr answer of a path: ``mode``, ``size``, the mount's owner (mtime: mount time)."""
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

    def log(self, node: Node) -> Log:
        """The log ``node`` belongs to: ENOENT when there is none, EIO when it is offline."""
        if node.log is None:
            raise fail(errno.ENOENT)
        try:
            return self.manager.get(node.log)
        except KeyError:
            if node.log in self.manager.offline:
                raise fail(errno.EIO) from None  # of an offline log only `info` answers
            raise fail(errno.ENOENT) from None

    def offline_info(self, name: str | None) -> bytes | None:
        """The `info` of an offline log (its name and why it is offline), None for any other name."""
        reason = self.manager.offline.get(name) if name is not None else None
        if reason is None:
            return None
        return (json.dumps({"name": name, "offline": True, "reason": reason}, indent=2) + "\n").encode()

    def record(self, lg: Log, offset: int) -> Record:
        """``Log.read`` behind an LRU of :data:`RECORD_CACHE_BYTES`: a lookup, open and getxattr of one
        offset read it once, and so do opens of files read again. A record is kept with the log's
        :attr:`~seglogfs.log.Log.removals` and served only while it stays the same: once retention or
        compaction removed segments, every record is read again (the cleaned offset is then ENOENT)."""
        isolation = self.configs.of(lg.name).isolation
        key = (lg.uid, offset, isolation)
        while True:
            removals = lg.removals
            with self._records_lock:
                cached = self._records.get(key)
                if cached is not None and cached[0] == removals and offset >= lg.start_offset:
                    self._records.move_to_end(key)
                    return cached[1]
            try:
                record = lg.read(offset, isolation=isolation)
            except Exception:
                if lg.removals == removals:
                    raise
                continue  # read from a list that changed under it (a segment swapped or closed)
            if lg.removals == removals:
                break
        weight = _weight(record)
        records = self._records
        with self._records_lock:
            old = records.pop(key, None)
            if old is not None:
                self._records_bytes -= old[2]
            records[key] = (removals, record, weight)
            self._records_bytes += weight
            while self._records_bytes > RECORD_CACHE_BYTES and records:
                self._records_bytes -= records.popitem(last=False)[1][2]
        return record


def _weight(record: Record) -> int:
    """Roughly the bytes a cached record holds."""
    return _RECORD_OVERHEAD + len(record.value or b"") + len(record.key or b"")

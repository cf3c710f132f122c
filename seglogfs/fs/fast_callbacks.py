"""Leaner libfuse callbacks for the hottest requests of a mount (GETATTR/LOOKUP, OPEN, READ, RELEASE).

mfusepy's generic callbacks cost more than our whole answer to a cached LOOKUP: its getattr zeroes the
stat buffer with a ctypes call, then sets every field with ``setattr`` and a ``divmod`` per timestamp
(~5 us); its read re-checks the size of every answer. :class:`LeanFUSE` overrides those few callbacks
and keeps mfusepy's public API, its exception handling (``FUSE._wrapper``: an OSError becomes its
errno) and everything else. Only for libfuse 3 on a platform whose ``struct stat`` :func:`stat_packer`
understands; otherwise the plain :class:`mfusepy.FUSE` serves.
"""

from __future__ import annotations

import ctypes
import errno
import struct
import threading
from collections.abc import Callable, Mapping

import mfusepy

_NS = 1_000_000_000
#: the stat fields a mount sets (``SeglogOperations.getattr``'s keys); the rest stay 0
_TIME_FIELDS = {"st_atimespec": "st_atime", "st_mtimespec": "st_mtime", "st_ctimespec": "st_ctime"}
_INT_FIELDS = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blksize", "st_blocks")
_EXPECTED_ORDER = ("st_nlink", "st_mode", "st_uid", "st_gid", "st_size", "st_blksize", "st_blocks",
                   "st_atime", "st_atime_ns", "st_mtime", "st_mtime_ns", "st_ctime", "st_ctime_ns")

StatPacker = Callable[[Mapping[str, int]], bytes]


def _struct_code(ctype: type) -> str:
    """The ``struct`` code (standard sizes) of an integer ctypes type."""
    size = ctypes.sizeof(ctype)
    signed = ctype(-1).value == -1
    code = {4: "i", 8: "q"}[size]
    return code if signed else code.upper()


def stat_format() -> tuple[struct.Struct, tuple[str, ...]] | None:
    """A ``struct`` laying out mfusepy's ``c_stat`` and the order of the fields it packs, or None
    when the layout is one this module does not know (then mfusepy fills the stat itself)."""
    fields: list[tuple[int, str, str]] = []  # (offset, struct code, name)
    try:
        for name, ctype in mfusepy.c_stat._fields_:
            offset = getattr(mfusepy.c_stat, name).offset
            if name in _TIME_FIELDS:
                key = _TIME_FIELDS[name]
                code = _struct_code(mfusepy.c_timespec._fields_[0][1])
                fields += [(offset, code, key), (offset + struct.calcsize(code), code, key + "_ns")]
            elif name in _INT_FIELDS:
                fields.append((offset, _struct_code(ctype), name))
    except (KeyError, AttributeError, TypeError):
        return None
    fields.sort()
    fmt, position = "=", 0
    for offset, code, _name in fields:
        if offset < position:
            return None
        fmt += "x" * (offset - position) + code
        position = offset + struct.calcsize(code)
    fmt += "x" * (ctypes.sizeof(mfusepy.c_stat) - position)
    order = tuple(name for _offset, _code, name in fields)
    return struct.Struct(fmt), order


def stat_packer() -> StatPacker | None:
    """``pack(attrs)``: the bytes of a ``struct stat`` holding a getattr answer (times in ns)."""
    layout = stat_format()
    if layout is None or layout[1] != _EXPECTED_ORDER:
        return None
    pack = layout[0].pack

    def pack_stat(a: Mapping[str, int]) -> bytes:
        at, atn = divmod(a["st_atime"], _NS)
        mt, mtn = divmod(a["st_mtime"], _NS)
        ct, ctn = divmod(a["st_ctime"], _NS)
        return pack(a["st_nlink"], a["st_mode"], a["st_uid"], a["st_gid"], a["st_size"], a["st_blksize"],
                    a["st_blocks"], at, atn, mt, mtn, ct, ctn)

    return pack_stat


_pack_stat = stat_packer() if mfusepy.fuse_version_major == 3 else None
_STAT_SIZE = ctypes.sizeof(mfusepy.c_stat)
_memmove = ctypes.memmove
#: how paths are decoded: as mfusepy does by default (the mount never passes other ones)
_ENCODING, _ERRORS = "utf-8", "surrogateescape"


def lean_callbacks_available() -> bool:
    """True when :class:`LeanFUSE` can serve (libfuse 3, a ``struct stat`` layout it knows)."""
    return _pack_stat is not None


_threads = threading.local()
_ensure_gil_state = ctypes.pythonapi.PyGILState_Ensure


def keep_thread_state() -> None:
    """Keep the calling libfuse worker's Python thread state for its life. A ctypes callback on a
    thread Python did not start makes a thread state on entry and frees it on return; one extra
    ``PyGILState_Ensure``, never released, keeps it (and the thread's locals) from one request to
    the next. A no-op on a thread that already kept it (and on the single-threaded loop's thread,
    which Python started)."""
    if not getattr(_threads, "kept", False):
        _ensure_gil_state()
        _threads.kept = True


class LeanFUSE(mfusepy.FUSE):
    """:class:`mfusepy.FUSE` (``raw_fi=True``, ``use_ns``) with leaner hot callbacks; the operations
    must answer getattr with every key of ``SeglogOperations.getattr`` (times in ns)."""

    def _wrapper(self, func, *args, **kwargs):
        keep_thread_state()
        return super()._wrapper(func, *args, **kwargs)

    def getattr_fuse_3(self, path: bytes, buf: mfusepy.c_stat_p, fip: mfusepy.fuse_fi_p) -> int:
        attrs = self.operations.getattr(path.decode(_ENCODING, _ERRORS), fip.contents if fip else None)
        try:
            packed = _pack_stat(attrs)  # type: ignore[misc]
        except KeyError:  # an answer without every field: mfusepy's way (the rest stays 0)
            ctypes.memset(buf, 0, _STAT_SIZE)
            mfusepy.set_st_attrs(buf.contents, attrs, use_ns=True)
            return 0
        _memmove(buf, packed, _STAT_SIZE)
        return 0

    def open(self, path: bytes, fip: mfusepy.fuse_fi_p) -> int:
        return self.operations.open(path.decode(_ENCODING, _ERRORS), fip.contents)

    def read(self, path: bytes | None, buf: mfusepy.c_byte_p, size: int, offset: int,
             fip: mfusepy.fuse_fi_p) -> int:
        data = self.operations.read(path.decode(_ENCODING, _ERRORS) if path else None, size, offset,
                                    fip.contents)
        n = len(data)
        if n > size:  # never past the kernel's buffer (mfusepy asserts the same)
            raise mfusepy.FuseOSError(errno.EIO)
        if n:
            _memmove(buf, data, n)
        return n

    def release(self, path: bytes | None, fip: mfusepy.fuse_fi_p) -> int:
        return self.operations.release(path.decode(_ENCODING, _ERRORS) if path else None, fip.contents)

"""Mounting and unmounting: the mount options and the one blocking call into libfuse."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

import mfusepy

from seglogfs.fs.fast_callbacks import LeanFUSE, lean_callbacks_available
from seglogfs.fs.fuse_loop import owned_loop, owned_loop_available
from seglogfs.fs.operations import SeglogOperations

log = logging.getLogger("seglogfs.fs")

FUSERMOUNT = shutil.which("fusermount3") or "/usr/bin/fusermount3"
ATTR_TIMEOUT_S = 3600.0
#: "single" serves with libfuse's single-threaded loop instead of the multi-threaded one (benchmarks)
FUSE_LOOP_VARIABLE = "SEGLOGFS_FUSE_LOOP"
#: libfuse's worker threads kept waiting for requests (more start when all are busy, up to its max)
IDLE_THREADS = 10


def mount_options(*, read_only: bool, allow_other: bool) -> dict[str, object]:
    """The ``-o`` options of a seglogfs mount."""
    return {
        "fsname": "seglogfs",
        "subtype": "seglogfs",
        # An hour: the kernel answers lookups and stat of everything by itself, and re-reads of
        # immutable files (keep_cache) never reach us. What changes is invalidated explicitly when it
        # does (seglogfs.fs.invalidation), so `records`, `info` and the active segment are never staler
        # than its poll interval. The timeouts are mount-wide in libfuse's high-level API.
        "attr_timeout": ATTR_TIMEOUT_S,
        "entry_timeout": ATTR_TIMEOUT_S,
        # 0: a lookup of an offset that does not exist yet must be asked again, so clients can poll.
        "negative_timeout": 0.0,
        "ro": read_only,
        "allow_other": allow_other,
        # The kernel checks every access against the modes, owner and group getattr shows (set by
        # the `fuse:` config): without it allow_other would let any user append and create logs.
        "default_permissions": True,
    }


def fuse_library() -> str:
    """Which libfuse mfusepy loaded (fuse3 unless FUSE_LIBRARY_PATH says otherwise)."""
    return f"libfuse {mfusepy.fuse_version_major}.{mfusepy.fuse_version_minor}"


def run_mount(
    ops: SeglogOperations,
    mount_point: str | Path,
    *,
    read_only: bool = False,
    allow_other: bool = False,
    debug: bool = False,
) -> None:
    """Serve ``ops`` on ``mount_point`` until it is unmounted (blocks, foreground; libfuse's worker
    threads serve the requests).

    libfuse installs its SIGTERM/SIGINT handlers here (only where the disposition is still SIG_DFL):
    they end the loop and unmount, and this function returns.
    """
    options = mount_options(read_only=read_only, allow_other=allow_other)
    # Several threads: a request that blocks (an fsync, a cold read of a big file, a wait for a log's
    # lock) holds only its own thread, so other clients' requests go on. Each worker keeps its
    # Python thread state (seglogfs.fs.fast_callbacks.keep_thread_state); the hand-offs between
    # workers still make one client's small requests slower than on one thread (bench/loops.py).
    single = os.environ.get(FUSE_LOOP_VARIABLE, "multi") == "single"
    if not single:
        # libfuse 3.14 passes its unset default (UINT_MAX) on and prints "Ignoring invalid max threads
        # value 4294967295 > max (100000)" at every start of the multi-threaded loop: give it a value.
        options["max_idle_threads"] = IDLE_THREADS
    fuse = LeanFUSE if lean_callbacks_available() else mfusepy.FUSE
    # The notifier must stop between the loop's end and libfuse's teardown (seglogfs.fs.fuse_loop).
    owned = owned_loop(ops.loop_ended) if owned_loop_available() else contextlib.nullcontext()
    with owned:
        fuse(ops, str(mount_point), raw_fi=True, foreground=True, debug=debug, nothreads=single, **options)


_DEAD_CONNECTION = (errno.ENOTCONN, errno.ECONNABORTED)  # killed daemon; aborted connection


def _mount_target(mount_point: str | Path) -> str:
    """The absolute path the mount table shows for ``mount_point``, found without touching the
    mount point itself (a dead FUSE mount answers most calls with ENOTCONN)."""
    path = os.path.abspath(mount_point)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _unescape_mountinfo(field: str) -> str:
    """Undo the kernel's octal escapes in /proc/self/mountinfo (``\\040`` is a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_fstype(mount_point: str | Path) -> str | None:
    """The type (``fuse.seglogfs``, ``tmpfs``...) of the topmost mount on ``mount_point``, or None
    when nothing is mounted there (per /proc/self/mountinfo)."""
    target = _mount_target(mount_point)
    fstype = None
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 7 or "-" not in fields[6:]:
                continue
            separator = fields.index("-", 6)
            if _unescape_mountinfo(fields[4]) == target and separator + 1 < len(fields):
                fstype = fields[separator + 1]  # later lines are mounted on top of earlier ones
    return fstype


def is_mounted(mount_point: str | Path) -> bool:
    """True when something is mounted on ``mount_point``."""
    return mount_fstype(mount_point) is not None


def is_stale(mount_point: str | Path) -> bool:
    """True when ``mount_point`` holds a FUSE mount whose daemon is gone ("Transport endpoint is not
    connected").

    The probe is statfs, which the kernel always forwards to the daemon: stat() of a dead mount can
    still succeed for up to ``attr_timeout`` from the kernel's attribute cache.
    """
    fstype = mount_fstype(mount_point)
    if fstype is None or not (fstype == "fuse" or fstype.startswith(("fuse.", "fuseblk"))):
        return False
    try:
        os.statvfs(mount_point)
    except OSError as exc:
        return exc.errno in _DEAD_CONNECTION
    return False


def unmount(mount_point: str | Path, *, lazy: bool = False) -> bool:
    """``fusermount3 -u`` (``-uz`` when lazy); True when it succeeded."""
    args = [FUSERMOUNT, "-uz" if lazy else "-u", str(mount_point)]
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        log.debug("%s: %s", " ".join(args), result.stderr.strip())
    return result.returncode == 0


def clear_stale_mount(mount_point: str | Path) -> bool:
    """Lazily unmount a mount left by a killed predecessor; True when there was one."""
    if not is_stale(mount_point):
        return False
    log.warning("%s: stale mount (Transport endpoint is not connected), unmounting it", mount_point)
    unmount(mount_point, lazy=True)
    return True

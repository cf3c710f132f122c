"""Mounting and unmounting: the mount options and the one blocking call into libfuse."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import mfusepy

from seglogfs.fs.operations import SeglogOperations

log = logging.getLogger("seglogfs.fs")

FUSERMOUNT = shutil.which("fusermount3") or "/usr/bin/fusermount3"


def mount_options(*, read_only: bool, allow_other: bool) -> dict[str, object]:
    """The ``-o`` options of a seglogfs mount."""
    return {
        "fsname": "seglogfs",
        "subtype": "seglogfs",
        # 1 s attr/entry timeouts (libfuse's and rclone's default): `tail -f records` polls fstat every
        # second and sees growth within two; immutable by-offset files are kept by keep_cache instead.
        # Long timeouts would serve stale sizes of `records`/`info` and of the active segment.
        "attr_timeout": 1.0,
        "entry_timeout": 1.0,
        # 0: a lookup of an offset that does not exist yet must be asked again, so clients can poll.
        "negative_timeout": 0.0,
        "ro": read_only,
        "allow_other": allow_other,
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
    """Serve ``ops`` on ``mount_point`` until it is unmounted (blocks; multi-threaded, foreground).

    libfuse installs its SIGTERM/SIGINT handlers here (only where the disposition is still SIG_DFL):
    they end the loop and unmount, and this function returns.
    """
    options = mount_options(read_only=read_only, allow_other=allow_other)
    mfusepy.FUSE(ops, str(mount_point), raw_fi=True, foreground=True, debug=debug, **options)


def is_stale(mount_point: str | Path) -> bool:
    """True when ``mount_point`` is a dead FUSE mount ("Transport endpoint is not connected")."""
    try:
        os.stat(mount_point)
    except OSError as exc:
        return exc.errno == 107  # ENOTCONN
    return False


def is_mounted(mount_point: str | Path) -> bool:
    """True when something is mounted on ``mount_point`` (per /proc/self/mounts)."""
    target = os.path.realpath(mount_point)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f if len(line.split()) > 1)


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

"""An empty mfusepy filesystem with seglogfs's layout: the binding's floor for bench/fuse.py.

    .venv/bin/python bench/empty_fs.py MOUNT_POINT RECORDS [LOG_DIR]

``/bench-0/by-offset/<n>`` (n < RECORDS) are 100-byte files whose answers cost nothing: no parsing
beyond a split, no engine, no cache. ``/bench-0/segments/<file>`` are LOG_DIR's files, read straight
through a descriptor, the page cache kept across opens only for the names listed (comma-separated)
in ``SEGLOGFS_EMPTY_SEALED``, as seglogd serves sealed and active segments: the floor of a file that
grows, which every open must see as it is. It is served exactly as seglogd serves its mount (the same
``run_mount``: mount options, hour-long timeouts, callbacks, loop; ``SEGLOGFS_FUSE_LOOP`` chooses
the loop), so what a client loop measures here is libfuse, the kernel and the Python binding alone.
Runs until unmounted (``fusermount3 -u``) or SIGTERM.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import seglogfs.fs  # noqa: E402, F401  (selects libfuse3 before mfusepy is imported)

import mfusepy  # noqa: E402  # isort: skip
from seglogfs.fs.mount import run_mount  # noqa: E402

VALUE = b"v" * 100


class EmptyOperations(mfusepy.Operations):
    """The layout's directories and by-offset files, answered from constants."""

    use_ns = True

    def __init__(
        self, records: int, log_dir: Path | None = None, sealed: frozenset[str] = frozenset()
    ) -> None:
        self.records = records
        self.log_dir = log_dir
        self.sealed = sealed
        self.next_fh = 0
        self.fds: dict[int, int] = {}
        base = {"st_nlink": 1, "st_uid": 0, "st_gid": 0, "st_blksize": 1 << 20, "st_blocks": 0,
                "st_atime": 0, "st_mtime": 0, "st_ctime": 0}
        self.dir_attrs = {**base, "st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_size": 0}
        self.file_attrs = {**base, "st_mode": stat.S_IFREG | 0o444, "st_size": len(VALUE)}

    def getattr(self, path: str, fi: object = None) -> dict[str, int]:
        parts = path.split("/")
        if len(parts) == 4 and parts[2] == "segments" and self.log_dir is not None:
            st = os.stat(self.log_dir / parts[3])
            return {**self.file_attrs, "st_size": st.st_size, "st_mtime": st.st_mtime_ns}
        if len(parts) <= 3:
            return self.dir_attrs
        if len(parts) == 4 and parts[3].isdigit() and int(parts[3]) < self.records:
            return self.file_attrs
        raise mfusepy.FuseOSError(errno.ENOENT)

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", ".."]

    def open(self, path: str, fi: mfusepy.fuse_file_info) -> int:
        self.next_fh += 1
        fi.fh = self.next_fh
        name = path.rsplit("/", 1)[-1]
        if "/segments/" in path and self.log_dir is not None:
            self.fds[fi.fh] = os.open(self.log_dir / name, os.O_RDONLY)
            fi.keep_cache = int(name in self.sealed)  # as seglogd's segments/ files
        else:
            fi.keep_cache = 1  # as seglogd's by-offset files
        return 0

    def read(self, path: str, size: int, offset: int, fi: mfusepy.fuse_file_info) -> bytes:
        fd = self.fds.get(fi.fh)
        if fd is not None:
            return os.pread(fd, size, offset)
        return VALUE[offset : offset + size]

    def release(self, path: str, fi: mfusepy.fuse_file_info) -> int:
        fd = self.fds.pop(fi.fh, None)
        if fd is not None:
            os.close(fd)
        return 0

    def loop_ended(self) -> None:
        """run_mount's hook (seglogd stops its notifier here); nothing to stop."""


def main() -> int:
    mount_point, records = sys.argv[1], int(sys.argv[2])
    log_dir = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    sealed = frozenset(n for n in os.environ.get("SEGLOGFS_EMPTY_SEALED", "").split(",") if n)
    Path(mount_point).mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(RuntimeError):  # fuse_main reports the SIGTERM that ended it
        run_mount(EmptyOperations(records, log_dir, sealed), mount_point)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())

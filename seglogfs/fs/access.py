"""Who may read and who may write through the mount: the owner, group and modes every path shows.

The kernel enforces them (the mount has ``default_permissions``); ``allow_other`` only decides whether
users other than the mounting one reach the mount at all. Two scopes, each ``owner``, ``group`` or
``everyone`` (the owner always included):

- ``read``: who may list directories and read ``records``, ``info``, ``by-offset/<n>``, ``segments/``;
- ``write``: who may append (``append``, ``append.jsonl``, ``append.raw``) and create logs (``mkdir``).

Writers must be able to reach a log, so ``write`` is never wider than ``read``. The defaults, read by
everyone and written by the owner, give the modes seglogfs always showed: 0755 directories, 0444
files, 0200 append files.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from enum import Enum


class Scope(Enum):
    """Who a permission is given to (each scope includes the ones before it)."""

    OWNER = "owner"
    GROUP = "group"
    EVERYONE = "everyone"

    def bits(self, rwx: int) -> int:
        """The mode bits giving ``rwx`` (a 3-bit value: 4 read, 2 write, 1 search) to this scope."""
        classes = {Scope.OWNER: 1, Scope.GROUP: 2, Scope.EVERYONE: 3}[self]
        return sum(rwx << shift for shift in (6, 3, 0)[:classes])

    def __le__(self, other: Scope) -> bool:
        order = list(Scope)
        return order.index(self) <= order.index(other)


_R, _W, _X = 4, 2, 1


@dataclass(frozen=True, slots=True)
class Access:
    """Owner, group and the two scopes; the ``*_mode`` methods give each kind of path its mode bits."""

    uid: int
    gid: int
    read: Scope = Scope.EVERYONE
    write: Scope = Scope.OWNER

    def __post_init__(self) -> None:
        if not self.write <= self.read:
            raise ValueError(
                f"write: {self.write.value} is wider than read: {self.read.value} "
                "(a writer must be able to reach the log)"
            )

    @classmethod
    def of_process(cls) -> Access:
        """The default: everything owned by this process's user and group."""
        return cls(os.getuid(), os.getgid())

    def dir_mode(self, *, writable: bool) -> int:
        """The root and log directories: listed by readers, ``mkdir`` by writers (when writable)."""
        return self.read.bits(_R | _X) | (self.write.bits(_W) if writable else 0)

    def listing_mode(self) -> int:
        """``by-offset/``, ``by-time/``, ``segments/``: fixed listings, never written."""
        return self.read.bits(_R | _X)

    def file_mode(self) -> int:
        """Read-only files: ``records``, ``info``, ``by-offset/<n>``, ``segments/<file>``."""
        return self.read.bits(_R)

    def append_mode(self, *, writable: bool) -> int:
        """The write-only append files (no one's, on a read-only mount)."""
        return self.write.bits(_W) if writable else 0


def resolve_user(value: str | int) -> tuple[int, int | None]:
    """A user name or uid -> (uid, the user's primary gid, or None for a uid without a passwd entry).

    KeyError for a name that does not exist, ValueError for a negative or too large id.
    """
    if isinstance(value, int):
        _check_id(value)
        try:
            return value, pwd.getpwuid(value).pw_gid
        except KeyError:
            return value, None
    entry = pwd.getpwnam(value)
    return entry.pw_uid, entry.pw_gid


def resolve_group(value: str | int) -> int:
    """A group name or gid -> gid; KeyError for a name that does not exist, ValueError for a bad id."""
    if isinstance(value, int):
        _check_id(value)
        return value
    return grp.getgrnam(value).gr_gid


def _check_id(value: int) -> None:
    if not 0 <= value < (1 << 32) - 1:  # (uid_t)-1 means "unchanged" to the kernel
        raise ValueError(f"an id is 0 to {(1 << 32) - 2}")

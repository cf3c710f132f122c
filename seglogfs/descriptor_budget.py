"""``DescriptorBudget``: a process-wide cap on the descriptors segments keep open.

A segment holds its .log descriptor and its indexes' write descriptors only while it is in use; the
budget keeps the segments that hold any in least-recently-used order and, past its limit, closes the
files of the least recently used idle ones (``release_files``). They reopen on their next use (with
the same no-symlink rules, and ``SegmentFileMissingError`` when a file vanished meanwhile). So a data
dir of thousands of logs runs under ``ulimit -n 1024``: a log not touched costs no descriptor.

The limit comes from ``RLIMIT_NOFILE``: a share of the soft limit, the rest left to FUSE, clients'
opens (a stream holds its own descriptor of the segment it reads), checkpoints, locks and sockets.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from typing import Protocol

__all__ = ["BUDGET", "DESCRIPTORS_PER_HOLDER", "DescriptorBudget", "FileHolder", "budget_for_limit"]

#: what one holder (a segment) may keep open: its .log and its two indexes' write descriptors
DESCRIPTORS_PER_HOLDER = 3
_MIN_HOLDERS = 8


class FileHolder(Protocol):
    """Something that keeps descriptors open and can give them back (a ``LogSegment``)."""

    uid: int

    def release_files(self) -> bool:
        """Close every descriptor unless one is in use (False then: try again later)."""
        ...


def budget_for_limit(soft_limit: int) -> int:
    """Holders allowed under a soft ``RLIMIT_NOFILE``: half the descriptors, three a holder."""
    return max(_MIN_HOLDERS, soft_limit // 2 // DESCRIPTORS_PER_HOLDER)


class DescriptorBudget:
    """Least-recently-used holders of descriptors, at most ``limit`` of them holding any."""

    def __init__(self, limit: int | None = None) -> None:
        self._lock = threading.Lock()
        self._holders: OrderedDict[int, FileHolder] = OrderedDict()
        self.limit = limit if limit is not None else self.limit_from_rlimit()
        self.evictions = 0
        self._last: FileHolder | None = None  # the holder touched last (at the back of the order)

    @staticmethod
    def limit_from_rlimit() -> int:
        """The limit for the process's current soft ``RLIMIT_NOFILE``."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            soft = 1 << 20
        return budget_for_limit(soft)

    def configure(self, limit: int | None = None) -> None:
        """Set the limit (default: from the current ``RLIMIT_NOFILE``), closing files past it."""
        with self._lock:
            self.limit = limit if limit is not None else self.limit_from_rlimit()
        self._evict()

    def __len__(self) -> int:
        return len(self._holders)

    def touch(self, holder: FileHolder) -> None:
        """``holder`` (which holds or is about to hold descriptors) was just used; over the limit,
        the least recently used idle holders close their files."""
        if self._last is holder:  # the same segment again (a read's several preads): nothing moves
            return
        holders = self._holders
        uid = holder.uid
        self._last = holder
        with self._lock:
            if uid in holders:
                holders.move_to_end(uid)
                return
            holders[uid] = holder
            over = len(holders) > self.limit
        if over:
            self._evict(spare=uid)

    def forget(self, holder: FileHolder) -> None:
        """``holder`` closed its files by itself."""
        with self._lock:
            if self._last is holder:
                self._last = None
            self._holders.pop(holder.uid, None)

    def _evict(self, spare: int | None = None) -> None:
        """Release least recently used holders until within the limit; a busy one goes to the back
        (it is in use, so recently used)."""
        with self._lock:
            excess = len(self._holders) - self.limit
            candidates: list[tuple[int, FileHolder]] = []
            for uid, holder in self._holders.items():
                if len(candidates) >= excess + 4:  # a few spare in case some are busy
                    break
                if uid != spare:
                    candidates.append((uid, holder))
        released = 0
        for uid, holder in candidates:
            if released >= excess:
                break
            with self._lock:
                if self._holders.pop(uid, None) is None:
                    continue
                if self._last is holder:
                    self._last = None
            # Outside the budget's lock: release_files takes the holder's own (never blocking). A
            # holder touched meanwhile is listed again, and at worst listed while holding nothing.
            if holder.release_files():
                released += 1
                self.evictions += 1
            else:
                with self._lock:
                    self._holders.setdefault(uid, holder)


#: the process's budget; the daemon configures it after setting its descriptor limit
BUDGET = DescriptorBudget()

"""``ZeroCopyDescriptors``: how many segment descriptors the listener's responses may hold at once.

A response whose records go from the files (``sendfile``) holds a descriptor per large partition until
the client has read it, and a client that stops reading holds them for as long as it stays connected.
So the listener as a whole holds at most a share of ``RLIMIT_NOFILE`` (the descriptor budget takes
half for the segments, the rest is FUSE's, the sockets' and the clients' opens): past it, a
partition's records are copied into the response instead, and no client can make the daemon run out
of descriptors."""

from __future__ import annotations

import resource
import threading

__all__ = ["ZeroCopyDescriptors"]

#: the listener's zero-copy descriptors are at most this fraction of the soft RLIMIT_NOFILE
SHARE = 8


class ZeroCopyDescriptors:
    """A count of held descriptors against a limit (thread-safe)."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is None:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            limit = soft // SHARE if soft != resource.RLIM_INFINITY else 1 << 16
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def acquire(self) -> bool:
        """Take one descriptor's place; False when the limit is reached (copy instead)."""
        with self._lock:
            if self.held >= self.limit:
                return False
            self.held += 1
            return True

    def release(self) -> None:
        """Give back a place :meth:`acquire` took."""
        with self._lock:
            self.held -= 1

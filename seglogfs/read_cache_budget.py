"""ReadCacheBudget: one bound on the bytes that every log's read caches hold together.

Each log keeps what its reads learned (:class:`~seglogfs.batch_cache.BatchCache`: record bounds and
decoded batches, and the batches its lookups found), bounded per log. With thousands of logs (a copy
of a broker's data dir read by `tar` or `grep -r`) those bounds add up to more memory than the machine
has; so every cache also reports what it holds here, and when the caches together hold more than the
budget, the ones used least recently are emptied. A cache reports when it grows (a read that missed)
and when it empties, not on a hit: the order is that of the last growth, which costs a hit nothing.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Protocol

__all__ = ["DEFAULT_READ_CACHE_BYTES", "READ_CACHE_BUDGET", "ReadCacheBudget"]

DEFAULT_READ_CACHE_BYTES = 256 << 20


class EmptiableCache(Protocol):
    def clear(self) -> None: ...


class ReadCacheBudget:
    """The bytes the read caches of every log hold, and their bound. Thread-safe."""

    def __init__(self, max_bytes: int = DEFAULT_READ_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        # id(cache) -> (weak reference to it, the bytes it holds), least recently grown first
        self._held: OrderedDict[int, tuple[weakref.ref[EmptiableCache], int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """What the caches hold together."""
        return self._bytes

    def report(self, cache: EmptiableCache, held_bytes: int) -> None:
        """``cache`` holds ``held_bytes`` now (after a growth or a clear). Past the budget, the caches
        that grew least recently (never ``cache``) are emptied."""
        victims = []
        key = id(cache)
        with self._lock:
            old = self._held.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if held_bytes > 0:
                self._held[key] = (weakref.ref(cache), held_bytes)
                self._bytes += held_bytes
            while self._bytes > self.max_bytes and len(self._held) > 1:
                oldest = next(iter(self._held))
                if oldest == key:
                    break
                ref, n = self._held.pop(oldest)
                self._bytes -= n
                victim = ref()
                if victim is not None:
                    victims.append(victim)
        for victim in victims:  # outside the lock: a clear reports here again
            victim.clear()


#: the daemon's one budget, which every log's cache reports to
READ_CACHE_BUDGET = ReadCacheBudget()

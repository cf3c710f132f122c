"""Producer ids for idempotent producers: from the clock (milliseconds x 1024, strictly increasing in
one run), so they stay unique across restarts without a file."""

from __future__ import annotations

import threading
import time

__all__ = ["ProducerIds"]


class ProducerIds:
    """Unique producer ids for this data dir (time-based, strictly increasing in this process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, int(time.time() * 1000) << 10)
            return self._last

"""The background count of view totals (:mod:`seglogfs.segment_totals`) of segments nobody counted:
data seglogfs did not write, segments recovery scanned, a cleaner's replacements, a totals file found
stale. One daemon thread for the process, oldest segment first, a step of :data:`STEP_BATCHES`
batches at a time (so appends and reads that need the same segment's lock wait for a step at most).
Each log's progress is in :meth:`progress` (the mount's ``info``) and the log.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Protocol

from . import hidden_totals
from .hidden_totals import HiddenLog
from .segment import LogSegment

__all__ = ["STEP_BATCHES", "CountedLog", "TotalsCounter", "counted_bytes", "counter", "progress"]

log = logging.getLogger(__name__)

STEP_BATCHES = 50_000
_IDLE_S = 0.5  # how often the thread looks for segments left uncounted (a cleaner's new ones...)
#: a look at every log at least this often, even while new logs keep waking the thread
_EVERY_LOG_AT_LEAST_S = 2.0


class CountedLog(HiddenLog, Protocol):
    """What the counter reads of a log (a :class:`~seglogfs.log.Log`)."""

    def save_sealed_totals(self, segment: LogSegment, *, again: bool = False) -> None: ...


class TotalsCounter:
    """Counts the segments of the logs it watches until each is counted to its end."""

    def __init__(self) -> None:
        self._logs: weakref.WeakSet[CountedLog] = weakref.WeakSet()
        #: logs watched since the thread last looked: a wake looks at these only (a pass over every
        #: log at each of 5,000 opens made a start quadratic: 34 s instead of 5)
        self._fresh: list[weakref.ref[CountedLog]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, lg: CountedLog) -> None:
        """Count ``lg``'s segments from now on (starts the thread on first use)."""
        with self._lock:
            self._logs.add(lg)
            self._fresh.append(weakref.ref(lg))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="seglogfs-totals", daemon=True)
                self._thread.start()
        self._wake.set()

    def unwatch(self, lg: CountedLog) -> None:
        """Stop counting ``lg`` (it is closing)."""
        with self._lock:
            self._logs.discard(lg)

    def _run(self) -> None:
        every_log_looked_at = time.monotonic()
        while True:
            woken = self._wake.wait(_IDLE_S)
            self._wake.clear()
            now = time.monotonic()
            every_log = not woken or now - every_log_looked_at >= _EVERY_LOG_AT_LEAST_S
            with self._lock:
                if every_log:
                    logs = list(self._logs)
                    every_log_looked_at = now
                else:  # new logs: those only
                    logs = [lg for ref in self._fresh if (lg := ref()) is not None and lg in self._logs]
                self._fresh.clear()
            for lg in logs:
                try:
                    if self._count(lg):
                        hidden_totals.count_log(lg)  # read_committed's part: once the totals are whole
                except Exception:  # a log's trouble (its files gone under it) stops no other
                    log.exception("%s: counting the view totals failed", lg.name)

    def _count(self, lg: CountedLog) -> bool:
        """Count what ``lg``'s segments lack; True when every one is counted to its end."""
        started, counted, whole = None, 0, True
        for segment in lg.segments:
            totals = segment.totals
            while not totals.counted(segment.size):
                if lg.closed or lg not in self._logs:
                    return False
                if started is None:
                    started = time.monotonic()
                    todo = sum(max(s.size - s.totals.frontier.position, 0) for s in lg.segments)
                    log.info("%s: counting the view totals of %d bytes of segments", lg.name, todo)
                before = totals.frontier.position
                totals.catch_up(max_batches=STEP_BATCHES)
                counted += totals.frontier.position - before
                if totals.frontier.position == before:
                    whole = False
                    break  # a torn tail being written: the next look goes on
            if segment.offset_limit is not None and totals.counted(segment.size):
                lg.save_sealed_totals(segment)  # a sealed one: for the next start
        if started is not None and counted > 0:
            log.info(
                "%s: view totals counted (%d bytes of segments in %.2fs)",
                lg.name, counted, time.monotonic() - started,
            )
        return whole


_COUNTER = TotalsCounter()


def counter() -> TotalsCounter:
    """The process's counter."""
    return _COUNTER


def counted_bytes(lg: CountedLog) -> int:
    """The bytes of ``lg``'s segment files its view totals cover (it grows as counting goes on), minus
    the segments whose read_committed part (:mod:`seglogfs.hidden_totals`) is left to count: a change
    of it is a change of the views' sizes."""
    return sum(min(s.totals.frontier.position, s.size) for s in lg.segments) - hidden_totals.pending(lg)


def progress(lg: CountedLog) -> dict[str, int | bool]:
    """``{"counted_bytes", "bytes", "counting"}``: how much of ``lg``'s segments' files the totals cover
    (``counting`` also while read_committed's part is left to count)."""
    total = sum(s.size for s in lg.segments)
    counted = sum(min(s.totals.frontier.position, s.size) for s in lg.segments)
    counting = counted < total or hidden_totals.pending(lg) != 0
    return {"counted_bytes": counted, "bytes": total, "counting": counting}

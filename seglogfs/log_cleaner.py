"""The log cleaner of a data dir (Kafka's ``LogCleaner`` and ``LogCleanerManager``): which log to
clean next, the cleaner threads, ``cleaner-offset-checkpoint`` and each log's cleaning state.

A round picks the dirtiest compacted log: the one with the largest dirty ratio among those over their
``min.cleanable.dirty.ratio`` (strictly, as Kafka compares) or with records older than
``max.compaction.lag.ms`` still dirty. A log being cleaned is skipped by the other threads. A log
whose clean fails (a damaged batch, or an unexpected error) is left alone until restart, as Kafka
marks it uncleanable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import read_offset_checkpoint_or_empty, write_offset_checkpoint
from .cleaner import CleanAborted, Cleaner, CleanRange, CleanResult, cleanable_range
from .cleaner_config import CleanerConfig
from .errors import SeglogError
from .log import Log
from .log_files import CLEANER_OFFSET_CHECKPOINT
from .segment_swap import crash_point

__all__ = ["LogCleaner", "Throttler"]

log = logging.getLogger("seglogfs.cleaner")


class Throttler:
    """A token bucket over the cleaner's reads and writes: ``log.cleaner.io.max.bytes.per.second``
    shared by every cleaner thread. ``sleep`` waits (interruptibly: the stop event's wait)."""

    def __init__(
        self, rate: float, *, sleep: Callable[[float], object], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.Lock()
        self._available = rate  # one second's worth to begin with
        self._last = clock()

    def __call__(self, nbytes: int) -> None:
        if self.rate == float("inf") or nbytes <= 0:
            return
        with self._lock:
            now = self._clock()
            self._available = min(self._available + (now - self._last) * self.rate, self.rate)
            self._last = now
            self._available -= nbytes
            wait = -self._available / self.rate if self._available < 0 else 0.0
        if wait > 0:
            self._sleep(wait)


@dataclass(slots=True)
class _LogState:
    last_clean_ms: int | None = None
    passes: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    records_removed: int = 0
    uncleanable: str | None = None
    last_error: str | None = None  # the last clean that failed for an I/O error (retried)


class LogCleaner:
    """The cleaner of the logs ``logs()`` returns (a LogManager's). See the module docstring."""

    def __init__(
        self,
        data_dir: Path,
        config: CleanerConfig,
        logs: Callable[[], dict[str, Log]],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self._logs = logs
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._in_progress: set[str] = set()
        self._states: dict[str, _LogState] = {}
        path = data_dir / CLEANER_OFFSET_CHECKPOINT
        self._checkpoints: dict[tuple[str, int], int] = read_offset_checkpoint_or_empty(path)
        self.throttle = Throttler(config.io_max_bytes_per_second, sleep=self._stop.wait)
        self.peak_map_bytes = 0

    # ------------------------------------------------------------------ threads

    def start(self) -> None:
        """Start ``log.cleaner.threads`` threads, each cleaning the dirtiest log, else sleeping
        ``log.cleaner.backoff.ms``."""
        if not self.config.enable or self._threads:
            return
        self._stop.clear()
        for i in range(self.config.threads):
            thread = threading.Thread(target=self._run, name=f"seglogfs-cleaner-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop the threads; a clean in progress is abandoned (its ``.cleaned`` files removed)."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _run(self) -> None:
        cleaner = self._new_cleaner()
        while not self._stop.is_set():
            try:
                result = self._clean_dirtiest(cleaner, None)
            except Exception:  # a bug: logged, and the thread goes on after the backoff
                log.exception("the log cleaner failed")
                result = None
            if result is None:
                self._stop.wait(self.config.backoff_ms / 1000)

    def _new_cleaner(self) -> Cleaner:
        return Cleaner(
            self.config.map_bytes_per_thread,
            self.config.io_buffer_load_factor,
            io_buffer_size=self.config.io_buffer_size,
            throttle=self.throttle,
            should_stop=self._stop.is_set,
        )

    # ------------------------------------------------------------------ one round

    def clean_once(self, now_ms: int | None = None) -> CleanResult | None:
        """Clean the dirtiest log once, in this thread; None when no log needs it."""
        return self._clean_dirtiest(self._new_cleaner(), now_ms)

    def _clean_dirtiest(self, cleaner: Cleaner, now_ms: int | None) -> CleanResult | None:
        now = int(self._clock() * 1000) if now_ms is None else now_ms
        with self._lock:
            chosen = self._dirtiest(now)
            if chosen is None:
                return None
            lg, span = chosen
            self._in_progress.add(lg.name)
        try:
            result = cleaner.clean(lg, span, now)
            # recorded (checkpoint moved) before the log is free again: another thread picking it up
            # in between would find the old checkpoint and clean the same range again
            self._record(lg, result, now)
        except CleanAborted:
            return None
        except OSError as exc:
            # The disk's fault (ENOSPC, EIO...), not the log's: nothing was swapped in (the cleaner
            # removed its .cleaned files), and a later round tries again.
            if not (lg.read_only or lg.closed):
                self._state(lg.name).last_error = str(exc)
                log.warning("the clean of log %s failed, will retry after the backoff: %s", lg.name, exc)
            return None
        except SeglogError as exc:
            if lg.read_only or lg.closed:
                return None
            self._state(lg.name).uncleanable = str(exc)
            log.error("log %s is uncleanable until restart: %s", lg.name, exc)
            return None
        except Exception as exc:
            # A bug: as Kafka does (LogCleaningException), the log is left alone until restart, so
            # that it is not picked again as the dirtiest and the other logs still get cleaned.
            if not (lg.read_only or lg.closed):
                self._state(lg.name).uncleanable = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            with self._lock:
                self._in_progress.discard(lg.name)
            self.peak_map_bytes = max(self.peak_map_bytes, cleaner.peak_map_bytes)
        return result

    def _dirtiest(self, now_ms: int) -> tuple[Log, CleanRange] | None:
        best: tuple[Log, CleanRange] | None = None
        for name, lg in sorted(self._logs().items()):
            if name in self._in_progress or self._state(name).uncleanable or not self._compacted(lg):
                continue
            span = cleanable_range(lg, self._checkpoints.get((lg.topic, lg.partition)), now_ms)
            if span.cleanable_bytes <= 0:
                continue
            if not (span.must_clean_now or span.dirty_ratio > lg.config.min_cleanable_dirty_ratio):
                continue
            if best is None or span.dirty_ratio > best[1].dirty_ratio:
                best = (lg, span)
        return best

    @staticmethod
    def _compacted(lg: Log) -> bool:
        return "compact" in lg.config.cleanup_policy and not lg.read_only

    def _record(self, lg: Log, result: CleanResult, now_ms: int) -> None:
        state = self._state(lg.name)
        state.last_error = None
        state.last_clean_ms = now_ms
        state.passes += 1
        state.bytes_in += result.bytes_in
        state.bytes_out += result.bytes_out
        state.records_removed += result.records_removed
        with self._lock:
            self._checkpoints[(lg.topic, lg.partition)] = result.end_offset
            try:
                self._write_checkpoint()
            except OSError as exc:
                # The clean is in place; the next checkpoint written saves this entry too. Until then a
                # restart maps the cleaned range again, which costs time and changes no record.
                state.last_error = f"{CLEANER_OFFSET_CHECKPOINT}: {exc}"
                log.warning("cleaned log %s, but could not write %s: %s", lg.name, CLEANER_OFFSET_CHECKPOINT,
                            exc)  # fmt: skip
                return
        crash_point(f"wrote {CLEANER_OFFSET_CHECKPOINT}")

    def _write_checkpoint(self) -> None:
        write_offset_checkpoint(self.data_dir / CLEANER_OFFSET_CHECKPOINT, self._checkpoints)

    def _state(self, name: str) -> _LogState:
        return self._states.setdefault(name, _LogState())

    # ------------------------------------------------------------------ reporting

    def first_dirty_offset(self, lg: Log) -> int | None:
        """The log's ``cleaner-offset-checkpoint`` entry (None when it has none)."""
        return self._checkpoints.get((lg.topic, lg.partition))

    def state(self, lg: Log, now_ms: int | None = None) -> dict[str, object]:
        """The log's cleaning state, JSON-ready (for ``info``)."""
        now = int(self._clock() * 1000) if now_ms is None else now_ms
        state = self._state(lg.name)
        out: dict[str, object] = {"compacted": "compact" in lg.config.cleanup_policy}
        if out["compacted"]:
            span = cleanable_range(lg, self.first_dirty_offset(lg), now)
            out |= {
                "dirty_ratio": round(span.dirty_ratio, 6),
                "cleanable": span.cleanable_bytes > 0
                and (span.must_clean_now or span.dirty_ratio > lg.config.min_cleanable_dirty_ratio),
                "first_dirty_offset": span.first_dirty_offset,
                "first_uncleanable_offset": span.first_uncleanable_offset,
            }
        out |= {
            "last_clean_ms": state.last_clean_ms,
            "passes": state.passes,
            "bytes_in": state.bytes_in,
            "bytes_out": state.bytes_out,
            "records_removed": state.records_removed,
            "uncleanable": state.uncleanable,
            "last_error": state.last_error,
        }
        return out

"""Exceptions raised by the seglogfs engine.

Every error that concerns bytes on disk names the file and the byte position, so an operator can
go straight to it with ``seglogfs dump`` or ``xxd``.
"""

from __future__ import annotations

from pathlib import Path


class SeglogError(Exception):
    """Base class of every seglogfs engine error."""


class CorruptRecordError(SeglogError):
    """A record batch failed validation (bad CRC, impossible length, truncated records...)."""

    def __init__(self, message: str, path: str | Path | None = None, position: int | None = None):
        self.path = str(path) if path is not None else None
        self.position = position
        where = ""
        if self.path is not None:
            where = f" in {self.path}"
            if position is not None:
                where += f" at position {position}"
        super().__init__(f"{message}{where}")

    def at(self, path: str | Path | None, base_position: int = 0) -> CorruptRecordError:
        """The same error located in ``path``, its position shifted by ``base_position``."""
        position = None if self.position is None else self.position + base_position
        bare = str(self).split(" in ", 1)[0] if self.path else str(self)
        return CorruptRecordError(bare, path, position)


class CorruptIndexError(SeglogError):
    """An offset or time index file is inconsistent (wrong length, entries out of order...)."""


class OffsetOutOfRangeError(SeglogError, LookupError):
    """An offset outside [log start offset, log end offset)."""


class TimestampNotFoundError(SeglogError, LookupError):
    """No record has a timestamp at or after the requested one."""


class RecordTooLargeError(SeglogError):
    """A batch or record larger than ``max.message.bytes``.

    ``index`` is the position of the record in the call when that record alone is too large.
    """

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


class InvalidRecordError(SeglogError, ValueError):
    """Records handed to append are malformed (wrong types, bad JSON line...)."""


class InvalidLogNameError(SeglogError, ValueError):
    """A log directory name outside Kafka's rules (1-249 chars of [A-Za-z0-9._-])."""


class LogLockedError(SeglogError):
    """Another process owns this log for writing (``path``: the locked directory, ``pid``: the
    holder's, when known; set by :mod:`seglogfs.lock`)."""

    path: str
    pid: int | None


class ReadOnlyLogError(SeglogError):
    """A write to a log opened read-only."""


class LogOfflineError(SeglogError):
    """A log that went offline while open: its directory or active segment vanished or was replaced
    under the process (the message says which), so nothing more can be appended or flushed to it."""


class ConfigError(SeglogError, ValueError):
    """An invalid configuration value; the message names the key, the value and the reason."""

    def __init__(self, key: str, value: object, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"invalid config {key}={value!r}: {reason}")


class IndexOffsetOverflowError(SeglogError):
    """An offset does not fit as a 32-bit offset relative to its segment's base."""


class CloseError(SeglogError):
    """Closing a data dir failed for some logs (or its checkpoints); every other log was closed.

    ``failures`` maps each log name (or ``"checkpoints"``) to its error.
    """

    def __init__(self, data_dir: object, failures: dict[str, BaseException]):
        self.failures = failures
        details = "; ".join(f"{name}: {exc}" for name, exc in failures.items())
        super().__init__(f"{data_dir}: not closed cleanly (no clean-shutdown marker): {details}")


class SegmentFileMissingError(SeglogError, FileNotFoundError):
    """A segment file the engine had open (and closed to save descriptors) is gone when reopened:
    removed or renamed behind the daemon's back. Carries ``errno.ENOENT`` and the path."""


class ProducerFencedError(SeglogError):
    """A batch from an idempotent producer with an epoch older than the one the log knows (Kafka's
    INVALID_PRODUCER_EPOCH)."""


class OutOfOrderSequenceError(SeglogError):
    """A batch from an idempotent producer whose first sequence does not follow that producer's last
    one (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER): nothing of it is appended."""

"""Reporting a fault that persists: once when it appears or changes, once when it clears.

Periodic work (retention, ``flush.ms``, checkpoints, the watchdog's ping) meets the same fault every
round while a disk is full or read-only; logging it each time would bury everything else.
"""

from __future__ import annotations

import logging

from .errors import SeglogError

__all__ = ["PersistentFault"]


class PersistentFault:
    """The state of one recurring piece of work: logs a failure when it appears or its message
    changes, and a recovery once when the work succeeds again."""

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what = what
        self.logger = logger
        self.current: str | None = None  # the message of the fault being reported, if any

    def failed(self, exc: BaseException) -> None:
        """The work failed with ``exc``: log it unless it is the fault already reported.

        An ``OSError`` or engine error is logged as its message; anything else is a bug, logged with
        its traceback (also only once per change).
        """
        expected = isinstance(exc, (OSError, SeglogError))
        message = str(exc) if expected else f"{type(exc).__name__}: {exc}"
        if message == self.current:
            return
        self.current = message
        if expected:
            self.logger.error("%s failed: %s (logged again when this changes)", self.what, message)
        else:
            self.logger.error("%s failed (logged again when this changes)", self.what, exc_info=exc)

    def succeeded(self) -> None:
        """The work succeeded: say so once if it had been failing."""
        if self.current is not None:
            self.logger.info("%s works again (it failed with: %s)", self.what, self.current)
            self.current = None

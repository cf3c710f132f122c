"""Fetch long polls woken by appends from any path (the mount, a Kafka client, the engine API):
the LogManager's ``on_append`` hook, called in the appending thread, hands the log's name to the
listener's event loop, which wakes the polls waiting on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from seglogfs.log import Log

__all__ = ["AppendWaiters"]


class AppendWaiters:
    """The long polls of one event loop, by log name."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[str, set[asyncio.Event]] = {}

    def appended(self, log_obj: Log) -> None:
        """The LogManager's ``on_append`` hook: any thread, under the log's lock, so it only schedules."""
        if log_obj.name in self._waiting:  # a dict lookup under the GIL: no lock needed for a hint
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._wake, log_obj.name)

    def _wake(self, name: str) -> None:
        for event in self._waiting.get(name, ()):
            event.set()

    @contextlib.contextmanager
    def watching(self, names: Iterable[str]) -> Iterator[asyncio.Event]:
        """An event set by the next append to one of the logs ``names``. Watch before reading, so an
        append between the read and the wait is not missed."""
        event = asyncio.Event()
        names = list(names)
        for name in names:
            self._waiting.setdefault(name, set()).add(event)
        try:
            yield event
        finally:
            for name in names:
                waiting = self._waiting.get(name)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._waiting[name]

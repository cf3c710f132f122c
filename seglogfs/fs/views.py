"""The streams behind ``records``, ``records.jsonl``, ``from/<n>`` and ``from/<n>.jsonl``: one
:class:`ValueStream` per log, format and first offset, shared by the getattr and the opens of a path
(so the size the kernel was told and the bytes a reader gets come from the same positions).

``records`` is the whole-log stream in the values format. Each log's ``fs.isolation.level`` chooses
what its streams show (a change of it makes new streams). A path whose stream of the old level someone
still has open goes on being served by it, size and new opens included, as a stream keeps its hole:
an open reader's positions are that stream's, and ``tail -f`` would take a smaller size from the new
one for a truncation and read the old one from its start. Once none is open, the path switches (a
change of its size, counted in :meth:`StreamViews.rebases`). The whole-log streams stay for as long as
their log, the ``from/<n>`` ones in a small LRU: a stream dropped from it stays alive for the readers
that hold it, and a new one gives the same positions (they count from record n).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from seglogfs.log import Log
from seglogfs.read_committed import isolation_level
from seglogfs.stream_format import StreamFormat
from seglogfs.value_stream import ValueStream

#: ``from/<n>`` streams kept (each holds a batch table per segment it has read)
FROM_STREAMS_KEPT = 64

_Key = tuple[str, int | None, str, str]  # log name, first offset, format, isolation level


class StreamViews:
    """The streams of the views other than ``records``, by (log, first offset or None, format)."""

    def __init__(self, kept: int = FROM_STREAMS_KEPT) -> None:
        self._kept = kept
        self._streams: OrderedDict[_Key, ValueStream] = OrderedDict()
        self._lock = threading.Lock()
        #: log name -> rebases of the streams dropped at a switch of isolation level, plus one a switch
        self._retired: dict[str, int] = {}

    def stream(self, lg: Log, first_offset: int | None, fmt: StreamFormat) -> ValueStream:
        """The stream of ``lg`` in ``fmt`` from ``first_offset`` (None: from the log start, kept for
        as long as the log is); one of an older isolation level while a reader has it open."""
        isolation = isolation_level(lg.config.fs_isolation_level)
        key = (lg.name, first_offset, fmt.name, isolation)
        with self._lock:
            stream = self._streams.get(key)
            if stream is None or stream.log is not lg:
                # none yet at this level: the level may have changed since this path was last asked
                held = self._held(lg, first_offset, fmt, isolation)
                if held is not None:
                    self._streams.move_to_end(held)
                    return self._streams[held]
                stream = ValueStream(lg, first_offset=first_offset, fmt=fmt, isolation=isolation)
                self._streams[key] = stream
            self._streams.move_to_end(key)
            if len(self._streams) > self._kept:
                self._evict()
            return stream

    def _held(self, lg: Log, first_offset: int | None, fmt: StreamFormat, isolation: str) -> _Key | None:
        """The key of a stream of this path at another isolation level that a reader has open; the
        others of another level are dropped, their path counted as switched (the caller holds the lock)."""
        held, path = None, (lg.name, first_offset, fmt.name)
        for key in [k for k in self._streams if k[:3] == path and k[3] != isolation]:
            if self._streams[key].readers and self._streams[key].log is lg:
                held = key
            else:
                self._retire(key)
        return held

    def _retire(self, key: _Key) -> None:
        """Drop the stream of ``key``, its path switched to another isolation level: the log's
        :meth:`rebases` still counts its rebases, and one more (the path's size changed)."""
        stream = self._streams.pop(key)
        self._retired[key[0]] = self._retired.get(key[0], 0) + stream.rebases + 1

    def open_stream(self, lg: Log, first_offset: int | None, fmt: StreamFormat) -> ValueStream | None:
        """The kept stream of ``lg`` in ``fmt`` from ``first_offset`` if a reader has it open (of the
        current isolation level, or of an older one still read), else None."""
        with self._lock:
            for key, stream in self._streams.items():
                if key[:3] == (lg.name, first_offset, fmt.name) and stream.log is lg and stream.readers:
                    return stream
            return None

    def rebases(self, name: str) -> int:
        """How many times the streams of log ``name`` dropped their hole (their sizes shrank), plus the
        times one of its paths switched to a new isolation level: changes the kernel's cached sizes must
        hear of (:mod:`seglogfs.fs.invalidation`). A stream of an older level that its last reader
        closed is dropped here, so the notifier's next check switches its path."""
        with self._lock:
            for key, stream in list(self._streams.items()):
                level = stream.log.config.fs_isolation_level
                if key[0] == name and key[3] != level and not stream.readers:
                    self._retire(key)
            shrank = sum(stream.rebases for key, stream in self._streams.items() if key[0] == name)
            return shrank + self._retired.get(name, 0)

    def forget(self, lg: Log, first_offset: int) -> None:
        """Drop the streams from ``first_offset`` (retention removed it: the path is gone)."""
        with self._lock:
            for key in [k for k in self._streams if k[0] == lg.name and k[1] == first_offset]:
                del self._streams[key]

    def _evict(self) -> None:
        """Drop the least recently used ``from/<n>`` stream nobody has open (the whole-log ones stay;
        an open one must stay findable: see :meth:`open_stream`)."""
        for key, stream in self._streams.items():
            if key[1] is not None and not stream.readers:
                del self._streams[key]
                return

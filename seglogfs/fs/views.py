"""The streams behind ``records``, ``records.jsonl``, ``from/<n>`` and ``from/<n>.jsonl``: one
:class:`ValueStream` per log, format and first offset, shared by the getattr and the opens of a path
(so the size the kernel was told and the bytes a reader gets come from the same positions).

``records`` is the whole-log stream in the values format. Each log's ``fs.isolation.level`` chooses
what its streams show (a change of it makes new streams). The whole-log streams stay for as long as
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

    def stream(self, lg: Log, first_offset: int | None, fmt: StreamFormat) -> ValueStream:
        """The stream of ``lg`` in ``fmt`` from ``first_offset`` (None: from the log start, kept for
        as long as the log is)."""
        isolation = isolation_level(lg.config.fs_isolation_level)
        key = (lg.name, first_offset, fmt.name, isolation)
        with self._lock:
            stream = self._streams.get(key)
            if stream is None or stream.log is not lg:
                stream = ValueStream(lg, first_offset=first_offset, fmt=fmt, isolation=isolation)
                self._streams[key] = stream
            self._streams.move_to_end(key)
            if len(self._streams) > self._kept:
                self._evict()
            return stream

    def open_stream(self, lg: Log, first_offset: int | None, fmt: StreamFormat) -> ValueStream | None:
        """The kept stream of ``lg`` in ``fmt`` from ``first_offset`` if a reader has it open, else None."""
        with self._lock:
            key = (lg.name, first_offset, fmt.name, lg.config.fs_isolation_level)
            stream = self._streams.get(key)
            return stream if stream is not None and stream.log is lg and stream.readers else None

    def rebases(self, name: str) -> int:
        """How many times the streams of log ``name`` dropped their hole (their sizes shrank): a
        change the kernel's cached sizes must hear of (:mod:`seglogfs.fs.invalidation`)."""
        with self._lock:
            return sum(stream.rebases for key, stream in self._streams.items() if key[0] == name)

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

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

Generations: once the log cleaner replaced segments a path's stream counted, that stream no longer
shows the log as it is to a new reader. The next open then gets a new stream (a generation) of the
log as it is, whose first positions are hole so that it ends where the old one ends: the kernel keeps
one size per path, and that size stays right for both, so the readers of the old generation
(``tail -f``) go on with their positions while every new open sees the compacted log. The path's size
is the largest end of its generations; an old generation goes once its last reader closed, and the
current one drops its hole only when nothing else holds the path (:meth:`ValueStream.size`'s quiet
rule), and only in a getattr: an open gets the size the kernel cached, so its positions stay those
of that size.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from seglogfs.fs.mount_config import MountConfigs
from seglogfs.log import Log
from seglogfs.stream_format import StreamFormat
from seglogfs.views.value_stream import StreamReader, ValueStream

#: ``from/<n>`` streams kept (each holds a batch table per segment it has read)
FROM_STREAMS_KEPT = 64

_Key = tuple[str, int | None, str, str]  # log name, first offset, format, isolation level


class StreamViews:
    """The streams of the views, by (log, first offset or None, format, isolation level): the current
    generation of each, and the older generations some reader still has open."""

    def __init__(self, configs: MountConfigs | None = None, kept: int = FROM_STREAMS_KEPT) -> None:
        self._configs = configs if configs is not None else MountConfigs()  # each log's fs.isolation.level
        self._kept = kept
        self._streams: OrderedDict[_Key, ValueStream] = OrderedDict()
        #: older generations of a key that a reader still has open, oldest first
        self._older: dict[_Key, list[ValueStream]] = {}
        self._lock = threading.Lock()
        #: log name -> rebases of the streams dropped (a switch of isolation level, an older
        #: generation closed), plus one per switch of level
        self._retired: dict[str, int] = {}

    def size(self, lg: Log, first_offset: int | None, fmt: StreamFormat, *,
             held_only: bool = False) -> int | None:
        """The size of the path: the largest end of its generations. With ``held_only`` (``from/<n>``
        below the log start), None unless a reader has one of its streams open."""
        generations = self._select(lg, first_offset, fmt, held_only)
        if generations is None:
            return None
        # counted outside the lock: a first count of a big log holds no other path
        return max(stream.size() for stream in generations[1])

    def reader(self, lg: Log, first_offset: int | None, fmt: StreamFormat, *,
               held_only: bool = False) -> StreamReader | None:
        """A reader of the path for one open file: of a new generation when the current one no longer
        shows the log as it is (see the module doc). With ``held_only``, None unless a reader has one
        of its streams open."""
        selected = self._select(lg, first_offset, fmt, held_only)
        if selected is None:
            return None
        key, generations = selected
        end = max(stream.size(rebase=False) for stream in generations)  # what the kernel was told
        current = generations[-1]
        if current.outdated:
            fresh = ValueStream(lg, first_offset=first_offset, fmt=fmt, isolation=current.isolation,
                                end_at=end)
            with self._lock:
                if self._streams.get(key) is current:
                    self._older.setdefault(key, []).append(current)  # dropped at once if nobody reads it
                    self._streams[key] = fresh
                    self._generations(key)
                current = self._streams.get(key, fresh)
        reader = current.reader()
        with self._lock:  # replaced meanwhile by another open's new generation: keep it while read
            if key in self._streams and self._streams[key] is not current:
                older = self._older.setdefault(key, [])
                if all(stream is not current for stream in older):
                    older.append(current)
                self._generations(key)
        return reader

    def _select(self, lg: Log, first_offset: int | None, fmt: StreamFormat,
                held_only: bool) -> tuple[_Key, list[ValueStream]] | None:
        """The key of the path and its generations (see :meth:`_generations`); None with ``held_only``
        when no reader has one of its streams open."""
        with self._lock:
            key = self._held_key(lg, first_offset, fmt) if held_only else self._key(lg, first_offset, fmt)
            if key is None:
                return None
            return key, self._generations(key)

    def _key(self, lg: Log, first_offset: int | None, fmt: StreamFormat) -> _Key:
        """The key of the path's current stream, made if missing (the caller holds the lock)."""
        isolation = self._configs.of(lg.name).isolation
        key = (lg.name, first_offset, fmt.name, isolation)
        stream = self._streams.get(key)
        if stream is None or stream.log is not lg:
            # none yet at this level: the level may have changed since this path was last asked
            held = self._held(lg, first_offset, fmt, isolation)
            if held is not None:
                self._streams.move_to_end(held)
                return held
            self._older.pop(key, None)
            self._streams[key] = ValueStream(lg, first_offset=first_offset, fmt=fmt, isolation=isolation)
        self._streams.move_to_end(key)
        if len(self._streams) > self._kept:
            self._evict()
        return key

    def _held_key(self, lg: Log, first_offset: int | None, fmt: StreamFormat) -> _Key | None:
        """The key of a stream of the path that a reader has open (any level), else None."""
        for key, stream in self._streams.items():
            if key[:3] == (lg.name, first_offset, fmt.name) and stream.log is lg and self._read(key):
                return key
        return None

    def _generations(self, key: _Key) -> list[ValueStream]:
        """The streams of ``key`` still read, oldest first, then the current one (which holds its
        positions while an older one is read); the older ones nobody reads are dropped."""
        current = self._streams[key]
        older = [stream for stream in self._older.get(key, ()) if stream.readers]
        dropped = len(self._older.get(key, ())) - len(older)
        if dropped:
            self._retired[key[0]] = self._retired.get(key[0], 0) + sum(
                stream.rebases for stream in self._older[key] if not stream.readers)
        if older:
            self._older[key] = older
        else:
            self._older.pop(key, None)
        current.hold_positions = bool(older)
        return [*older, current]

    def _read(self, key: _Key) -> bool:
        """Whether a reader has a stream of ``key`` open (the current one or an older generation)."""
        return bool(self._streams[key].readers) or any(s.readers for s in self._older.get(key, ()))

    def _held(self, lg: Log, first_offset: int | None, fmt: StreamFormat, isolation: str) -> _Key | None:
        """The key of a stream of this path at another isolation level that a reader has open; the
        others of another level are dropped, their path counted as switched (the caller holds the lock)."""
        held, path = None, (lg.name, first_offset, fmt.name)
        for key in [k for k in self._streams if k[:3] == path and k[3] != isolation]:
            if self._read(key) and self._streams[key].log is lg:
                held = key
            else:
                self._retire(key)
        return held

    def _retire(self, key: _Key) -> None:
        """Drop the streams of ``key``, its path switched to another isolation level: the log's
        :meth:`rebases` still counts their rebases, and one more (the path's size changed)."""
        streams = [self._streams.pop(key), *self._older.pop(key, ())]
        self._retired[key[0]] = self._retired.get(key[0], 0) + sum(s.rebases for s in streams) + 1

    def rebases(self, name: str) -> int:
        """How many times the streams of log ``name`` dropped their hole (their sizes shrank), plus the
        times one of its paths switched to a new isolation level: changes the kernel's cached sizes must
        hear of (:mod:`seglogfs.fs.invalidation`). A stream of an older level that its last reader
        closed is dropped here, so the notifier's next check switches its path."""
        with self._lock:
            for key, stream in list(self._streams.items()):
                level = self._configs.of(stream.log.name).isolation
                if key[0] == name and key[3] != level and not self._read(key):
                    self._retire(key)
            for key in [k for k in self._older if k[0] == name and k in self._streams]:
                self._generations(key)  # old generations closed since: the current one may rebase
            # a rebase due counts as one already: the kernel must ask for the size that drops it
            shrank = sum(stream.rebases + stream.rebase_due()
                         for key, stream in self._streams.items() if key[0] == name)
            shrank += sum(s.rebases for key, older in self._older.items() if key[0] == name for s in older)
            return shrank + self._retired.get(name, 0)

    def forget(self, lg: Log, first_offset: int) -> None:
        """Drop the streams from ``first_offset`` (retention removed it: the path is gone)."""
        with self._lock:
            for key in [k for k in self._streams if k[0] == lg.name and k[1] == first_offset]:
                del self._streams[key]
                self._older.pop(key, None)

    def _evict(self) -> None:
        """Drop the least recently used ``from/<n>`` stream nobody has open (the whole-log ones stay;
        an open one must stay findable: see :meth:`size` with ``held_only``)."""
        for key in self._streams:
            if key[1] is not None and not self._read(key):
                del self._streams[key]
                self._older.pop(key, None)
                return

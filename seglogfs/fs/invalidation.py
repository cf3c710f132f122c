"""Keeping the kernel's caches honest under long timeouts: the mount's invalidation notifier.

The mount runs with hour-long entry/attribute timeouts (see :func:`seglogfs.fs.mount.mount_options`), so
the kernel answers ``stat`` and re-reads of immutable files by itself. Whatever changes must then be
invalidated: the files that grow (``records``, ``info``, every kind whose :class:`FileKind` says
``grows``), the active segment's files, files of segments that were deleted, compacted or sealed, the
``by-offset/<n>`` of offsets that retention or compaction removed, ``by-time/`` links, and the root
when logs come and go. Directory listings need nothing: the mount never lets the kernel cache readdir.

A :class:`Notifier` thread compares each log's :class:`LogState` every :data:`POLL_INTERVAL_S` (or at
once when :meth:`Notifier.poke` is called) and calls libfuse's ``fuse_invalidate_path`` for the paths
the kernel may hold of the logs that changed. The paths come from :class:`PathNotes`, filled by the
operations' getattr: the kernel only caches what it asked for. Never call the invalidation from inside a
request: libfuse warns that invalidating an inode from a request on that inode can deadlock.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import mfusepy

from seglogfs.fs.files import FileKind
from seglogfs.fs.paths import Kind, Node
from seglogfs.log import Log
from seglogfs.log_dir_files import LogDirFiles
from seglogfs.log_files import parse_offset_file_name, sealed_segment_file
from seglogfs.log_manager import LogManager

log = logging.getLogger("seglogfs.fs")

#: how often the notifier looks for changes: `tail -f` polls fstat every second, so a new record shows
#: within about a second and a quarter, and `stat` is never staler than this
POLL_INTERVAL_S = 0.25
#: remembered paths per log and kind: a path dropped past this bound may stay stale in the kernel until
#: it forgets the inode or the attribute timeout runs out (its reads stay right: see the module doc)
MAX_NOTED = 4096
#: remembered by-offset offsets per log; past it the notes keep only the lowest offset asked for
MAX_NOTED_OFFSETS = 1 << 16

#: ``invalidate(path)``: 0 when the kernel dropped what it held, a negative errno (-ENOENT: libfuse
#: knows no such path, nothing is cached) otherwise
Invalidate = Callable[[str], int]


def libfuse_invalidator() -> Invalidate:
    """``fuse_invalidate_path`` on the mount being served; call it from a request (libfuse's ``init``),
    where ``fuse_get_context()`` names the ``struct fuse``."""
    libfuse = mfusepy._libfuse
    function = libfuse.fuse_invalidate_path  # libfuse >= 3.1 (the high-level API's only notification)
    function.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
    function.restype = ctypes.c_int
    fuse = ctypes.c_void_p(libfuse.fuse_get_context().contents.fuse)

    def invalidate(path: str) -> int:
        return int(function(fuse, path.encode("utf-8", "surrogateescape")))

    return invalidate


def growing_kinds(kinds: Mapping[Kind, FileKind]) -> frozenset[Kind]:
    """The kinds whose files grow or change (their :class:`FileKind` says ``grows``)."""
    return frozenset(kind for kind, file_kind in kinds.items() if file_kind.grows)


@dataclass
class _LogNotes:
    """What the kernel was told about one log's paths, as far as invalidation needs it."""

    growing: dict[str, None] = field(default_factory=dict)  # paths, oldest first
    segment_files: dict[str, None] = field(default_factory=dict)
    time_links: dict[str, None] = field(default_factory=dict)
    offsets: set[int] = field(default_factory=set)
    lowest_offset: int | None = None  # once `offsets` overflowed: the lowest offset ever noted
    #: by-offset paths not spelled the plain way (``by-offset/007``), with their offsets: the kernel
    #: caches each spelling apart, and the plain path built from an offset would miss them
    odd_spellings: dict[str, int] = field(default_factory=dict)


def _note(paths: dict[str, None], path: str) -> None:
    if path in paths:
        return
    paths[path] = None
    if len(paths) > MAX_NOTED:
        del paths[next(iter(paths))]


class PathNotes:
    """The paths getattr answered that may change later, per log (bounded; thread-safe)."""

    def __init__(self, growing: frozenset[Kind]) -> None:
        self.growing = growing
        self.kinds = growing | {Kind.BY_OFFSET, Kind.SEGMENT_FILE, Kind.BY_TIME}
        self._logs: dict[str, _LogNotes] = {}
        self._lock = threading.Lock()

    def note(self, node: Node, path: str) -> None:
        """Remember ``path`` (of ``node``, a kind in :attr:`kinds`) for its log's next change."""
        with self._lock:
            notes = self._logs.get(node.log)  # type: ignore[arg-type]
            if notes is None:
                notes = self._logs[node.log] = _LogNotes()  # type: ignore[index]
            if node.kind is Kind.BY_OFFSET:
                if node.name != str(node.number):
                    notes.odd_spellings[path] = node.number  # type: ignore[assignment]
                    if len(notes.odd_spellings) > MAX_NOTED:
                        del notes.odd_spellings[next(iter(notes.odd_spellings))]
                self._note_offset(notes, node.number)  # type: ignore[arg-type]
            elif node.kind is Kind.SEGMENT_FILE:
                _note(notes.segment_files, node.name)  # type: ignore[arg-type]
            elif node.kind is Kind.BY_TIME:
                _note(notes.time_links, path)
            else:
                _note(notes.growing, path)

    @staticmethod
    def _note_offset(notes: _LogNotes, offset: int) -> None:
        if notes.lowest_offset is not None:
            notes.lowest_offset = min(notes.lowest_offset, offset)
            return
        notes.offsets.add(offset)
        if len(notes.offsets) > MAX_NOTED_OFFSETS:
            notes.lowest_offset = min(notes.offsets)
            notes.offsets = set()

    def take(self, name: str) -> _LogNotes:
        """A copy of ``name``'s notes (the notifier works on it outside the lock)."""
        with self._lock:
            notes = self._logs.get(name)
            if notes is None:
                return _LogNotes()
            return _LogNotes(dict(notes.growing), dict(notes.segment_files), dict(notes.time_links),
                             set(notes.offsets), notes.lowest_offset, dict(notes.odd_spellings))

    def forget(self, name: str, *, growing: Iterable[str] = (), segment_files: Iterable[str] = (),
               time_links: Iterable[str] = (), offsets_below: int | None = None) -> None:
        """Drop notes the kernel no longer holds (libfuse knew no such path) or that are gone for good."""
        with self._lock:
            notes = self._logs.get(name)
            if notes is None:
                return
            for path in growing:
                notes.growing.pop(path, None)
            for file_name in segment_files:
                notes.segment_files.pop(file_name, None)
            for path in time_links:
                notes.time_links.pop(path, None)
            if offsets_below is not None:
                notes.offsets = {o for o in notes.offsets if o >= offsets_below}
                notes.odd_spellings = {p: o for p, o in notes.odd_spellings.items() if o >= offsets_below}
                if notes.lowest_offset is not None and notes.lowest_offset < offsets_below:
                    notes.lowest_offset = offsets_below


@dataclass(frozen=True)
class LogState:
    """What decides whether a log's cached paths are stale: its offsets and its segment objects."""

    log_uid: int  # Log.uid: never reused, unlike id()
    start: int
    end: int
    segments: tuple[tuple[int, int], ...]  # (base offset, LogSegment.uid), oldest first
    rebases: int = 0  # times the log's stream views dropped their hole: their sizes shrank

    @classmethod
    def of(cls, lg: Log, rebases: int = 0) -> LogState:
        segments = tuple((s.base_offset, s.uid) for s in lg.segments)
        return cls(lg.uid, lg.start_offset, lg.end_offset, segments, rebases)

    @property
    def active_base(self) -> int:
        return self.segments[-1][0] if self.segments else -1


#: at most this many by-offset paths invalidated one by one per change once the notes overflowed
_MAX_RANGE_INVALIDATIONS = 1 << 20


class Notifier:
    """The thread that invalidates what changed, every :data:`POLL_INTERVAL_S` (see the module doc)."""

    def __init__(self, manager: LogManager, notes: PathNotes, invalidate: Invalidate, *,
                 stream_rebases: Callable[[str], int], interval: float = POLL_INTERVAL_S) -> None:
        """``stream_rebases(log name)``: how often its stream views shrank (a change with no new offset)."""
        self.manager = manager
        self.stream_rebases = stream_rebases
        self.notes = notes
        self.invalidate = invalidate
        self.interval = interval
        self._states: dict[str, LogState] = {}
        #: changes that moved or replaced offsets, invalidated once more at the next check: a request
        #: that read the old segment list just before the change may answer (and the kernel cache its
        #: answer) just after the first invalidation
        self._again: dict[str, tuple[LogState | None, LogState]] = {}
        self._names: frozenset[str] = frozenset()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Take the current state of every log and start watching."""
        self._names = self._all_names()
        self._states = {
            name: LogState.of(lg, self.stream_rebases(name)) for name, lg in dict(self.manager.logs).items()
        }
        self._thread = threading.Thread(target=self._run, name="seglogfs-invalidate", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Look for changes now instead of at the next interval (never invalidates in the caller)."""
        self._wake.set()

    def stop(self) -> None:
        """End the thread (before libfuse frees the mount: the invalidations name it)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.check()
                failures = 0
            except Exception:  # a log closed under us, a race with retention: try again next time
                failures += 1
                if failures == 1:
                    log.exception("cache invalidation failed (retrying every %.2f s)", self.interval)

    def _all_names(self) -> frozenset[str]:
        return frozenset(self.manager.logs) | frozenset(self.manager.offline)

    def check(self) -> int:
        """Compare every log with its last state and invalidate what changed; the paths invalidated."""
        done = 0
        names = self._all_names()
        if names != self._names:
            # a log created, gone offline or back: the root's link count, that log's directory and info
            for name in names ^ self._names | set(self.manager.offline):
                done += self._paths([f"/{name}", f"/{name}/info"])
            done += self._paths(["/"])
            self._names = names
        logs = dict(self.manager.logs)
        for name, lg in logs.items():
            state = LogState.of(lg, self.stream_rebases(name))
            old = self._states.get(name)
            # each change is forgotten only once it was invalidated: one that raised is retried
            if name in self._again:  # the previous change's second time, before this one's first
                done += self._log_changed(name, lg, *self._again[name], replay=True)
                del self._again[name]
            if state != old:
                same_log = old is not None and old.log_uid == state.log_uid  # else: reopened, all may differ
                done += self._log_changed(name, lg, old if same_log else None, state)
                self._states[name] = state
        for name in self._states.keys() - logs.keys():
            del self._states[name]
            self._again.pop(name, None)
        return done

    def _paths(self, paths: Iterable[str]) -> int:
        """Invalidate ``paths``; how many the kernel held."""
        return sum(1 for path in paths if self.invalidate(path) == 0)

    def _log_changed(self, name: str, lg: Log, old: LogState | None, new: LogState, *,
                     replay: bool = False) -> int:
        """Invalidate what ``old`` -> ``new`` made stale (``old`` None: anything may have changed);
        ``replay``: the second time, at the check after the change."""
        notes = self.notes.take(name)
        growing_gone = [p for p in notes.growing if self.invalidate(p) != 0]
        done = len(notes.growing) - len(growing_gone)
        stale_files, gone_files = self._stale_segment_files(name, lg, notes.segment_files, old, new)
        done += self._paths(stale_files)
        moved = old is None or old.start != new.start or _replaced(old, new)
        links_gone: list[str] = []
        if moved:
            if not replay:
                self._again[name] = (old, new)  # once more at the next check
            links_gone = [p for p in notes.time_links if self.invalidate(p) != 0]
            done += len(notes.time_links) - len(links_gone)
            done += self._offsets(name, notes, old, new)
        self.notes.forget(name, growing=growing_gone, segment_files=gone_files, time_links=links_gone,
                          offsets_below=new.start)
        return done

    def _stale_segment_files(self, name: str, lg: Log, names: dict[str, None], old: LogState | None,
                             new: LogState) -> tuple[list[str], list[str]]:
        """The noted ``segments/`` names to invalidate, and those that no longer exist (to forget)."""
        if not names:
            return [], []
        unchanged: set[int] = set()
        if old is not None:  # sealed before and still the same segment object: its files never changed
            unchanged = {b for b, i in set(old.segments) & set(new.segments) if b < old.active_base}
        stale, gone = [], []
        existing = set(LogDirFiles(lg).names())
        for file_name in names:
            parsed = parse_offset_file_name(file_name)
            if parsed and parsed[0] in unchanged and sealed_segment_file(file_name, new.active_base):
                continue
            stale.append(f"/{name}/segments/{file_name}")
            if file_name not in existing:
                gone.append(file_name)
        return stale, gone

    def _offsets(self, name: str, notes: _LogNotes, old: LogState | None, new: LogState) -> int:
        """Invalidate the noted by-offset paths that retention or compaction may have removed."""
        doomed = {o for o in notes.offsets if o < new.start}
        ranges = list(_replaced_ranges(old, new))
        for low, high in ranges:
            doomed |= {o for o in notes.offsets if low <= o < high}
        if notes.lowest_offset is not None:  # the notes overflowed: any offset from it on may be held
            if notes.lowest_offset < new.start:
                ranges.append((notes.lowest_offset if old is None else max(notes.lowest_offset, old.start),
                               new.start))
            budget = _MAX_RANGE_INVALIDATIONS
            for low, high in ranges:
                first = max(low, notes.lowest_offset)
                last = min(high, first + budget)
                doomed.update(range(first, last))
                budget -= max(last - first, 0)
        odd = [path for path, o in notes.odd_spellings.items() if o in doomed or o < new.start]
        return self._paths([*(f"/{name}/by-offset/{o}" for o in sorted(doomed)), *odd])


def _replaced(old: LogState, new: LogState) -> bool:
    """True when a segment kept its base offset but is another object (compaction swapped it)."""
    return any(True for _ in _replaced_ranges(old, new))


def _replaced_ranges(old: LogState | None, new: LogState) -> Iterable[tuple[int, int]]:
    """The offset ranges of segments that compaction replaced (same base offset, new object)."""
    if old is None:
        return
    before = dict(old.segments)
    bases = [b for b, _ in new.segments]
    for index, (base, ident) in enumerate(new.segments):
        if base in before and before[base] != ident:
            yield base, bases[index + 1] if index + 1 < len(bases) else new.end

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

A change that removed offsets (compaction, retention) races with the requests answered from the segment
list before it: such an answer can reach the kernel after the invalidation, and the kernel would then
keep a removed offset for an hour. So the notifier invalidates such a change again at every check until
every request numbered before the change (:meth:`PathNotes.begin`) has answered, and once more a check
later (libfuse replies after our callback returns). No wait depends on how long a request takes.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import mfusepy

from seglogfs.fs.files import FileKind
from seglogfs.fs.paths import Kind, Node
from seglogfs.hidden_totals import want as want_hidden_totals
from seglogfs.log import Log
from seglogfs.log_files import parse_offset_file_name, sealed_segment_file
from seglogfs.log_manager import LogManager
from seglogfs.read_committed import READ_COMMITTED, READ_UNCOMMITTED, Isolation
from seglogfs.totals_counter import counted_bytes
from seglogfs.views.log_dir_files import LogDirFiles

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
        self._tickets = itertools.count()
        self._in_flight: dict[int, None] = {}  # tickets of the requests still computing their answer

    def begin(self) -> int:
        """Number a request whose answer the kernel may cache; call :meth:`end` with it once answered."""
        ticket = next(self._tickets)  # itertools.count and dict stores are atomic under the GIL
        self._in_flight[ticket] = None
        return ticket

    def end(self, ticket: int) -> None:
        """The request numbered ``ticket`` has its answer."""
        self._in_flight.pop(ticket, None)

    def horizon(self) -> int:
        """A number above every request begun so far."""
        return next(self._tickets)

    def answered_before(self, horizon: int) -> bool:
        """True when every request numbered below ``horizon`` has its answer."""
        while True:
            try:
                return min(self._in_flight, default=horizon) >= horizon
            except RuntimeError:  # the table changed while min() walked it: look again
                continue

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
    removals: int = 0  # Log.removals
    isolation: Isolation = READ_UNCOMMITTED  # fs.isolation.level: a live switch changes what every view shows
    counted: int = 0  # file bytes the engine's view totals cover: a background count grows view sizes

    @classmethod
    def of(cls, lg: Log, rebases: int = 0, isolation: Isolation = READ_UNCOMMITTED) -> LogState:
        # removals first: it is counted after the segment list changes, so a list read after it is no
        # older than the count (a state whose count lags its list differs from the next one: seen again)
        removals = lg.removals
        if isolation == READ_COMMITTED:
            want_hidden_totals(lg)  # counted in the background before a view asks
        segments = tuple((s.base_offset, s.uid) for s in lg.segments)
        return cls(lg.uid, lg.start_offset, lg.end_offset, segments, rebases, removals,
                   isolation, counted_bytes(lg))

    @property
    def active_base(self) -> int:
        return self.segments[-1][0] if self.segments else -1


#: at most this many by-offset paths invalidated one by one per change once the notes overflowed
_MAX_RANGE_INVALIDATIONS = 1 << 20
#: pending second invalidations per log; past it they merge into one that invalidates every noted path
_MAX_REPLAYS = 16


@dataclass(eq=False)
class _Replay:
    """A change that removed offsets, invalidated again at each check until the requests that may
    have answered from before it all reached the kernel (see the module doc)."""

    old: LogState | None
    new: LogState
    horizon: int  # requests numbered below it began before the change was seen
    answered: bool = False  # at the previous check every one of them had its answer


class Notifier:
    """The thread that invalidates what changed, every :data:`POLL_INTERVAL_S` (see the module doc)."""

    def __init__(self, manager: LogManager, notes: PathNotes, invalidate: Invalidate, *,
                 stream_rebases: Callable[[str], int], isolation: Callable[[str], Isolation] | None = None,
                 interval: float = POLL_INTERVAL_S) -> None:
        """``stream_rebases(log name)``: how often its stream views shrank (a change with no new offset);
        ``isolation(log name)``: its views' fs.isolation.level (read_uncommitted when None)."""
        self.manager = manager
        self.stream_rebases = stream_rebases
        self.isolation: Callable[[str], Isolation] = isolation or (lambda name: READ_UNCOMMITTED)
        self.notes = notes
        self.invalidate = invalidate
        self.interval = interval
        self._states: dict[str, LogState] = {}
        #: changes that moved or removed offsets, invalidated again until the requests that began
        #: before them have answered: one that read the old segment list just before the change may
        #: answer (and the kernel cache its answer) after the first invalidation
        self._again: dict[str, list[_Replay]] = {}
        self._names: frozenset[str] = frozenset()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Take the current state of every log and start watching."""
        self._names = self._all_names()
        self._states = {
            name: LogState.of(lg, self.stream_rebases(name), self.isolation(name))
            for name, lg in dict(self.manager.logs).items()
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
            if self._stop.is_set():  # a pass over thousands of logs must not outlive the mount
                return done
            state = LogState.of(lg, self.stream_rebases(name), self.isolation(name))
            old = self._states.get(name)
            # each change is forgotten only once it was invalidated: one that raised is retried
            done += self._replay(name, lg)  # earlier changes again, before this one's first time
            if state != old:
                # else reopened, or now seen through another isolation level: anything may differ
                same_log = old is not None and (old.log_uid, old.isolation) == (lg.uid, state.isolation)
                done += self._log_changed(name, lg, old if same_log else None, state)
                self._states[name] = state
        for name in self._states.keys() - logs.keys():  # gone offline: every path of it is EIO now
            done += self._paths([f"/{name}", f"/{name}/info", *self.notes.take(name).growing])
            del self._states[name]
            self._again.pop(name, None)
        return done

    def _replay(self, name: str, lg: Log) -> int:
        """Invalidate ``name``'s pending changes again; drop those whose requests all answered before
        the previous check."""
        replays = self._again.get(name)
        if not replays:
            return 0
        done, pending = 0, []
        for replay in replays:
            answered = self.notes.answered_before(replay.horizon)  # before this invalidation
            done += self._log_changed(name, lg, replay.old, replay.new, replay=True)
            if not replay.answered:
                replay.answered = answered
                pending.append(replay)
        if pending:
            self._again[name] = pending
        else:
            del self._again[name]
        return done

    def _schedule_replay(self, name: str, old: LogState | None, new: LogState) -> None:
        replays = self._again.setdefault(name, [])
        replays.append(_Replay(old, new, self.notes.horizon()))
        if len(replays) > _MAX_REPLAYS:  # requests that never answer: one replay of everything noted
            self._again[name] = [_Replay(None, new, max(r.horizon for r in replays))]

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
        moved = old is None or old.start != new.start or old.removals != new.removals or _removed(old, new)
        links_gone: list[str] = []
        if moved:
            if not replay:
                self._schedule_replay(name, old, new)
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
        try:
            existing = set(LogDirFiles(lg).names())
        except FileNotFoundError:  # the log dir was removed under the daemon: the log goes offline
            existing = set()
        for file_name in names:
            parsed = parse_offset_file_name(file_name)
            if parsed and parsed[0] in unchanged and sealed_segment_file(file_name, new.active_base):
                continue
            stale.append(f"/{name}/segments/{file_name}")
            if file_name not in existing:
                gone.append(file_name)
        return stale, gone

    def _offsets(self, name: str, notes: _LogNotes, old: LogState | None, new: LogState) -> int:
        """Invalidate the noted by-offset paths that retention or compaction may have removed (all of
        them when ``old`` is None: anything may have changed)."""
        doomed = {o for o in notes.offsets if o < new.start}
        ranges = list(_removed_ranges(old, new)) if old is not None else [(new.start, new.end)]
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


def _removed(old: LogState, new: LogState) -> bool:
    """True when a segment of ``old`` is no longer in the log (compaction replaced it, retention
    deleted it)."""
    return any(True for _ in _removed_ranges(old, new))


def _removed_ranges(old: LogState, new: LogState) -> Iterable[tuple[int, int]]:
    """The offset ranges of ``old``'s segments that left the log. The last one's range runs to the
    new end: it may have grown, rolled and been cleaned since ``old`` was taken."""
    kept = set(new.segments)
    for index, segment in enumerate(old.segments):
        if segment not in kept:
            following = old.segments[index + 1][0] if index + 1 < len(old.segments) else new.end
            yield segment[0], max(following, segment[0])

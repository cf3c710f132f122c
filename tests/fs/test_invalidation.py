"""The mount's caches across compaction, without a mount: the record cache of :class:`MountContext` and
the :class:`Notifier`'s choice of paths, driven by real cleaner passes on a real log, with the
invalidations recorded instead of sent to a kernel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cleaner_helpers import compact_config, engine_records, open_manager
from support.engine_helpers import ManualClock

from seglogfs.errors import OffsetOutOfRangeError
from seglogfs.fs import invalidation
from seglogfs.fs.access import Access
from seglogfs.fs.context import MountContext
from seglogfs.fs.invalidation import Notifier, PathNotes
from seglogfs.fs.paths import node_of
from seglogfs.log import Log
from seglogfs.log_manager import LogManager
from seglogfs.records import ProducerRecord

KEYS, ROUNDS, PER_ROUND = 5, 4, 20


def _fill(lg: Log) -> None:
    """Keyed appends over several segments: most offsets are overwritten, so a clean removes them."""
    for r in range(ROUNDS):
        for i in range(PER_ROUND):
            lg.append([ProducerRecord(key=b"k%d" % (i % KEYS), value=b"r%d-%d" % (r, i))])
        lg.roll()


def _clean(manager: LogManager) -> None:
    while manager.clean_once() is not None:
        pass


class _Recorder:
    """An ``invalidate`` that remembers the paths and says the kernel held each (0)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.fail_on: str | None = None

    def __call__(self, path: str) -> int:
        if path == self.fail_on:
            self.fail_on = None
            raise OSError("invalidation failed once")
        self.paths.append(path)
        return 0


def _notifier(manager: LogManager) -> tuple[Notifier, PathNotes, _Recorder]:
    notes, recorder = PathNotes(frozenset()), _Recorder()
    notifier = Notifier(manager, notes, recorder, stream_rebases=lambda name: 0)
    notifier.check()  # the first look: every log is new
    recorder.paths.clear()
    return notifier, notes, recorder


def _note(notes: PathNotes, offsets: range) -> None:
    for offset in offsets:
        path = f"/t-0/by-offset/{offset}"
        notes.note(node_of(path), path)


def _cleaned(lg: Log, before: set[int]) -> set[int]:
    return before - {offset for offset, _, _ in engine_records(lg)}


def test_a_record_read_while_compaction_swaps_its_segment_is_not_served_afterwards(tmp_path: Path) -> None:
    with open_manager(tmp_path, compact_config(), ManualClock()) as manager:
        lg = manager.create_log("t-0")
        _fill(lg)
        context = MountContext(manager, read_only=False, access=Access(os.getuid(), os.getgid()))
        read = lg.read

        def read_then_clean(offset: int, **kwargs):  # the cleaner swaps the segment just after the read
            record = read(offset, **kwargs)
            _clean(manager)
            return record

        lg.read = read_then_clean  # type: ignore[method-assign]
        with pytest.raises(OffsetOutOfRangeError):
            context.record(lg, 0)  # read again once the swap is seen: offset 0 was cleaned
        lg.read = read  # type: ignore[method-assign]
        with pytest.raises(OffsetOutOfRangeError):
            context.record(lg, 0)
        survivor = engine_records(lg)[0][0]
        assert context.record(lg, survivor).offset == survivor


def test_a_cached_record_is_read_again_after_a_clean(tmp_path: Path) -> None:
    with open_manager(tmp_path, compact_config(), ManualClock()) as manager:
        lg = manager.create_log("t-0")
        _fill(lg)
        context = MountContext(manager, read_only=False, access=Access(os.getuid(), os.getgid()))
        assert context.record(lg, 0).value == b"r0-0"
        _clean(manager)
        with pytest.raises(OffsetOutOfRangeError):
            context.record(lg, 0)


def test_noted_offsets_that_a_clean_removed_are_invalidated(tmp_path: Path) -> None:
    with open_manager(tmp_path, compact_config(), ManualClock()) as manager:
        lg = manager.create_log("t-0")
        _fill(lg)
        notifier, notes, recorder = _notifier(manager)
        _note(notes, range(0, 30))
        before = {offset for offset, _, _ in engine_records(lg)}
        _clean(manager)
        notifier.check()
        cleaned = _cleaned(lg, before)
        assert cleaned
        invalidated = {int(p.rsplit("/", 1)[1]) for p in recorder.paths if "/by-offset/" in p}
        assert {o for o in cleaned if o < 30} <= invalidated


def test_cleaned_offsets_are_invalidated_after_the_notes_overflowed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invalidation, "MAX_NOTED_OFFSETS", 8)
    with open_manager(tmp_path, compact_config(), ManualClock()) as manager:
        lg = manager.create_log("t-0")
        _fill(lg)
        notifier, notes, recorder = _notifier(manager)
        _note(notes, range(0, 40))  # past the bound: only the lowest offset noted is kept
        before = {offset for offset, _, _ in engine_records(lg)}
        _clean(manager)
        notifier.check()
        invalidated = {int(p.rsplit("/", 1)[1]) for p in recorder.paths if "/by-offset/" in p}
        assert _cleaned(lg, before) <= invalidated


def test_a_change_whose_invalidation_failed_is_invalidated_at_the_next_check(tmp_path: Path) -> None:
    with open_manager(tmp_path, compact_config(), ManualClock()) as manager:
        lg = manager.create_log("t-0")
        _fill(lg)
        notifier, notes, recorder = _notifier(manager)
        _note(notes, range(0, 1))
        segment_file = "/t-0/segments/00000000000000000000.log"
        notes.note(node_of(segment_file), segment_file)
        _clean(manager)
        recorder.fail_on = segment_file  # the first path of the change
        with pytest.raises(OSError):
            notifier.check()
        notifier.check()
        assert segment_file in recorder.paths and "/t-0/by-offset/0" in recorder.paths


def test_log_state_tells_a_compacted_copy_from_the_segment_it_replaced(tmp_path: Path) -> None:
    """The state names segments by a uid, never by id(): CPython reuses the address of a freed segment
    object, and a copy compacted twice between two checks could otherwise look unchanged."""
    with open_manager(tmp_path, compact_config(), ManualClock()) as manager:
        lg = manager.create_log("t-0")
        _fill(lg)
        uids = {s.uid for s in lg.segments}
        before = invalidation.LogState.of(lg)
        _clean(manager)
        after = invalidation.LogState.of(lg)
        assert before != after and before.log_uid == after.log_uid == lg.uid
        assert all(uid not in uids for base, uid in after.segments if (base, uid) not in before.segments)
        assert lg.removals >= 1


def _invalidated_offsets(recorder: _Recorder) -> set[int]:
    offsets = {int(p.rsplit("/", 1)[1]) for p in recorder.paths if "/by-offset/" in p}
    recorder.paths.clear()
    return offsets


def test_a_clean_is_invalidated_again_until_the_requests_begun_before_it_answered(tmp_path: Path) -> None:
    """A lookup that read the old segment list may reach the kernel after any number of invalidations
    (a loaded machine stalls a thread for longer than a poll interval): the notifier goes on
    invalidating until it has answered, and once more after, whatever the time it took."""
    with open_manager(tmp_path, compact_config(), ManualClock()) as manager:
        lg = manager.create_log("t-0")
        _fill(lg)
        notifier, notes, recorder = _notifier(manager)
        _note(notes, range(0, 30))
        before = {offset for offset, _, _ in engine_records(lg)}
        slow = notes.begin()  # a lookup computing its answer from the segment list before the clean
        _clean(manager)
        cleaned = {o for o in _cleaned(lg, before) if o < 30}
        assert cleaned
        notifier.check()
        assert cleaned <= _invalidated_offsets(recorder)
        later = notes.begin()  # begun after the clean was seen: its answer is already the new one
        for _ in range(5):  # however many checks the slow lookup spans
            notifier.check()
            assert cleaned <= _invalidated_offsets(recorder)
        notes.end(slow)
        notifier.check()  # it answered before this check: invalidated again ...
        assert cleaned <= _invalidated_offsets(recorder)
        notifier.check()  # ... and at the next one, after libfuse sent its reply
        assert cleaned <= _invalidated_offsets(recorder)
        notifier.check()  # then the change is done with, though a later request is still in flight
        assert not _invalidated_offsets(recorder)
        notes.end(later)


def test_offsets_of_any_segment_that_left_the_log_count_as_removed() -> None:
    """Ranges come from the segments that left, not from bases that reappear: a segment gone from the
    middle, and the old active segment rolled and cleaned since the last look (to the new end)."""
    state = invalidation.LogState
    old = state(1, 0, 250, ((0, 1), (100, 2), (200, 3)))
    middle_gone = state(1, 0, 250, ((0, 1), (200, 3)))
    assert list(invalidation._removed_ranges(old, middle_gone)) == [(100, 200)]
    tail_cleaned = state(1, 0, 400, ((0, 1), (100, 2), (200, 7), (380, 8)))
    assert list(invalidation._removed_ranges(old, tail_cleaned)) == [(200, 400)]
    assert not list(invalidation._removed_ranges(old, old))

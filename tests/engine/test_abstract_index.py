"""What OffsetIndex and TimeIndex share (AbstractIndex) against Kafka's rules (docs/kafka-format.md
sections 2-3): preallocation, search, resize/trim/truncate, lifecycle, read-only copies, concurrency."""

from __future__ import annotations

import bisect
import itertools
import os
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support.testdata import KAFKA_LOG_DIR

from seglogfs.abstract_index import InvalidIndexAppendError
from seglogfs.errors import CorruptIndexError, IndexOffsetOverflowError, ReadOnlyLogError
from seglogfs.offset_index import OffsetIndex
from seglogfs.time_index import TimeIndex

TESTDATA = KAFKA_LOG_DIR
INT32_MAX = 2**31 - 1


def raw_entries(path: Path, fmt: str) -> list[tuple[int, ...]]:
    """Independent parse of an index file with struct: floor(len/size) entries."""
    data = path.read_bytes()
    size = struct.calcsize(fmt)
    return [struct.unpack_from(fmt, data, i * size) for i in range(len(data) // size)]


# --------------------------------------------------------------------------- preallocation, sizes

@pytest.mark.parametrize(
    ("max_size", "index_len", "timeindex_len"),
    [(10485760, 10485760, 10485756), (67, 64, 60), (24, 24, 24), (12, 8, 12)],
)
def test_preallocation_rounds_down_to_entry_size(tmp_path, max_size, index_len, timeindex_len):
    oi = OffsetIndex(tmp_path / "0.index", 0, max_size)
    ti = TimeIndex(tmp_path / "0.timeindex", 0, max_size)
    assert (tmp_path / "0.index").stat().st_size == index_len
    assert (tmp_path / "0.timeindex").stat().st_size == timeindex_len
    assert oi.entries == 0 and ti.entries == 0
    assert oi.max_entries == index_len // 8
    assert ti.max_entries == timeindex_len // 12
    oi.close()
    ti.close()
    # close trims to the entries in use
    assert (tmp_path / "0.index").stat().st_size == 0
    assert (tmp_path / "0.timeindex").stat().st_size == 0

def test_default_max_size_is_kafkas(tmp_path):
    oi = OffsetIndex(tmp_path / "5.index", 5)
    assert oi.length == 10485760 and oi.max_entries == 1310720
    ti = TimeIndex(tmp_path / "5.timeindex", 5)
    assert ti.length == 10485756 and ti.max_entries == 873813

def test_new_file_smaller_than_one_entry_is_refused(tmp_path):
    with pytest.raises(ValueError):
        TimeIndex(tmp_path / "0.timeindex", 0, 11)
    assert not (tmp_path / "0.timeindex").exists()

# --------------------------------------------------------------------------- append rules, is_full

def test_offset_overflow(tmp_path):
    oi = OffsetIndex(tmp_path / "1000.index", 1000, 80)
    with pytest.raises(IndexOffsetOverflowError):
        oi.append(999, 0)
    with pytest.raises(IndexOffsetOverflowError):
        oi.append(1000 + INT32_MAX + 1, 0)
    oi.append(1000 + INT32_MAX, 0)  # the largest relative offset still fits
    assert oi.last_offset == 1000 + INT32_MAX
    assert not oi.can_append_offset(1000 + INT32_MAX + 1) and oi.can_append_offset(1000)
    ti = TimeIndex(tmp_path / "1000.timeindex", 1000, 120)
    with pytest.raises(IndexOffsetOverflowError):
        ti.maybe_append(5, 1000 + INT32_MAX + 1)

# --------------------------------------------------------------------------- lookups

def test_lookup_rules(tmp_path):
    oi = OffsetIndex(tmp_path / "10.index", 10, 800)
    assert oi.lookup(5) == (10, 0) and oi.lookup(10**12) == (10, 0)  # empty
    for off, pos in [(12, 0), (20, 4200), (31, 9000)]:
        oi.append(off, pos)
    assert oi.lookup(11) == (10, 0)  # below the first entry
    assert oi.lookup(-(10**15)) == (10, 0)
    assert oi.lookup(12) == (12, 0)
    assert oi.lookup(19) == (12, 0)
    assert oi.lookup(20) == (20, 4200)
    assert oi.lookup(10**15) == (31, 9000)
    assert oi.fetch_upper_bound_offset(0, 100) == (20, 4200)
    assert oi.fetch_upper_bound_offset(4200, 0) == (20, 4200)
    assert oi.fetch_upper_bound_offset(4200, 1) == (31, 9000)
    assert oi.fetch_upper_bound_offset(9000, 1) is None

    ti = TimeIndex(tmp_path / "10.timeindex", 10, 1200)
    assert ti.lookup(5) == (-1, 10)
    for ts, off in [(100, 12), (250, 20), (900, 31)]:
        ti.maybe_append(ts, off)
    assert ti.lookup(99) == (-1, 10)
    assert ti.lookup(-5) == (-1, 10)
    assert ti.lookup(100) == (100, 12)
    assert ti.lookup(899) == (250, 20)
    assert ti.lookup(2**62) == (900, 31)

@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_warm_section_lookup_equals_plain_search(tmp_path, cls):
    n = 5000  # several times the warm section (1024 / 682 entries)
    idx = cls(tmp_path / f"7.{cls.__name__}", 7, n * cls.ENTRY_SIZE)
    keys = [3 * i + 1 for i in range(n)]
    if cls is OffsetIndex:
        for i, k in enumerate(keys):
            idx.append(7 + k, 100 * i)
    else:
        for i, k in enumerate(keys):
            idx.maybe_append(k, 7 + i, skip_full_check=True)
    assert idx.entries == n
    first_hot = n - 1 - idx._warm_entries
    targets = list(range(-2, 3 * n + 5, 7)) + [keys[first_hot] + d for d in (-1, 0, 1)]
    for t in targets:
        slot = bisect.bisect_right(keys, t) - 1  # plain search over everything
        if cls is OffsetIndex:
            expected = (7, 0) if slot < 0 else (7 + keys[slot], 100 * slot)
            assert idx.lookup(7 + t) == expected, t
        else:
            expected = (-1, 7) if slot < 0 else (keys[slot], 7 + slot)
            assert idx.lookup(t) == expected, t

# --------------------------------------------------------------------------- lifecycle

def test_trim_reopen_and_floor_entries(tmp_path):
    path = tmp_path / "0.index"
    oi = OffsetIndex(path, 0, 800)
    for i in range(5):
        oi.append(i * 10, i * 4096)
    oi.trim_to_valid_size()
    assert path.stat().st_size == 40 and oi.max_entries == 5 and oi.is_full()
    oi.close()
    # reopen: entries = floor(length / 8), even with a partial entry at the end
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00")
    re = OffsetIndex(path, 0, 800)
    assert re.entries == 5 and re.length == 43 and re.last_offset == 40
    with pytest.raises(CorruptIndexError, match="43 bytes"):
        re.sanity_check()
    re.resize(800)  # an active segment grows its index back (Kafka's resizeIndexes)
    assert re.max_entries == 100 and re.entries == 5
    re.append(50, 5 * 4096)
    assert re.lookup(55) == (50, 5 * 4096)
    re.sanity_check()
    re.close()
    assert path.stat().st_size == 48
    assert raw_entries(path, ">ii") == [(i * 10, i * 4096) for i in range(6)]

def test_resize_refreshes_views_and_refuses_to_cut_entries(tmp_path):
    ti = TimeIndex(tmp_path / "0.timeindex", 0, 24)
    ti.maybe_append(5, 1, skip_full_check=True)
    ti.maybe_append(9, 2, skip_full_check=True)
    assert ti.resize(1200) is True
    assert ti.resize(1200) is False
    ti.maybe_append(20, 3)
    assert ti.lookup(10) == (9, 2) and ti.lookup(25) == (20, 3)
    with pytest.raises(ValueError):
        ti.resize(24)
    ti.trim_to_valid_size()
    assert ti.length == 36 and ti.lookup(25) == (20, 3)

def test_truncate_to(tmp_path):
    oi = OffsetIndex(tmp_path / "100.index", 100, 800)
    for off in (100, 110, 120, 130):
        oi.append(off, off * 10)
    oi.truncate_to(125)  # drops 130
    assert oi.entries == 3 and oi.last_offset == 120
    oi.truncate_to(120)  # drops 120 itself
    assert oi.entries == 2 and oi.last_offset == 110
    oi.truncate_to(200)  # nothing to drop
    assert oi.entries == 2
    oi.append(115, 1150)  # appends continue after the new last entry
    assert oi.lookup(119) == (115, 1150)
    oi.truncate_to(50)
    assert oi.entries == 0 and oi.last_offset == 100 and oi.lookup(120) == (100, 0)

    ti = TimeIndex(tmp_path / "100.timeindex", 100, 1200)
    for ts, off in ((10, 100), (20, 110), (30, 120), (40, 130)):
        ti.maybe_append(ts, off)
    ti.truncate_to(120)
    assert ti.entries == 2 and ti.last_entry == (20, 110)
    ti.truncate_to(111)
    assert ti.entries == 2
    ti.truncate_to(100)
    assert ti.entries == 0 and ti.last_entry == (-1, 100)

def test_reset(tmp_path):
    oi = OffsetIndex(tmp_path / "0.index", 0, 80)
    oi.append(3, 0)
    oi.trim_to_valid_size()
    assert oi.length == 8
    oi.reset()
    assert oi.entries == 0 and oi.length == 80 and oi.lookup(3) == (0, 0)
    oi.append(1, 0)
    assert oi.entries == 1

def test_flush_persists_through_the_mapping(tmp_path):
    path = tmp_path / "0.index"
    oi = OffsetIndex(path, 0, 80)
    oi.append(7, 77)
    oi.flush()
    assert path.read_bytes()[:8] == struct.pack(">ii", 7, 77)
    oi.close()

def test_rename_and_delete(tmp_path):
    oi = OffsetIndex(tmp_path / "0.index", 0, 80)
    oi.append(1, 0)
    oi.rename_to(tmp_path / "0.index.deleted")
    assert oi.path == tmp_path / "0.index.deleted" and oi.lookup(5) == (1, 0)
    assert oi.delete_if_exists() is True
    assert not (tmp_path / "0.index.deleted").exists()
    assert oi.delete_if_exists() is False

# --------------------------------------------------------------------------- sanity checks

def test_zero_filled_tail_tolerated_on_reopen(tmp_path):
    """A crash leaves a preallocated index untrimmed: reopening assumes every slot is an entry."""
    opath, tpath = tmp_path / "20.index", tmp_path / "20.timeindex"
    oi, ti = OffsetIndex(opath, 20, 800), TimeIndex(tpath, 20, 1200)
    for i in range(3):
        oi.append(21 + i, 4096 * i)
        ti.maybe_append(1000 + i, 21 + i)
    oi.flush()
    ti.flush()
    oi.close_handler()  # no trim, as after a crash
    ti.close_handler()

    oi = OffsetIndex(opath, 20, 800)
    ti = TimeIndex(tpath, 20, 1200)
    assert oi.entries == 100 and ti.entries == 100  # floor(length / entry size)
    assert oi.last_offset == 20  # a zero entry means relative offset 0
    oi.sanity_check()  # since Kafka 2.1 only last < base fails, so a zero tail passes
    with pytest.raises(CorruptIndexError):
        ti.sanity_check()  # last timestamp 0 < first timestamp 1000
    assert oi.entries_before_zero_tail() == 3 and ti.entries_before_zero_tail() == 3
    # a reader keeps only the real entries, without writing anything
    ro = TimeIndex(tpath, 20, writable=False)
    ro.limit_entries(ro.entries_before_zero_tail())
    assert ro.entries == 3 and ro.last_entry == (1002, 23) and ro.lookup(5000) == (1002, 23)
    ro.sanity_check()
    with pytest.raises(ValueError):
        ro.limit_entries(101)
    # a rebuild (what recovery does) starts over cleanly
    oi.reset()
    oi.append(21, 0)
    assert oi.entries == 1 and oi.lookup(30) == (21, 0)

# --------------------------------------------------------------------------- real broker files

@pytest.mark.parametrize(
    ("partition", "n_index", "n_time"), [("__cluster_metadata-0", 34, 35), ("__consumer_offsets-15", 5, 6)]
)
def test_read_only_real_kafka_indexes(tmp_path, partition, n_index, n_time):
    src = TESTDATA / partition
    dst = tmp_path / partition
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        os.chmod(p, 0o444)  # read-only mode must not need write permission
    opath, tpath = dst / "00000000000000000000.index", dst / "00000000000000000000.timeindex"
    before = (opath.read_bytes(), tpath.read_bytes())

    oi = OffsetIndex(opath, 0, writable=False)
    ti = TimeIndex(tpath, 0, writable=False)
    assert oi.entries == n_index and ti.entries == n_time
    oi.sanity_check()
    ti.sanity_check()
    expected_o = raw_entries(opath, ">ii")
    expected_t = raw_entries(tpath, ">qi")
    assert [oi.entry(i) for i in range(oi.entries)] == expected_o
    assert [ti.entry(i) for i in range(ti.entries)] == expected_t
    offsets = [o for o, _ in expected_o]
    for t in range(0, offsets[-1] + 50):
        slot = bisect.bisect_right(offsets, t) - 1
        assert oi.lookup(t) == ((0, 0) if slot < 0 else expected_o[slot])
    stamps = [ts for ts, _ in expected_t]
    for t in [stamps[0] - 1, *stamps, *(s + 1 for s in stamps)]:
        slot = bisect.bisect_right(stamps, t) - 1
        assert ti.lookup(t) == ((-1, 0) if slot < 0 else expected_t[slot])
    with pytest.raises(ReadOnlyLogError):
        oi.append(10**6, 0)
    with pytest.raises(ReadOnlyLogError):
        ti.maybe_append(2**50, 10**6)
    with pytest.raises(ReadOnlyLogError):
        oi.trim_to_valid_size()
    oi.close()
    ti.close()
    assert (opath.read_bytes(), tpath.read_bytes()) == before

def test_read_only_empty_files(tmp_path):
    src = TESTDATA / "demo-topic-0"
    dst = tmp_path / "demo-topic-0"
    shutil.copytree(src, dst)
    oi = OffsetIndex(dst / "00000000000000000000.index", 0, writable=False)
    ti = TimeIndex(dst / "00000000000000000000.timeindex", 0, writable=False)
    assert oi.length == 0 and oi.entries == 0 and oi.max_entries == 0
    assert oi.lookup(5) == (0, 0) and ti.lookup(5) == (-1, 0)
    assert oi.is_full() and ti.is_full()
    oi.sanity_check()
    ti.sanity_check()
    oi.close()
    ti.close()
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)

def test_writable_open_of_empty_existing_file_then_resize(tmp_path):
    path = tmp_path / "0.index"
    path.touch()
    oi = OffsetIndex(path, 0, 80)
    assert oi.entries == 0 and oi.max_entries == 0 and oi.is_full()
    oi.resize(80)
    oi.append(0, 0)
    assert oi.lookup(3) == (0, 0)

# --------------------------------------------------------------------------- concurrency

def test_lookups_concurrent_with_appends(tmp_path):
    oi = OffsetIndex(tmp_path / "0.index", 0, 8 * 20000)
    errors: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            t = oi.last_offset
            off, pos = oi.lookup(t)
            # every appended entry is (2k, 10k): a torn read would break this
            if pos != off * 5 or off > t:
                errors.append(f"lookup({t}) -> {(off, pos)}")

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    for k in range(1, 20000):
        oi.append(2 * k, 10 * k)
        if k % 5000 == 0:
            oi.trim_to_valid_size()
            oi.resize(8 * 20000)
    done.set()
    for th in threads:
        th.join()
    assert errors == []

# --------------------------------------------------------------------------- property test

class IndexMachine(RuleBasedStateMachine):
    """OffsetIndex and TimeIndex against a plain sorted-list model, with tiny sizes and warm sections."""

    @initialize(
        base=st.integers(0, 2**40),
        o_slots=st.integers(1, 12),
        t_slots=st.integers(1, 12),
        warm=st.integers(1, 5),
    )
    def setup(self, base, o_slots, t_slots, warm):
        self.dir = tempfile.mkdtemp()
        self.base = base
        self.o_size, self.t_size = o_slots * 8 + 3, t_slots * 12 + 5  # not multiples: rounded down
        self.warm = warm
        self._open()
        self.o_model: list[tuple[int, int]] = []
        self.t_model: list[tuple[int, int]] = []
        self.next_off = base
        self.next_pos = 0
        self.next_ts = 0

    def _open(self) -> None:
        self.oi = OffsetIndex(Path(self.dir) / "x.index", self.base, self.o_size)
        self.ti = TimeIndex(Path(self.dir) / "x.timeindex", self.base, self.t_size)
        # shrink the warm section so small indexes exercise both search branches
        self.oi._warm_entries = self.warm
        self.ti._warm_entries = self.warm

    def teardown(self):
        if hasattr(self, "dir"):
            self.oi.close_handler()
            self.ti.close_handler()
            shutil.rmtree(self.dir)

    @rule(gap=st.integers(0, 5), size=st.integers(1, 5000), ts_gap=st.integers(-3, 5))
    def append(self, gap, size, ts_gap):
        offset = self.next_off + gap
        if self.oi.is_full() or (self.o_model and offset <= self.o_model[-1][0]):
            with pytest.raises(InvalidIndexAppendError):
                self.oi.append(offset, self.next_pos)
        else:
            self.oi.append(offset, self.next_pos)
            self.o_model.append((offset, self.next_pos))
        ts = self.next_ts + ts_gap
        last_ts = self.t_model[-1][0] if self.t_model else -1
        if self.ti.is_full() or (self.t_model and ts < last_ts):
            with pytest.raises(InvalidIndexAppendError):
                self.ti.maybe_append(ts, offset)
        else:
            self.ti.maybe_append(ts, offset)
            if ts > last_ts:
                self.t_model.append((ts, offset))
        self.next_off = offset + 1
        self.next_pos += size
        self.next_ts = max(self.next_ts, ts)

    @rule(delta=st.integers(-3, 80))
    def lookup_offset(self, delta):
        target = self.base + delta
        offsets = [o for o, _ in self.o_model]
        slot = bisect.bisect_right(offsets, target) - 1
        assert self.oi.lookup(target) == ((self.base, 0) if slot < 0 else self.o_model[slot])

    @rule(ts=st.integers(-3, 80))
    def lookup_time(self, ts):
        stamps = [t for t, _ in self.t_model]
        slot = bisect.bisect_right(stamps, ts) - 1
        assert self.ti.lookup(ts) == ((-1, self.base) if slot < 0 else self.t_model[slot])

    @rule(delta=st.integers(0, 80))
    def truncate(self, delta):
        offset = self.base + delta
        self.oi.truncate_to(offset)
        self.ti.truncate_to(offset)
        self.o_model = [e for e in self.o_model if e[0] < offset]
        self.t_model = [e for e in self.t_model if e[1] < offset]
        self.next_off = min(self.next_off, offset)

    @rule()
    def close_and_reopen(self):
        self.oi.close()
        self.ti.close()
        assert os.path.getsize(Path(self.dir) / "x.index") == 8 * len(self.o_model)
        self._open()
        assert self.oi.entries == len(self.o_model)
        self.oi.resize(self.o_size)
        self.ti.resize(self.t_size)

    @precondition(lambda self: hasattr(self, "oi"))
    @invariant()
    def consistent(self):
        assert self.oi.entries == len(self.o_model)
        assert self.ti.entries == len(self.t_model)
        assert self.oi.last_offset == (self.o_model[-1][0] if self.o_model else self.base)
        assert self.ti.last_entry == (self.t_model[-1] if self.t_model else (-1, self.base))
        self.oi.sanity_check()
        self.ti.sanity_check()


IndexMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

TestIndexMachine = IndexMachine.TestCase

def test_lookup_after_close_is_an_error(tmp_path):
    oi = OffsetIndex(tmp_path / "0.index", 0, 80)
    oi.append(1, 0)
    oi.close()
    with pytest.raises(ValueError, match="closed"):
        oi.lookup(1)


def _ticking_pause(flush: Callable[[], None]) -> tuple[float, float]:
    """(The longest pause of a thread ticking every 0.2 ms while ``flush()`` runs, its duration)."""
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0002)

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.05)
    began = time.perf_counter()
    flush()
    ended = time.perf_counter()
    stop.set()
    ticker.join()
    during = [began, *(t for t in ticks if began < t < ended), ended]
    return max(b - a for a, b in itertools.pairwise(during)), ended - began


def test_a_flush_lets_the_other_threads_run(tmp_path: Path) -> None:
    """flush() writes the index back with the GIL released (an msync through ``mmap.flush`` held it
    for the whole write-back: every thread of the daemon, every mount request, waited). Asserted as a
    ratio: the longest pause of a ticking thread against the flush's own time."""
    size = 32 << 20
    while True:
        path = tmp_path / f"{size}.index"
        index = OffsetIndex(path, 0, size)
        index.append(1, 0)  # an entry: the flush has something to write
        fd = os.open(path, os.O_WRONLY)
        try:  # dirty every page of the file (what the index holds does not matter here)
            os.pwrite(fd, b"\1" * size, 0)
        finally:
            os.close(fd)
        pause, took = _ticking_pause(index.flush)
        index.close()
        if took >= 0.03 or size >= 256 << 20:  # long enough to tell a pause from noise
            break
        size *= 2
    assert pause < took / 2, (pause, took, size)

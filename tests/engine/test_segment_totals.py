"""The engine's view totals (seglogfs.segment_totals, totals_file, totals_counter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from array import array
from pathlib import Path

from support.engine_helpers import config, open_log
from support.record_batches import raw_legacy
from support.transactions import control_batch

from seglogfs.compression import Compression
from seglogfs.log import Log
from seglogfs.records import ProducerRecord, TimestampType, encode_batch, encode_values, read_batch_header
from seglogfs.records._scan import count_run, render_run
from seglogfs.segment_totals import CHECKPOINT_BATCHES, Goal, SegmentTotals
from seglogfs.stream_format import JSON_LINES, VALUES
from seglogfs.totals_counter import TotalsCounter
from seglogfs.totals_file import TOTALS_SUFFIX, load, totals_path
from seglogfs.views.value_stream import ValueStream

REPO = Path(__file__).resolve().parents[2]


def fill(lg: Log, batches: int, per_batch: int = 3) -> None:
    for b in range(batches):
        lg.append_values([b"v%d-%d" % (b, i) for i in range(per_batch)])


def recount(lg: Log) -> list[tuple[int, int, int]]:
    """(position, values, jsonl) frontiers of a count from the files, segment by segment."""
    out = []
    for segment in lg.segments:
        fresh = SegmentTotals(segment)
        fresh.catch_up()
        out.append(tuple(fresh.frontier)[:1] + tuple(fresh.frontier)[2:])
    return out


def test_totals_counted_at_append_are_those_a_count_of_the_files_gives(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", config(segment_bytes=12_000)) as lg:
        fill(lg, 3 * CHECKPOINT_BATCHES)
        assert len(lg.segments) > 2
        kept = [tuple(s.totals.frontier)[:1] + tuple(s.totals.frontier)[2:] for s in lg.segments]
        assert kept == recount(lg)
        for fmt in (VALUES, JSON_LINES):
            stream = ValueStream(lg, fmt=fmt)
            assert stream.size() == len(stream.read(0, 1 << 30))


def test_a_kill_after_rolls_recounts_only_the_active_segment(tmp_path: Path, monkeypatch) -> None:
    """The totals of a sealed segment are written at its roll: after kill -9 only what recovery
    scanned (the active segment) is counted again, by the open itself (no background count left)."""
    monkeypatch.setattr(TotalsCounter, "watch", lambda self, lg: None)  # no background count here
    directory = tmp_path / "t-0"
    code = (
        "import os, sys; sys.path.insert(0, 'tests'); from support.engine_helpers import config, open_log;"
        f"lg = open_log({str(directory)!r}, config(segment_bytes=4000));"
        "[lg.append_values([b'v%d' % i] * 5) for i in range(400)]; lg.flush(); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
    sealed = sorted(directory.glob("*.log"))[:-1]
    assert len(sealed) > 3 and len(list(directory.glob(f".*{TOTALS_SUFFIX}"))) == len(sealed)
    with Log.open(directory, config(segment_bytes=4000), clean_shutdown=False) as lg:
        assert [s.totals.saved for s in lg.segments] == [True] * len(sealed) + [False]
        assert all(s.totals.counted(s.size) for s in lg.segments)
        assert not lg.info()["view_totals"]["counting"]
        stream = ValueStream(lg)
        assert stream.size() == len(stream.read(0, 1 << 30)) == sum(len(b"v%d\n" % i) * 5 for i in range(400))


def test_a_totals_file_of_another_file_is_not_trusted(tmp_path: Path) -> None:
    """Same base offset, size and mtime, another .log (a copy, a cleaner's rewrite): recounted."""
    directory = tmp_path / "t-0"
    with open_log(directory, config(segment_bytes=4000)) as lg:
        fill(lg, 100)
    first = sorted(directory.glob("*.log"))[0]
    copy = first.with_name("copy")
    shutil.copy2(first, copy)
    os.replace(copy, first)  # same bytes, size and mtime; another inode
    with Log.open(directory, config(segment_bytes=4000), read_only=True) as lg:  # saves nothing
        assert not lg.segments[0].totals.saved and lg.segments[1].totals.saved
        assert load(lg.segments[:1]) == 0 and totals_path(directory, 0).exists()
        stream = ValueStream(lg)
        assert stream.size() == len(stream.read(0, 1 << 30))


def test_the_counter_counts_segments_nobody_counted(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    with open_log(directory, config(segment_bytes=50_000)) as lg:
        fill(lg, 2000, per_batch=1)
    for path in directory.glob(f".*{TOTALS_SUFFIX}"):
        path.unlink()
    with Log.open(directory, config(segment_bytes=50_000), clean_shutdown=True) as lg:
        deadline = time.monotonic() + 30
        while lg.info()["view_totals"]["counting"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not lg.info()["view_totals"]["counting"]
        assert all(s.totals.counted(s.size) for s in lg.segments)
        stream = ValueStream(lg, fmt=JSON_LINES)
        assert stream.size() == len(stream.read(0, 1 << 30))
    assert len(list(directory.glob(f".*{TOTALS_SUFFIX}"))) == len(list(directory.glob("*.log")))


def mixed_batches() -> list[bytes]:
    """Batches of every kind a run meets: plain, keyed, with headers, LogAppendTime, a control
    record, compressed, legacy, negative timestamps, after an offset gap; consecutive offsets."""
    out, offset = [], 0

    def add(batch: bytes, count: int) -> None:
        nonlocal offset
        out.append(batch)
        offset += count

    for i in range(5):
        add(encode_values([b"plain %d" % j for j in range(i + 1)], offset, 1_700_000_000_000), i + 1)
    add(encode_batch([ProducerRecord(b"v", key=b"k")], offset, now_ms=5), 1)
    add(encode_batch([ProducerRecord(b"v", headers=[("h", b"x")])], offset, now_ms=5), 1)
    add(encode_values([b"quote \" and \\"], offset, 7), 1)
    add(encode_values([b"appended"], offset, 9, timestamp_type=TimestampType.LOG_APPEND_TIME), 1)
    add(control_batch(offset, 7, 0, 1), 1)
    add(encode_values([b"zstd %d" % j for j in range(50)], offset, 3, compression=Compression.ZSTD), 50)
    add(raw_legacy(1, None, b"legacy", offset=offset), 1)
    add(encode_values([b"negative"], offset, -5), 1)
    offset += 10  # a gap, as compaction leaves
    add(encode_values([b"after the gap"], offset, 11), 1)
    add(encode_values([b""], offset, 11), 1)
    return out


def test_the_c_runs_give_the_bytes_the_python_decoders_give() -> None:
    batches = mixed_batches()
    data = b"".join(batches)
    expected = [(VALUES.count(b, read_batch_header(b, 0)), JSON_LINES.count(b, read_batch_header(b, 0)))
                for b in batches]
    for start in range(len(batches)):
        at = sum(map(len, batches[:start]))
        first = read_batch_header(batches[start], 0)
        rows, n, consumed = count_run(data[at:], first.base_offset, 1 << 62)
        counted = array("q")
        counted.frombytes(rows)
        assert consumed == sum(map(len, batches[start : start + n]))
        assert [tuple(counted[4 * k + 2 : 4 * k + 4]) for k in range(n)] == expected[start : start + n]
        for fmt in (VALUES, JSON_LINES):
            rendered, m, _, _, _ = render_run(data[at:], fmt is JSON_LINES, first.base_offset, 1 << 62)
            run = batches[start : start + m]
            assert rendered == b"".join(fmt.render(b, read_batch_header(b, 0)) for b in run)
    # the run stops at the first batch it does not take: a damaged CRC, offsets going back, the limit
    damaged = bytearray(data)
    damaged[len(batches[0]) + 30] ^= 1
    assert count_run(bytes(damaged), 0, 1 << 62)[1] == 1
    assert count_run(data, 1, 1 << 62)[1] == 0
    assert count_run(data, 0, 3)[1] == 2 and count_run(data, 0, 2)[1] == 1  # offsets below the limit


def test_a_log_of_mixed_batches_reads_as_the_python_decoders_render_it(tmp_path: Path) -> None:
    with open_log(tmp_path / "t-0", config(segment_bytes=1 << 20)) as lg:
        batches = mixed_batches()
        segment = lg.active_segment
        for batch in batches:
            header = read_batch_header(batch, 0)
            segment.append(batch, header.last_offset, header.max_timestamp)
        fresh = SegmentTotals(segment)
        fresh.catch_up()
        assert fresh.frontier == segment.totals.frontier
        for fmt in (VALUES, JSON_LINES):
            expected = b"".join(fmt.render(b, read_batch_header(b, 0)) for b in batches)
            start, data = segment.totals.window(0, fmt)
            assert (start, data) == (0, expected)


def test_checkpoints_of_a_c_run_are_those_of_a_batch_by_batch_count(tmp_path: Path) -> None:
    """The checkpoints numpy places over a run of batches are those the rule (every 128 batches, or
    256 KiB of file) gives batch by batch, budgets and goals included."""
    with open_log(tmp_path / "t-0", config(segment_bytes=1 << 30)) as lg:
        for i in range(3000):  # batches of varied sizes: some stretches end by count, some by bytes
            lg.append_values([b"x" * (1 + (i * 7919) % 3000)] * (1 + i % 3))
        segment = lg.active_segment
        by_batch = SegmentTotals(segment)
        for header, data in segment.iter_batches(0):
            plain = header.at(0)
            by_batch._advance(header, (VALUES.count(data, plain), JSON_LINES.count(data, plain)))
        in_steps = SegmentTotals(segment)
        assert not in_steps.catch_up(max_batches=1000)
        assert not in_steps.catch_up(until=Goal("values", in_steps.frontier.values + 123_456))
        assert not in_steps.catch_up(until=Goal("offset", in_steps.frontier.offset + 777))
        assert in_steps.catch_up()
        for totals in (in_steps, segment.totals):
            assert totals.state()[0] == by_batch.state()[0]
            assert [list(a) for a in totals.state()[3]] == [list(a) for a in by_batch.state()[3]]


def test_long_c_runs_let_other_threads_run() -> None:
    """A count (or a render) of a 4 MiB chunk takes milliseconds; holding the GIL meanwhile, the
    background count stalled every request of the mount. With a switch interval too long to preempt,
    the main thread gets the GIL during the runs only if they release it."""
    import threading

    runs = b"".join(encode_values([b"x" * 16] * 1000, k * 1000, 1) for k in range(160))  # 3.6 MB
    done = threading.Event()

    def work() -> None:
        for _ in range(40):
            count_run(runs, 0, 1 << 62)
            render_run(runs, True, 0, 1 << 62)
        done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        worker = threading.Thread(target=work)
        worker.start()
        turns = 0
        while not done.is_set():
            time.sleep(0.0005)  # gives up the GIL; takes it back only when the worker lets go
            turns += 1
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert turns >= 20, turns


def test_read_committed_totals_of_sealed_segments_are_kept_across_a_clean_restart(
    tmp_path: Path, monkeypatch
) -> None:
    """The bytes read_committed hides in a sealed segment go to its totals file with a checksum of the
    aborted ranges: a clean restart takes them without reading the segment (only the active one is
    counted again); under other ranges they are counted again, never trusted blindly."""
    from support.transactions import write_txn_log

    from seglogfs import hidden_totals
    from seglogfs.read_committed import READ_COMMITTED

    monkeypatch.setattr(TotalsCounter, "watch", lambda self, lg: None)  # counted here, in this thread
    directory = tmp_path / "txn-0"
    expected = write_txn_log(directory, 300)
    counted: list[int] = []
    real_count = hidden_totals._count

    def count(segment, *args):
        counted.append(segment.base_offset)
        return real_count(segment, *args)

    monkeypatch.setattr(hidden_totals, "_count", count)

    def open_and_count(clean: bool = True) -> tuple[Log, list[hidden_totals.HiddenTotal | None]]:
        lg = Log.open(directory, config(), clean_shutdown=clean)
        for segment in lg.segments:
            segment.totals.catch_up()
            lg.save_sealed_totals(segment)
        hidden_totals.want(lg)
        hidden_totals.count_log(lg)
        stream = ValueStream(lg, isolation=READ_COMMITTED)
        assert stream.size() == len(stream.read(0, 1 << 30)) == len(expected)
        return lg, [hidden_totals.hidden_total(s) for s in lg.segments]

    lg, first = open_and_count(clean=False)  # a broker's files: recovery finds the transactions
    bases = [s.base_offset for s in lg.segments]
    assert len(bases) == 4 and counted == bases
    lg.close()
    counted.clear()
    lg, again = open_and_count()  # the sealed ones from their files, the active one read again
    assert counted == bases[-1:] and again[:-1] == first[:-1]
    lg.close()
    monkeypatch.setattr(hidden_totals, "_ranges_key", lambda overlapping: 12345)  # other ranges
    counted.clear()
    lg, _ = open_and_count()
    assert counted == bases
    lg.close()


def test_opening_many_logs_looks_at_each_new_log_once(tmp_path: Path, monkeypatch) -> None:
    """Each open wakes the counter; it looked at every log watched so far at each wake, which made
    opening 5,000 logs quadratic (34 s instead of 5). A wake looks at the new logs only."""
    from seglogfs.log_manager import LogManager

    with LogManager(tmp_path / "data") as manager:
        for i in range(300):
            manager.create_log(f"many{i}-0").append_values([b"a", b"b"])
    looks: list[str] = []
    real = TotalsCounter._count

    def count(self, lg):
        looks.append(lg.name)
        return real(self, lg)

    monkeypatch.setattr(TotalsCounter, "_count", count)
    with LogManager(tmp_path / "data") as manager:
        assert len(manager.logs) == 300
    # each log once as it opened, and at most a few idle looks over all of them meanwhile
    assert len(looks) <= 300 * 4, len(looks)

"""The engine's view totals (seglogfs.segment_totals, totals_file, totals_counter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from support.engine_helpers import config, open_log

from seglogfs.log import Log
from seglogfs.segment_totals import CHECKPOINT_BATCHES, SegmentTotals
from seglogfs.stream_format import JSON_LINES, VALUES
from seglogfs.totals_file import TOTALS_SUFFIX, load, totals_path
from seglogfs.value_stream import ValueStream

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


def test_a_kill_after_rolls_recounts_only_the_active_segment(tmp_path: Path) -> None:
    """The totals of a sealed segment are written at its roll: after kill -9 only what recovery
    scanned (the active segment) is counted again."""
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

"""``seglogfs verify`` on the real Kafka data dir and on damaged copies, run as a subprocess."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from support.verify_fixtures import SEG, TESTDATA, batches_of, build_two_segments, writable_copy

from seglogfs.tools.verify import Progress
from seglogfs.verifier import verify_paths


def run_verify(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "seglogfs.tools.cli", "verify", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_real_data_dir_is_sound(tmp_path):
    data = writable_copy(TESTDATA, tmp_path / "data")
    proc = run_verify(data)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert "54 log(s)" in proc.stderr and "1930 batch(es)" in proc.stderr and "OK" in proc.stderr
    assert "\r" not in proc.stderr  # no progress bar when stderr is not a terminal
    # a log dir and single segment files are accepted too
    part = data / "__cluster_metadata-0"
    assert run_verify(part).returncode == 0
    assert run_verify(part / f"{SEG}.log", part / f"{SEG}.timeindex").returncode == 0


def test_flipped_byte_inside_a_batch(tmp_path):
    part = writable_copy(TESTDATA / "__consumer_offsets-15", tmp_path / "__consumer_offsets-15")
    log = part / f"{SEG}.log"
    data = bytearray(log.read_bytes())
    pos, size, _, _ = batches_of(bytes(data))[10]
    data[pos + size - 5] ^= 0x01  # inside the records, covered by the CRC
    log.write_bytes(bytes(data))
    proc = run_verify(tmp_path)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{log}: position {pos}: ")
    assert "CRC" in lines[0]


def test_corrupt_offset_index_entry(tmp_path):
    part = writable_copy(TESTDATA / "__cluster_metadata-0", tmp_path / "__cluster_metadata-0")
    index = part / f"{SEG}.index"
    raw = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from(">ii", raw, 3 * 8)
    struct.pack_into(">ii", raw, 3 * 8, rel, pos + 1)  # entry 3 points inside a batch
    index.write_bytes(bytes(raw))
    proc = run_verify(part)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"{index}: position 24: entry 3 (offset {rel}, position {pos + 1}): no batch starts there"
    ]


def test_corrupt_time_index_entry(tmp_path):
    part = writable_copy(TESTDATA / "__consumer_offsets-15", tmp_path / "__consumer_offsets-15")
    tindex = part / f"{SEG}.timeindex"
    raw = bytearray(tindex.read_bytes())
    ts, rel = struct.unpack_from(">qi", raw, 2 * 12)
    struct.pack_into(">q", raw, 2 * 12, ts + 1)  # still increasing, but not the batch's max timestamp
    tindex.write_bytes(bytes(raw))
    proc = run_verify(part)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"{tindex}: position 24: entry 2 (timestamp {ts + 1}, offset {rel}): "
        f"the batch with lastOffset {rel} has max timestamp {ts}"
    ]


def test_truncated_log_and_missing_index(tmp_path):
    part = writable_copy(TESTDATA / "__consumer_offsets-15", tmp_path / "__consumer_offsets-15")
    log = part / f"{SEG}.log"
    data = log.read_bytes()
    log.write_bytes(data[:-10])
    (part / f"{SEG}.timeindex").unlink()
    last_pos = batches_of(data)[-1][0]
    proc = run_verify(part)
    assert proc.returncode == 1
    out = proc.stdout.splitlines()
    assert (
        f"{log}: position {last_pos}: {len(data) - 10 - last_pos} bytes after the last complete batch"
        in "\n".join(out)
    )
    # a missing index is no damage (recovery rebuilds it): a note, beside the damage that fails the run
    assert f"{part / (SEG + '.timeindex')}: note: missing (recovery rebuilds it)" in out


@pytest.fixture
def two_segments(tmp_path) -> Path:
    """The consumer-offsets log split into an inactive and an active segment, indexes by Kafka's rule."""
    return build_two_segments(tmp_path)


def test_missing_path_fails(tmp_path):
    proc = run_verify(tmp_path / "nope")
    assert proc.returncode == 1
    assert "no such file or directory" in proc.stdout


def test_progress_bar_draws_to_a_stream():
    stream = io.StringIO()
    bar = Progress(4 << 20, stream, width=10)
    bar.start_file("events-0/00000000000000000000.log")
    bar.advance(2 << 20)
    bar.finish()
    text = stream.getvalue()
    assert text.startswith("\r[..........]   0.0%")
    assert "\r[##########] 100.0% 4.0 MiB/4.0 MiB events-0/00000000000000000000.log" in text
    assert text.endswith("\n")


def test_dir_holding_only_an_index_is_damage_not_a_traceback(tmp_path):
    part = tmp_path / "events-0"
    part.mkdir()
    (part / f"{SEG}.index").write_bytes(b"")
    proc = run_verify(part)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.splitlines()[0] == f"{part}: no .log files: the log's records are gone ({SEG}.index)"


def test_data_dir_with_a_log_that_lost_every_log_file(tmp_path):
    data = writable_copy(TESTDATA, tmp_path / "data")
    part = data / "__consumer_offsets-15"
    (part / f"{SEG}.log").unlink()
    proc = run_verify(data)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"{part}: no .log files: the log's records are gone (")
    # a lost .log between (or after) the remaining segments is damage too; one below them is a leftover
    # of retention (Kafka deletes it at load)
    logs = tmp_path / "two"
    writable_copy(part.parent / "__cluster_metadata-0", logs)
    (logs / "00000000000000099999.index").write_bytes(b"")
    report = verify_paths([logs])
    assert [str(p.path.name) for p in report.problems] == ["00000000000000099999.index"]


def test_missing_indexes_are_notes_unless_strict(tmp_path):
    """A Kafka 2.1 data dir whose index files are absent (brokers rebuild them) is sound."""
    data = writable_copy(TESTDATA, tmp_path / "data")
    removed = sorted([*data.glob("*/*.index"), *data.glob("*/*.timeindex")])
    for path in removed:
        path.unlink()
    proc = run_verify(data)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    nonempty = [p for p in removed if p.with_suffix(".log").stat().st_size > 0]
    assert lines == [f"{p}: note: missing (recovery rebuilds it)" for p in nonempty]
    assert len(nonempty) == 4
    assert "OK, 4 note(s)" in proc.stderr
    strict = subprocess.run(
        [sys.executable, "-m", "seglogfs.tools.cli", "verify", "--strict", str(data)],
        capture_output=True, text=True, check=False,
    )
    assert strict.returncode == 1 and strict.stdout.splitlines() == lines


# --- files that are not regular files: damage, never "OK", never a hang ------------------------------


def run_verify_bounded(*paths: Path) -> subprocess.CompletedProcess[str]:
    """``seglogfs verify`` as the user runs it, failing the test (not hanging it) after 60 s."""
    return subprocess.run(
        [sys.executable, "-m", "seglogfs.tools.cli", "verify", *map(str, paths)],
        capture_output=True, text=True, check=False, timeout=60,
    )


def test_a_directory_in_place_of_a_log_file_is_damage(two_segments):
    second = sorted(two_segments.glob("*.log"))[1]
    second.unlink()
    second.mkdir()  # its .index and .timeindex stay
    proc = run_verify_bounded(two_segments)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{second}: a directory, not a regular file" in proc.stdout, proc.stdout


@pytest.mark.parametrize("suffix", [".index", ".timeindex", ".log", ".snapshot"])
def test_a_fifo_in_place_of_a_segment_file_is_damage_not_a_hang(two_segments, suffix):
    victim = sorted(two_segments.glob("*.log"))[1].with_suffix(suffix)
    victim.unlink(missing_ok=True)
    os.mkfifo(victim)
    for target in (two_segments, two_segments.parent, victim):
        proc = run_verify_bounded(target)
        assert proc.returncode == 1, (target, proc.stdout + proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert f"{victim}: a FIFO, not a regular file" in proc.stdout, (target, proc.stdout)


def test_a_compacted_log_verifies(tmp_path):
    """`seglogfs verify` on a log as the cleaner leaves it (support.compacted_segments): exit 0, no
    finding; the same log with a batch going back before the previous one's end: exit 1, named."""
    from support.compacted_segments import compacted_log_bytes, kafka_python_batch, write_compacted_log

    part = tmp_path / "data" / "users-0"
    write_compacted_log(part)
    proc = run_verify(tmp_path / "data")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "" and "4 batch(es)" in proc.stderr and "OK" in proc.stderr
    back = kafka_python_batch(20, [(0, b"z", b"9")], 1_700_000_000_030)  # 20 < 25, the log end so far
    log_path = write_compacted_log(tmp_path / "data2" / "users-0", compacted_log_bytes() + back)
    proc = run_verify(log_path.parent)
    assert proc.returncode == 1
    assert "batch offsets 20..20 do not follow the previous batch (next offset 25)" in proc.stdout
    assert str(log_path) in proc.stdout

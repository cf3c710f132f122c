"""Readers of a log while it is appended to, rolled and retained: every view equals the log.

Driven through the real mount with real programs (cat, tail, ls) in other processes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.mount_fixture import Seglogd, fuse_required
from support.mount_fixture import seglogd as seglogd  # the fixture

from seglogfs.config import LogConfig
from seglogfs.errors import OffsetOutOfRangeError
from seglogfs.log import Log
from seglogfs.views.value_stream import QUIET_BEFORE_REBASE_S, ValueStream

pytestmark = [pytest.mark.fuse, fuse_required]


def _line(i: int) -> bytes:
    return f"{i:06d} {'x' * (i % 37)}\n".encode()


def _write_lines(append: Path, lines: int) -> None:
    """One os.write per line, from another process (as a shell's echo loop would)."""
    code = textwrap.dedent(f"""
        import os
        fd = os.open({str(append)!r}, os.O_WRONLY | os.O_APPEND)
        for i in range({lines}):
            os.write(fd, f"{{i:06d}} {{'x' * (i % 37)}}\\n".encode())
        os.close(fd)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_records_stays_exact_when_read_during_rolls(seglogd) -> None:
    """Issue 7 #1: a `cat records` loop during appends with 4 KiB segments must leave `records` exact.

    The value stream's scan of the then-active segment ran on into the segment rolled after it and
    filed those batches under the wrong file: duplicated, torn or missing lines, or EIO."""
    mnt: Seglogd = seglogd(logs={"r-0": {"segment.bytes": 4096}})
    log = mnt / "r-0"
    reader = subprocess.Popen(
        ["bash", "-c", f"while :; do cat {log}/records > /dev/null 2>&1; done"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    lines = 6_000
    try:
        _write_lines(log / "append", lines)
    finally:
        os.killpg(reader.pid, signal.SIGKILL)  # the loop and its cat
        reader.wait()
    expected = b"".join(_line(i) for i in range(lines))
    got = subprocess.run(["cat", f"{log}/records"], capture_output=True, check=False, timeout=60)
    assert got.returncode == 0, got.stderr
    got_lines = got.stdout.split(b"\n")
    assert got.stdout == expected, (
        f"records has {len(got_lines) - 1} lines, {lines} written; first difference at byte "
        f"{next((i for i, (a, b) in enumerate(zip(got.stdout, expected, strict=False)) if a != b), None)}"
    )


def _retained_log(directory: Path, delay_ms: int) -> Log:
    """A log of 200 records over 1 KB segments, retention.bytes keeping about three of them."""
    config = LogConfig.from_mapping(
        {"segment.bytes": 1000, "retention.bytes": 2500, "file.delete.delay.ms": delay_ms}
    )
    lg = Log.open(directory, config, create=True)
    for n in range(200):
        lg.append_values([campaign_value(n)])
    return lg


def test_stream_positions_never_shift_under_retention(tmp_path: Path) -> None:
    """Retention shifts no byte of `records`: a reader in the middle of a deleted segment finishes it
    (its files are kept for file.delete.delay.ms), and a new reader starts at the log start offset."""
    with _retained_log(tmp_path / "s-0", 60_000) as lg:
        stream = ValueStream(lg)
        follower = stream.reader()
        head = follower.read(0, 50)  # mid-line, in the first segment
        size = stream.size()
        assert lg.delete_old_segments() > 0 and lg.start_offset > 0
        assert stream.size() == size
        assert check_run(head + follower.read(50, 10**9)) == (0, 200)
        assert check_run(stream.reader().read(0, 10**9)) == (lg.start_offset, 200)


def test_stream_reader_overtaken_by_retention_never_shows_a_torn_line(tmp_path: Path) -> None:
    """Once a deleted segment's files are gone, a reader in the middle of one of its records gets
    OffsetOutOfRangeError; one between records gets end of file, then goes on from the log start."""
    with _retained_log(tmp_path / "s-0", 0) as lg:
        stream = ValueStream(lg)
        torn, whole = stream.reader(), stream.reader()
        first = whole.read(0, 9)  # "0000000-\n": offset 0 has an empty value
        assert first == campaign_value(0) + b"\n"
        torn.read(0, 20)
        for n in range(200, 400):
            lg.append_values([campaign_value(n)])
        assert lg.delete_old_segments() > 0  # purged at once: file.delete.delay.ms is 0
        with pytest.raises(OffsetOutOfRangeError):
            torn.read(20, 100)
        assert whole.read(9, 100) == b""
        rest = whole.read(9, 10**9)
        assert check_run(rest) == (lg.start_offset, 400)



def test_stream_reader_never_jumps_silently_over_records_it_never_saw(tmp_path: Path) -> None:
    """Segments appended, deleted and purged between two looks at the stream hold records no reader
    will see: a follower at the end of what it read gets end of file first, then the log start."""
    with _retained_log(tmp_path / "s-0", 0) as lg:
        stream = ValueStream(lg)
        follower = stream.reader()
        seen = follower.read(0, 10**9)
        assert check_run(seen) == (0, 200)
        for n in range(200, 600):
            lg.append_values([campaign_value(n)])
        assert lg.delete_old_segments() > 0 and lg.start_offset > 200
        assert follower.read(len(seen), 100) == b""
        assert check_run(follower.read(len(seen), 10**9)) == (lg.start_offset, 600)


# ==================================================================== the standing campaign
#
# Writers append to two logs with 4 KiB segments, one kept small by retention.bytes, one emptied by
# retention.ms, while other processes read them: a `cat records` loop, `tail -c +1 -f records` (one
# from the start, one started midway), random `cat by-offset/<n>` and `ls by-offset`. The value of
# record n names n, so every view can be checked against the log:
# - a `records` view (cat, tail) is a contiguous run of exact lines, in offset order, with no torn,
#   repeated or missing line; a cat starts at the log start offset of the moment it began (between the
#   start offsets seen before and after it); a tail started before any write starts at offset 0;
# - `by-offset/<n>` is record n's value exactly, or ENOENT when retention removed n (start > n after);
# - `ls by-offset` is a contiguous range of offsets below the end, each resolving as above;
# - after the writers stop, `cat records` is the log exactly: what the engine reads from the data dir
#   after a clean stop.

CAMPAIGN_SEED = int(os.environ.get("SEGLOG_CAMPAIGN_SEED", "7"))
CAMPAIGN_LINES = 15_000  # per log (sized for the suite)
CAMPAIGN_LOGS = {
    # file.delete.delay.ms: how far a reader may lag behind retention (Kafka's grace for readers in
    # the middle of a deleted segment) - generous, as a loaded CI machine stalls processes for seconds
    "ret-0": {"segment.bytes": 4096, "retention.bytes": 16384, "file.delete.delay.ms": 5000},
    "age-0": {"segment.bytes": 4096, "retention.ms": 2000, "file.delete.delay.ms": 5000},
}


def campaign_value(n: int) -> bytes:
    """The value of record n: its offset, then a length that varies with it."""
    return f"{n:07d}-".encode() + bytes([97 + n % 26]) * (n * 7919 % 53)


def check_run(blob: bytes, what: str = "") -> tuple[int, int]:
    """(first, end) offsets of ``blob`` when it is a contiguous run of exact record lines; else
    AssertionError saying where it is wrong (``what`` names the view). An empty blob is (-1, -1)."""
    if not blob:
        return -1, -1
    what = f"{what}: " if what else ""
    assert blob.endswith(b"\n"), f"{what}torn last line {blob[-80:]!r}"
    lines = blob.split(b"\n")[:-1]
    try:
        first = int(lines[0][:7])
    except ValueError:
        raise AssertionError(f"{what}first line is no record: {lines[0][:80]!r}") from None
    for k, line in enumerate(lines):
        if line != campaign_value(first + k):
            raise AssertionError(
                f"{what}line {k} (offset {first + k} expected): {line[:80]!r} instead of "
                f"{campaign_value(first + k)[:80]!r}"
            )
    return first, first + len(lines)


def _offsets(log: Path) -> tuple[int, int]:
    info = json.loads((log / "info").read_bytes())
    return info["start_offset"], info["end_offset"]


def _role_write(log: Path, lines: int, seed: int) -> None:
    """Append ``lines`` records, mostly one os.write a line, some writes of many lines."""
    rng = random.Random(seed)
    fd = os.open(log / "append", os.O_WRONLY | os.O_APPEND)
    n = 0
    while n < lines:
        count = 1 if rng.random() < 0.8 else min(rng.randint(2, 60), lines - n)
        os.write(fd, b"".join(campaign_value(i) + b"\n" for i in range(n, n + count)))
        n += count
        if rng.random() < 0.01:
            time.sleep(rng.random() * 0.2)  # let retention catch up now and then
    os.close(fd)


def _role_cat(logs: list[Path], stop: Path, seed: int) -> list[str]:
    """`cat records` in a loop until ``stop`` exists; what was wrong."""
    errors: list[str] = []
    rounds = 0
    while not stop.exists() and len(errors) < 5:
        for log in logs:
            start_before, _ = _offsets(log)
            got = subprocess.run(["cat", str(log / "records")], capture_output=True, check=False)
            start_after, end_after = _offsets(log)
            rounds += 1
            try:
                assert got.returncode == 0, f"cat failed: {got.stderr!r}"
                first, end = check_run(got.stdout)
                if first >= 0:
                    assert start_before <= first <= start_after, (
                        f"starts at {first}, log start went {start_before} -> {start_after}"
                    )
                    assert end <= end_after, f"ends at {end}, log end {end_after}"
            except AssertionError as e:
                errors.append(f"seed {seed}: cat {log.name}/records (round {rounds}): {e}")
    return errors


def _role_probe(logs: list[Path], stop: Path, seed: int) -> list[str]:
    """Random `cat by-offset/<n>` and `ls by-offset` until ``stop`` exists; what was wrong."""
    rng = random.Random(seed)
    errors: list[str] = []

    def check_offset(log: Path, n: int, why: str) -> None:
        got = subprocess.run(["cat", str(log / "by-offset" / str(n))], capture_output=True, check=False)
        if got.returncode == 0:
            assert got.stdout == campaign_value(n), f"{why}: by-offset/{n} gave {got.stdout[:80]!r}"
        else:
            start, _ = _offsets(log)
            assert b"No such file" in got.stderr and start > n, (
                f"{why}: by-offset/{n} failed ({got.stderr!r}) while the log starts at {start}"
            )

    while not stop.exists() and len(errors) < 5:
        for log in logs:
            try:
                start, end = _offsets(log)
                if end > 0:
                    n = rng.randrange(max(0, start - 20), end)  # some just retained away
                    check_offset(log, n, "random")
                listed = subprocess.run(["ls", str(log / "by-offset")], capture_output=True, check=True)
                names = sorted(int(x) for x in listed.stdout.split())
                _, end_after = _offsets(log)
                if names:
                    assert names == list(range(names[0], names[-1] + 1)), f"ls gaps: {names[:5]}..."
                    assert names[-1] < end_after, f"ls lists {names[-1]}, log end {end_after}"
                    for n in {names[0], names[-1], rng.choice(names)}:
                        check_offset(log, n, "listed")
            except (AssertionError, subprocess.CalledProcessError) as e:
                errors.append(f"seed {seed}: {log.name}: {e}")
    return errors


def _tail(log: Path, out: Path) -> subprocess.Popen:
    with open(out, "wb") as f:
        return subprocess.Popen(["tail", "-c", "+1", "-s", "0.2", "-f", str(log / "records")], stdout=f)


def _stop_tail(tail: subprocess.Popen, out: Path, end: int, seed: int) -> bytes:
    """Wait until the tail has shown record ``end - 1``, then stop it; its output."""
    last = campaign_value(end - 1) + b"\n"
    deadline = time.monotonic() + 20
    while not out.read_bytes().endswith(last) and time.monotonic() < deadline:
        time.sleep(0.1)
    tail.kill()
    tail.wait()
    got = out.read_bytes()
    assert got.endswith(last), f"seed {seed}: {out.name} stopped at {got[-80:]!r}, log end {end}"
    return got


@pytest.mark.slow
def test_campaign_every_view_equals_the_log_during_appends_rolls_retention(seglogd, tmp_path: Path) -> None:
    seed = CAMPAIGN_SEED
    mnt: Seglogd = seglogd(logs=CAMPAIGN_LOGS)
    logs = [mnt / name for name in CAMPAIGN_LOGS]
    stop = tmp_path / "stop"
    # This file is the helpers' script: it imports ``support`` (tests/), which pytest puts on the path.
    tests_dir = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")])}
    script = [sys.executable, __file__]
    outs = {log.name: tmp_path / f"tail-{log.name}" for log in logs}
    tails = {log.name: (_tail(log, outs[log.name]), outs[log.name]) for log in logs}
    readers = [
        subprocess.Popen(
            [*script, role, str(stop), str(seed), *map(str, logs)], stdout=subprocess.PIPE, env=env
        )
        for role in ("cat", "probe")
    ]
    writers = [
        subprocess.Popen([*script, "write", str(log), str(CAMPAIGN_LINES), str(seed + k)], env=env)
        for k, log in enumerate(logs)
    ]
    late_tail = None
    try:
        time.sleep(2)  # retention has run by now: a tail started now begins after the log's first records
        late_tail = _tail(logs[0], tmp_path / "tail-late")
        for writer in writers:
            assert writer.wait(120) == 0, f"seed {seed}: a writer failed"
    finally:
        stop.touch()
        errors = []
        for reader in readers:
            out, _ = reader.communicate(timeout=60)
            errors += json.loads(out or b'["reader crashed"]')
        for tail, _ in tails.values():
            if tail.poll() is None and errors:
                tail.kill()
        if late_tail is not None and errors:
            late_tail.kill()
    assert not errors, "\n".join(errors)

    for log in logs:
        tail, out = tails[log.name]
        got = _stop_tail(tail, out, CAMPAIGN_LINES, seed)
        what = f"seed {seed}: tail -f {log.name}/records; daemon log: {mnt.stderr()[-2000:]}"
        first, end = check_run(got, what)
        assert (first, end) == (0, CAMPAIGN_LINES), f"seed {seed}: tail of {log.name} shows [{first}, {end})"
    got = _stop_tail(late_tail, tmp_path / "tail-late", CAMPAIGN_LINES, seed)
    assert check_run(got, f"seed {seed}: late tail")[1] == CAMPAIGN_LINES, f"seed {seed}: late tail"

    # After the writers: `cat records` is the log exactly, as the engine reads it after a clean stop.
    # ret-0 settles after one retention pass; age-0 once retention.ms has emptied it.
    views: dict[str, tuple[int, bytes]] = {}
    time.sleep(1.5)  # one more retention pass, over what the last appends made deletable
    deadline = time.monotonic() + 15
    for log in logs:
        while True:
            start, end = _offsets(log)
            view = subprocess.run(["cat", str(log / "records")], capture_output=True, check=True).stdout
            settled = _offsets(log)[0] == start and (log.name != "age-0" or start == end)
            if settled or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        views[log.name] = (start, view)
    # With no reader left, `records` forgets what retention removed: its size is the view's again and
    # `tail -n` (which reads backwards from st_size) finds the last lines.
    time.sleep(QUIET_BEFORE_REBASE_S + 0.5)
    ret = logs[0]
    start, view = views[ret.name]
    assert os.stat(ret / "records").st_size == len(view), f"seed {seed}: st_size of {ret.name}/records"
    last = subprocess.run(["tail", "-n", "100", str(ret / "records")], capture_output=True, check=True).stdout
    assert check_run(last, f"seed {seed}: tail -n 100") == (CAMPAIGN_LINES - 100, CAMPAIGN_LINES)
    assert mnt.stop() == 0, mnt.stderr()
    for name, (start, view) in views.items():
        with Log.open(mnt.data_dir / name, read_only=True) as lg:
            assert (lg.start_offset, lg.end_offset) == (start, CAMPAIGN_LINES), f"seed {seed}: {name}"
            values = b"".join((r.value or b"") + b"\n" for r in lg.iter_records())
        assert view == values, f"seed {seed}: cat {name}/records is not the log from offset {start}"
        if view:
            assert check_run(view, f"seed {seed}: {name}") == (start, CAMPAIGN_LINES), f"seed {seed}: {name}"
    assert "Traceback" not in mnt.stderr(), mnt.stderr()


if __name__ == "__main__":  # the campaign's reader and writer processes
    role, *args = sys.argv[1:]
    if role == "write":
        _role_write(Path(args[0]), int(args[1]), int(args[2]))
    else:
        stop_file, seed_arg, *log_args = args
        work = _role_cat if role == "cat" else _role_probe
        print(json.dumps(work([Path(a) for a in log_args], Path(stop_file), int(seed_arg))))

"""Damaged batches at rest and the ``records`` view: a damaged batch costs only its own records.

The view skips a damaged batch (it contributes no bytes; the daemon names file, position and the
offsets skipped, once) and goes on with the next intact one, so ``cat records`` and ``stat records``
never fail because of damage elsewhere. Engine side, a walk over a sealed segment never mistakes
damage for a torn tail: ``Log.iter_batches`` / ``iter_records`` raise instead of silently dropping
the batches after it.
"""

from __future__ import annotations

import errno
import os
import struct
import subprocess
from pathlib import Path

import pytest
from support.engine_helpers import config
from support.mount_fixture import fuse_required, make_seglogd, read_stdout_until

from seglogfs.errors import CorruptRecordError
from seglogfs.log_manager import LogManager
from seglogfs.records import BatchHeader, iter_batch_headers

LOG = "events-0"
CFG = config(segment_bytes=6000, index_interval_bytes=1000)
BATCHES, PER_BATCH = 120, 3


def value_of(offset: int) -> bytes:
    """A value that names its own offset."""
    return (b"%010d|" % offset).ljust(60, b"v")


def build(data_dir: Path) -> int:
    """A cleanly closed log of several segments; returns its end offset."""
    with LogManager(data_dir, CFG) as manager:
        log = manager.create_log(LOG)
        for _ in range(BATCHES):
            start = log.end_offset
            log.append_values([value_of(start + i) for i in range(PER_BATCH)])
        return log.end_offset


def segment_batches(data_dir: Path) -> list[tuple[Path, list[BatchHeader]]]:
    return [
        (path, list(iter_batch_headers(path.read_bytes(), path=path)))
        for path in sorted((data_dir / LOG).glob("*.log"))
    ]


def damage(path: Path, header: BatchHeader, kind: str) -> None:
    """Damage one batch at rest: its length field, its CRC (a flipped byte) or its baseOffset."""
    position, data = {
        "length-huge": (header.position + 8, struct.pack(">i", 2**30)),
        "length-small": (header.position + 8, struct.pack(">i", header.size - 12 - 40)),
        "crc": (header.position + 17, b"\xde\xad"),
        "base-offset": (header.position, struct.pack(">q", header.base_offset + 1)),
    }[kind]
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


@pytest.mark.parametrize("kind", ["length-huge", "length-small", "crc"])
def test_iter_records_never_silently_drops_what_follows_damage_in_a_sealed_segment(
    tmp_path: Path, kind: str
) -> None:
    data_dir = tmp_path / "d"
    build(data_dir)
    path, headers = segment_batches(data_dir)[1]
    damaged = headers[len(headers) // 2]
    damage(path, damaged, kind)
    with LogManager(data_dir, CFG) as manager:
        log = manager.get(LOG)
        with pytest.raises(CorruptRecordError) as raised:
            seen = [record.offset for record in log.iter_records()]
            pytest.fail(f"{kind}: iter_records ended quietly after offset {seen[-1]} of {log.end_offset}")
        assert raised.value.path == str(path) and raised.value.position == damaged.position, kind
        # Records before the damage still come, and a walk from past it reads on to the end.
        after = headers[len(headers) // 2 + 1].base_offset
        assert [r.offset for r in log.iter_records(after)] == list(range(after, log.end_offset)), kind
        assert [r.value for r in log.iter_records(0, damaged.base_offset)] == [
            value_of(o) for o in range(damaged.base_offset)
        ]


LAST = -1  # the active segment
PLANS = {
    "sealed-length": [(1, "length-huge")],
    "sealed-crc": [(1, "crc")],
    "sealed-base-offset": [(1, "base-offset")],
    "active-crc": [(LAST, "crc")],
    "all": [(1, "length-huge"), (2, "crc"), (3, "base-offset"), (4, "length-small"), (LAST, "crc")],
}


@fuse_required
@pytest.mark.parametrize("plan", PLANS.values(), ids=PLANS.keys())
def test_cat_records_skips_only_the_damaged_batches(tmp_path: Path, plan: list[tuple[int, str]]) -> None:
    """`cat records` (twice), `stat`, `tail -n` and an append after the damage: every intact record
    exactly once, in order; each damaged batch named once in the daemon's log; no traceback."""
    data_dir = tmp_path / "data"
    end = build(data_dir)
    segments = segment_batches(data_dir)
    assert len(segments) >= 6, segments
    lost: set[int] = set()
    damaged: list[tuple[Path, int]] = []
    for k, kind in plan:
        path, headers = segments[k]
        header = headers[len(headers) // 2]
        damage(path, header, kind)
        lost.update(range(header.base_offset, header.last_offset + 1))
        damaged.append((path, header.position))
    expected = b"".join(value_of(o) + b"\n" for o in range(end) if o not in lost)

    daemon = make_seglogd(tmp_path, data_dir=data_dir, defaults={"segment.bytes": 6000}, logs={LOG: {}})
    try:
        daemon.start()
        records = daemon / LOG / "records"
        for attempt in range(2):
            cat = subprocess.run(["cat", str(records)], capture_output=True, timeout=60, check=False)
            assert cat.returncode == 0, f"cat #{attempt}: {cat.stderr!r}"
            got, lines = cat.stdout, cat.stdout.splitlines()
            missing = sorted(set(expected.splitlines()) - set(lines))[:3]
            assert got == expected, (
                f"cat #{attempt}: {len(lines)} lines, expected {len(expected.splitlines())}; "
                f"{len(lines) - len(set(lines))} repeated; missing e.g. {missing}"
            )
            assert os.stat(records).st_size == len(expected)
        stat = subprocess.run(["stat", "-c", "%s", str(records)], capture_output=True, text=True, check=False)
        assert stat.returncode == 0 and int(stat.stdout) == len(expected), stat
        tail = subprocess.run(["tail", "-n", "2", str(records)], capture_output=True, check=False)
        assert tail.returncode == 0 and tail.stdout.splitlines() == expected.splitlines()[-2:], tail
        follower = subprocess.Popen(["tail", "-c", "+1", "-f", str(records)], stdout=subprocess.PIPE)
        try:
            with open(daemon / LOG / "append", "ab") as append:
                append.write(b"after the damage\n")
            wanted = expected + b"after the damage\n"
            followed = read_stdout_until(follower, lambda b: len(b) >= len(wanted))
        finally:
            follower.kill()
            follower.wait()
        assert followed == expected + b"after the damage\n", f"tail -f: {len(followed)} bytes"
        assert records.read_bytes() == followed
        assert daemon.proc is not None and daemon.proc.poll() is None, "seglogd died"
    finally:
        daemon.cleanup()
    stderr = daemon.stderr()
    assert "Traceback" not in stderr, stderr
    for path, position in damaged:
        where = f"{path}: position {position}:"
        named = [line for line in stderr.splitlines() if "records" in line and where in line]
        assert len(named) == 1, f"{path} position {position}: {named}\n{stderr}"


@fuse_required
def test_a_segment_cut_under_the_running_daemon_costs_only_its_lost_records(tmp_path: Path) -> None:
    """Sealed segments truncated while the daemon serves them, after `records` counted them: each
    read finds the lost batches as a restart would (only their records gone, one log line naming the
    file, the position and the offsets), with large reads (`cat`) and 64-byte ones (`dd`);
    `by-offset/<n>` of a lost record is EIO; no exception becomes an errno."""
    data_dir = tmp_path / "data"
    end = build(data_dir)
    segments = segment_batches(data_dir)
    daemon = make_seglogd(tmp_path, data_dir=data_dir, defaults={"segment.bytes": 6000}, logs={LOG: {}})
    records = daemon / LOG / "records"
    lost: set[int] = set()
    cuts: list[tuple[Path, int]] = []
    try:
        daemon.start()
        assert records.read_bytes() == b"".join(value_of(o) + b"\n" for o in range(end))
        for k, reader in ((2, ["dd", f"if={records}", "bs=64", "status=none"]), (4, ["cat", str(records)])):
            path, headers = segments[k]
            cut = headers[len(headers) // 2]
            os.truncate(path, cut.position + 10)  # the batch there and every one after it are lost
            lost.update(range(cut.base_offset, headers[-1].last_offset + 1))
            cuts.append((path, cut.position))
            expected = b"".join(value_of(o) + b"\n" for o in range(end) if o not in lost)
            for attempt in range(2):
                got = subprocess.run(reader, capture_output=True, timeout=60, check=False)
                assert got.returncode == 0, f"{reader[0]} #{attempt}: {got.stderr!r}"
                assert got.stdout == expected, f"{reader[0]} #{attempt}: {len(got.stdout.splitlines())} lines"
            with pytest.raises(OSError) as exc:
                (daemon / LOG / "by-offset" / str(cut.base_offset + 1)).read_bytes()
            assert exc.value.errno == errno.EIO
            for view in ("records.jsonl", "from/0"):
                got = subprocess.run(["cat", str(daemon / LOG / view)], capture_output=True, check=False)
                assert got.returncode == 0, f"{view}: {got.stderr!r}"
                assert len(got.stdout.splitlines()) == len(expected.splitlines()), view
        assert daemon.stop() == 0
        daemon.start()  # the same damage found at start: the same records
        assert records.read_bytes() == expected
    finally:
        daemon.cleanup()
    stderr = daemon.stderr_path.with_name("seglogd-1.stderr").read_text()  # type: ignore[union-attr]
    assert "Traceback" not in stderr, stderr
    for path, position in cuts:
        named = [line for line in stderr.splitlines() if f"records: {path}: position {position}:" in line]
        # once per format, as at start: values (records and from/0 share the count) and JSON lines
        assert len(named) == 2 and "offsets" in named[0], f"{path} position {position}: {named}\n{stderr}"
